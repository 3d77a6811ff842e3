"""The response shapes, defined once: `sandboxctl --json`, the HTTP API, its OpenAPI document and the
Python client all use these models. Everything here is already sanitized (no env values, no stdin,
no file content) and output is redacted and capped before it gets here.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.domain.ci import CiRecord
from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.requests import (
    DEFAULT_SESSION_OUTPUT_BYTES,
    DEFAULT_YIELD_MS,
    MAX_SESSION_OUTPUT_BYTES,
    MAX_YIELD_MS,
    StdinText,
)


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class ErrorBody(_Wire):
    code: str = Field(description="Stable error code (docs/errors.md).")
    message: str = Field(description="What happened, safe to show (never a secret).")
    retryable: bool = Field(default=False, description="Trying again later may succeed.")
    details: dict[str, Any] | None = Field(default=None, description="Structured context: fields, file, line, ...")

    @classmethod
    def of(cls, err: OrchestratorError) -> ErrorBody:
        return cls(code=err.code, message=err.message, retryable=err.retryable, details=err.details or None)


class ErrorResponse(_Wire):
    """The body of every error response."""

    error: ErrorBody


class ExecutionState(StrEnum):
    """Where an execution is. The last four are final."""

    RECEIVED = "received"  # accepted; the gate is deciding
    PENDING_APPROVAL = "pending_approval"
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # ran to exit 0 within every limit
    FAILED = "failed"  # ran, and exited non-zero or hit a sandbox limit; or the sandbox failed
    REFUSED = "refused"  # never ran: denied by the policy or an approver, timed out, invalid
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in _FINAL


_FINAL = frozenset({ExecutionState.SUCCEEDED, ExecutionState.FAILED, ExecutionState.REFUSED, ExecutionState.CANCELLED})


class RunResult(_Wire):
    """A command that ran, whatever its exit: the `sandboxctl run --json` shape."""

    ok: bool = Field(description="Exit 0 within every limit, with a complete workspace record.")
    execution_id: str
    decision: str = Field(description="allow | ask (then approved)")
    exit_code: int | None = Field(description="None when the sandbox never ran to an exit.")
    stdout: str = Field(description="Redacted, then capped to the profile's limit (UTF-8, invalid bytes replaced).")
    stderr: str
    truncated: bool = Field(description="Output passed the profile's cap.")
    timed_out: bool
    oom_killed: bool
    duration_ms: int
    side_effects: dict[str, Any] | None = Field(description="Workspace changes: counts, sizes, sha256 per entry.")
    error: ErrorBody | None = Field(description="Why the run is not ok, when a sandbox limit ended it.")


class RunRefusal(RunResult):
    """`sandboxctl run --json` when the command did not run to an end: RunResult's fields, nothing ran, and
    the error; the execution id and the decision are unknown when the run was stopped before the gate named
    them."""

    execution_id: str | None  # type: ignore[assignment]
    decision: str | None = Field(description="allow | ask | deny, when the gate decided")  # type: ignore[assignment]

    @classmethod
    def of(cls, err: OrchestratorError, decision: str | None) -> RunRefusal:
        return cls(
            ok=False,
            execution_id=err.details.get("execution_id"),
            decision=err.details.get("decision", decision),
            exit_code=None,
            stdout="",
            stderr="",
            truncated=False,
            timed_out=False,
            oom_killed=False,
            duration_ms=0,
            side_effects=None,
            error=ErrorBody.of(err),
        )


class ApprovalInfo(_Wire):
    """The approval an execution waited for (its id is the execution's id)."""

    approval_id: str
    deadline: datetime | None = Field(default=None, description="When silence becomes APPROVAL.TIMEOUT.")
    outcome: str | None = Field(default=None, description="approved | approved_for_session | denied | abort | timeout")
    approver: str | None = None
    reason: str | None = None


class ExecutionView(_Wire):
    execution_id: str
    state: ExecutionState
    tenant: str
    subject: str
    tool: str
    session_id: str | None = None
    created_at: datetime
    updated_at: datetime
    request: dict[str, Any] = Field(description="The sanitized request (env keys only, content as size + sha256).")
    decision: str | None = Field(default=None, description="allow | ask | deny, once the gate decided.")
    reason: str | None = Field(default=None, description="The policy's reason.")
    risk_level: str | None = None
    matched_rule: str | None = None
    profile: str | None = None
    approval: ApprovalInfo | None = None
    result: RunResult | None = Field(default=None, description="Once the command ran.")
    error: ErrorBody | None = Field(default=None, description="Why it was refused, cancelled or failed.")
    cancelled_by: str | None = None


class ExecutionPage(_Wire):
    items: list[ExecutionView]
    next_cursor: str | None = Field(description="Pass as ?cursor= for the next page; None on the last.")


class SubmitAnswer(_Wire):
    """202 (accepted: not finished yet) or 200 (finished within ?wait=)."""

    execution: ExecutionView


class PendingApprovalView(_Wire):
    approval_id: str
    execution_id: str
    tenant: str
    subject: str
    request: dict[str, Any] = Field(description="The sanitized request.")
    policy_reason: str
    risk_level: str | None = None
    risk_reasons: str | None = None
    matched_rule: str | None = None
    profile: str | None = None
    ci: CiRecord | None = Field(
        default=None,
        description="The CI job the ask is a step of (the request's context.ci, with the job_key every step of "
        "that job run shares): which repository, workflow, job and step, ref, event and actor.",
    )
    created_at: datetime
    deadline: datetime
    seconds_left: float


class ApprovalList(_Wire):
    items: list[PendingApprovalView]


class ApprovalDecisionBody(_Wire):
    decision: Literal["approve", "approve_for_session", "deny"]
    reason: str = Field(default="", max_length=1000, description="Recorded in the evidence with the approver.")


class ApprovalAnswer(_Wire):
    approval_id: str
    outcome: str = Field(description="What the store kept (yours, or the timeout's / another approver's).")
    approver: str
    reason: str


class EvidencePage(_Wire):
    records: list[dict[str, Any]] = Field(description="Evidence records as written (already sanitized).")


class OutputChunk(_Wire):
    """One SSE `output` event: redacted, within the caps."""

    stream: Literal["stdout", "stderr"]
    data: str = Field(description="UTF-8 text (bytes that are not UTF-8 replaced).")


class SessionAnswer(_Wire):
    """An interactive session's answer: its output since the last answer (redacted) and its state."""

    session_id: str = Field(description="The session (its execution's id).")
    stdout: str = Field(description="UTF-8 text (bytes that are not UTF-8 replaced); with a terminal, everything.")
    stderr: str = Field(description="Without a terminal: the command's stderr, kept apart.")
    running: bool = Field(description="False once the command ended and its sandbox is gone.")
    exit_code: int | None = Field(default=None, description="Once it ended.")
    closed_reason: Literal["exit", "idle", "lifetime", "closed", "cancelled", "failed"] | None = None
    pending_bytes: int = Field(default=0, description="Output already produced that waits for the next call.")
    dropped_bytes: int = Field(default=0, description="Output nobody took before the session's buffer filled.")
    error: ErrorBody | None = Field(default=None, description="Why it ended, if not by its own exit.")
    output_capped: list[Literal["stdout", "stderr"]] = Field(
        default_factory=list,
        description="Streams that passed the profile's output cap (stdout_max_bytes / stderr_max_bytes): nothing"
        " more of them is shown in this session (its end record counts all of it).",
    )


class StdinBody(_Wire):
    """``POST /v1/sessions/{id}/stdin``: characters for the command's stdin (an empty string polls)."""

    # StdinText: what the write_stdin request it becomes takes (at most MAX_STDIN_CHARS, valid Unicode)
    chars: StdinText = Field(default="", description="Characters to write (secret: recorded as size and keyed digest).")
    yield_time_ms: int = Field(
        default=DEFAULT_YIELD_MS, ge=0, le=MAX_YIELD_MS, description="How long to collect output."
    )
    max_output_bytes: int = Field(
        default=DEFAULT_SESSION_OUTPUT_BYTES, ge=1, le=MAX_SESSION_OUTPUT_BYTES, description="At most this much output."
    )


class ResizeBody(_Wire):
    """``POST /v1/sessions/{id}/resize``: the terminal's window size."""

    rows: int = Field(ge=1, le=10_000)
    cols: int = Field(ge=1, le=10_000)


class Health(_Wire):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str] = Field(default_factory=dict, description="Each readiness check: 'ok' or why not.")


class Identity(_Wire):
    """Who the token is (``GET /v1/whoami``)."""

    subject: str
    role: str = Field(description="agent | approver | admin")
    tenants: list[str] = Field(description="The tenants it acts for; empty for an admin (every tenant).")
