"""One error tree with stable codes. Codes are public API: add new ones, never rename."""

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


class ConfigInvalid(OrchestratorError):
    code = "CONFIG.INVALID"
    exit_code = 2


class NoApprovalProvider(OrchestratorError):
    code = "CONFIG.NO_APPROVAL_PROVIDER"


class PolicyDenied(OrchestratorError):
    code = "POLICY.DENIED"


class ApprovalDenied(OrchestratorError):
    code = "APPROVAL.DENIED"


class ApprovalTimeout(OrchestratorError):
    code = "APPROVAL.TIMEOUT"


class ApprovalAborted(OrchestratorError):
    code = "APPROVAL.ABORTED"


class ApprovalNotPending(OrchestratorError):
    """An answer to an ask that is no longer pending: it timed out, was decided by someone else or
    withdrawn first. The answer changed nothing; the message says what the store kept."""

    code = "APPROVAL.NOT_PENDING"
    exit_code = 1


class ProfileNotFound(OrchestratorError):
    code = "PROFILE.NOT_FOUND"


class SandboxUnavailable(OrchestratorError):
    code = "SANDBOX.UNAVAILABLE"
    retryable = True


class SandboxStartFailed(OrchestratorError):
    code = "SANDBOX.START_FAILED"
    retryable = True


class SandboxTimeout(OrchestratorError):
    code = "SANDBOX.TIMEOUT"


class SandboxOOM(OrchestratorError):
    code = "SANDBOX.OOM"


class SandboxPidsLimit(OrchestratorError):
    """The sandbox reached its pids limit: under gVisor the runtime stopped it (the output so far is
    kept); under runc the refused forks failed with EAGAIN and this is a note beside the exit."""

    code = "SANDBOX.PIDS_LIMIT"


class SandboxOutputLimit(OrchestratorError):
    code = "SANDBOX.OUTPUT_LIMIT"


class SandboxWorkspaceLimit(OrchestratorError):
    """The run passed its workspace write budget (bytes or files): the sandbox was killed."""

    code = "SANDBOX.WORKSPACE_LIMIT"


class SideEffectsIncomplete(OrchestratorError):
    """The workspace side-effect record is not complete (something was not examined, or set-id bits could
    not be removed): what the run changed may be more than the record says."""

    code = "SANDBOX.SIDE_EFFECTS_INCOMPLETE"


class ExecutionCancelled(OrchestratorError):
    code = "EXECUTION.CANCELLED"
    exit_code = 130


class EvidenceCorrupt(OrchestratorError):
    code = "EVIDENCE.CORRUPT"
    exit_code = 1


class EvidenceIncomplete(OrchestratorError):
    """The chain is intact, but an execution began and has no end record (and its deadline passed)."""

    code = "EVIDENCE.INCOMPLETE"
    exit_code = 3


class EvidenceUnavailable(OrchestratorError):
    code = "EVIDENCE.UNAVAILABLE"


class SessionNotFound(OrchestratorError):
    code = "SESSION.NOT_FOUND"


class InternalError(OrchestratorError):
    code = "INTERNAL"


def all_error_types() -> list[type[OrchestratorError]]:
    """Every concrete error class, for the README table test."""
    seen: list[type[OrchestratorError]] = []
    stack: list[type[OrchestratorError]] = [OrchestratorError]
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.append(cls)
        stack.extend(cls.__subclasses__())
    return seen
