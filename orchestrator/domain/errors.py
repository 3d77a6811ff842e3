"""One error tree with stable codes. Codes are public API: add new ones, never rename.

Each code carries its CLI exit code and its HTTP status side by side (the API, the client and the
table of docs/errors.md read them from here). ``http_status`` None: never a response's status — the error is part
of an execution's outcome, reported inside the execution (HTTP 200).
"""

from __future__ import annotations

from typing import Any, ClassVar


class OrchestratorError(Exception):
    """Root of every error the orchestrator raises on purpose.

    ``message`` must already be safe to show: built from sanitized data only, never from a secret.
    ``details`` carries structured context (field names, file and line, the engine's payload).
    """

    code: ClassVar[str] = "INTERNAL"
    retryable: ClassVar[bool] = False
    exit_code: ClassVar[int] = 125
    http_status: ClassVar[int | None] = 500

    def __init__(self, message: str, *, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InputInvalid(OrchestratorError):
    code = "INPUT.INVALID"
    exit_code = 2
    http_status = 400


class ConfigInvalid(OrchestratorError):
    code = "CONFIG.INVALID"
    exit_code = 2
    http_status = 500


class NoApprovalProvider(OrchestratorError):
    code = "CONFIG.NO_APPROVAL_PROVIDER"
    http_status = 503


class PolicyDenied(OrchestratorError):
    code = "POLICY.DENIED"
    http_status = 403


class GrantExhausted(OrchestratorError):
    """A grant that bounds what it matches (``on_exhausted: refuse``, e.g. a CI job's) matches the request and
    has no room left for it: refused, never asked. ``details["grant_id"]`` names it."""

    code = "GRANT.EXHAUSTED"
    http_status = 403


class ApprovalDenied(OrchestratorError):
    code = "APPROVAL.DENIED"
    http_status = 403


class ApprovalTimeout(OrchestratorError):
    code = "APPROVAL.TIMEOUT"
    http_status = 403


class ApprovalAborted(OrchestratorError):
    code = "APPROVAL.ABORTED"
    http_status = 403


class ApprovalNotPending(OrchestratorError):
    """An answer to an ask that is no longer pending: it timed out, was decided by someone else or
    withdrawn first. The answer changed nothing; the message says what the store kept."""

    code = "APPROVAL.NOT_PENDING"
    exit_code = 1
    http_status = 409


class ProfileNotFound(OrchestratorError):
    code = "PROFILE.NOT_FOUND"
    http_status = 400


class CiUnsupported(OrchestratorError):
    """A CI job or step asks for what the controller does not give a sandbox (services, port mappings, host
    mounts, container create options, an image built from a Dockerfile): refused with this code in the job's
    log, never silently dropped."""

    code = "CI.UNSUPPORTED"
    exit_code = 2
    http_status = 422


class SandboxUnavailable(OrchestratorError):
    code = "SANDBOX.UNAVAILABLE"
    retryable = True
    http_status = 503


class SandboxStartFailed(OrchestratorError):
    code = "SANDBOX.START_FAILED"
    retryable = True
    http_status = 503


class SandboxTimeout(OrchestratorError):
    code = "SANDBOX.TIMEOUT"
    http_status = None


class SandboxOOM(OrchestratorError):
    code = "SANDBOX.OOM"
    http_status = None


class SandboxPidsLimit(OrchestratorError):
    """The sandbox reached its pids limit: under gVisor the runtime stopped it (the output so far is
    kept); under runc the refused forks failed with EAGAIN and this is a note beside the exit."""

    code = "SANDBOX.PIDS_LIMIT"
    http_status = None


class SandboxOutputLimit(OrchestratorError):
    code = "SANDBOX.OUTPUT_LIMIT"
    http_status = None


class SandboxGrantLimit(OrchestratorError):
    """The run reached the end of what its bounding grant (``on_exhausted: refuse``) had left for it — its wall
    or CPU time, before its own timeout — and was stopped."""

    code = "SANDBOX.GRANT_LIMIT"
    http_status = None


class SandboxWorkspaceLimit(OrchestratorError):
    """The run passed its workspace write budget (bytes or files): the sandbox was killed."""

    code = "SANDBOX.WORKSPACE_LIMIT"
    http_status = None


class SideEffectsIncomplete(OrchestratorError):
    """The workspace side-effect record is not complete (something was not examined, or set-id bits could
    not be removed): what the run changed may be more than the record says."""

    code = "SANDBOX.SIDE_EFFECTS_INCOMPLETE"
    http_status = None


class SandboxRestricted(OrchestratorError):
    """The command failed where the sandbox held it back: an egress connection the proxy refused, a write
    to the read-only root. ``details["denied"]`` says what; ``details["escalation"]`` is what a new request
    may ask for (with ``retry_of``: the failed execution), through policy and approval like any other."""

    code = "SANDBOX.RESTRICTED"
    http_status = None


class ExecutionCancelled(OrchestratorError):
    code = "EXECUTION.CANCELLED"
    exit_code = 130
    http_status = None


class EvidenceCorrupt(OrchestratorError):
    code = "EVIDENCE.CORRUPT"
    exit_code = 1
    http_status = 500


class EvidenceIncomplete(OrchestratorError):
    """The chain is intact, but an execution began and has no end record (and its deadline passed)."""

    code = "EVIDENCE.INCOMPLETE"
    exit_code = 3
    http_status = None


class EvidenceUnavailable(OrchestratorError):
    code = "EVIDENCE.UNAVAILABLE"
    http_status = 503


class SessionNotFound(OrchestratorError):
    """No such session (ended, or another tenant's or subject's: never told apart)."""

    code = "SESSION.NOT_FOUND"
    exit_code = 1
    http_status = 404


class SessionLimit(OrchestratorError):
    """The tenant already has as many open sessions as it may (close one, or wait for one to end)."""

    code = "SESSION.LIMIT"
    retryable = True
    exit_code = 1
    http_status = 429


class Unauthorized(OrchestratorError):
    """No bearer token, or one the service does not know (never says which)."""

    code = "AUTH.UNAUTHORIZED"
    exit_code = 2
    http_status = 401


class Forbidden(OrchestratorError):
    """The token is known but its role may not do this (or not for this tenant)."""

    code = "AUTH.FORBIDDEN"
    exit_code = 2
    http_status = 403


class NotFound(OrchestratorError):
    """No such execution or approval — or one of another tenant's (never told apart)."""

    code = "RESOURCE.NOT_FOUND"
    exit_code = 1
    http_status = 404


class ExecutionNotRunning(OrchestratorError):
    """A cancel of an execution that already ended: nothing changed."""

    code = "EXECUTION.NOT_RUNNING"
    exit_code = 1
    http_status = 409


class RequestTooLarge(OrchestratorError):
    code = "REQUEST.TOO_LARGE"
    exit_code = 2
    http_status = 413


class RateLimited(OrchestratorError):
    code = "REQUEST.RATE_LIMITED"
    retryable = True
    http_status = 429


class InternalError(OrchestratorError):
    code = "INTERNAL"


def error_class(code: str) -> type[OrchestratorError]:
    """The class of a code (the client raises what the library would); unknown codes are INTERNAL."""
    return _BY_CODE.get(code, InternalError)


def all_error_types() -> list[type[OrchestratorError]]:
    """Every concrete error class, for the error table's test (docs/errors.md)."""
    seen: list[type[OrchestratorError]] = []
    stack: list[type[OrchestratorError]] = [OrchestratorError]
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen


_BY_CODE: dict[str, type[OrchestratorError]] = {
    cls.code: cls for cls in all_error_types() if cls is not OrchestratorError and cls.code != "INTERNAL"
}
_BY_CODE["INTERNAL"] = InternalError
