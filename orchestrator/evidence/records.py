"""Evidence records: what one line of the evidence file holds.

A record is one JSON object on one line, in canonical form (``canonical_json``: sorted keys, no spaces,
UTF-8), followed by ``\\n``. Fields that do not apply are left out of the line (never written as ``null``),
so every record has exactly one byte form. The caller describes what happened as an :class:`EvidenceEvent`;
the writer adds ``v``, ``seq``, ``ts``, ``prev_hash`` and ``hash`` and the result is an
:class:`EvidenceRecord`.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationInfo, field_validator

from orchestrator.domain.canonical import canonical_json

FORMAT_VERSION: Final = 1
"""The ``v`` of every record this code writes."""

GENESIS_HASH: Final = "0" * 64
"""``prev_hash`` of the record with ``seq`` 0."""

MAX_RECORD_BYTES: Final = 256 * 1024
"""Upper bound of one encoded line (newline included); bigger events are refused with INPUT.INVALID."""


class EventType(StrEnum):
    """The events the orchestrator records. Files may hold names not listed here (newer writers);
    they still verify: ``EvidenceRecord.event`` is a plain string."""

    REQUEST_RECEIVED = "request_received"
    DECISION_MADE = "decision_made"
    APPROVAL_REQUESTED = "approval_requested"
    APPROVAL_DECIDED = "approval_decided"
    EXECUTION_STARTED = "execution_started"
    EXECUTION_FINISHED = "execution_finished"
    RUN_FAILED = "run_failed"
    EXECUTION_ABANDONED = "execution_abandoned"
    CANCEL_REQUESTED = "cancel_requested"  # who asked (the service's DELETE); the end record follows
    SANDBOX_COLLECTED = "sandbox_collected"  # an orphan removed whose execution already has its end record
    # lifecycle events reported by the container engine
    CONTAINER_CREATED = "container_created"
    CONTAINER_SCHEDULED = "container_scheduled"  # Kubernetes: the scheduler placed the pod on a node
    CONTAINER_STARTED = "container_started"
    CONTAINER_DIED = "container_died"
    CONTAINER_OOM = "container_oom"
    CONTAINER_KILLED = "container_killed"
    CONTAINER_DESTROYED = "container_destroyed"
    # the sandbox's init reported its end (the run was answered from it) and the engine's own account then
    # disagreed (exit code, OOM) or never came: a failure-level note after the end record
    END_UNCONFIRMED = "end_unconfirmed"
    # an interactive session (exec_command) around its execution's own records: input and output as sizes
    # and sha256 only, never their content
    SESSION_OPENED = "session_opened"
    SESSION_INPUT = "session_input"
    SESSION_OUTPUT = "session_output"
    SESSION_CLOSED = "session_closed"
    # a pre-started sandbox (pipeline/pool.py), under its own pool id: ready, then taken or thrown away
    SANDBOX_POOLED = "sandbox_pooled"
    SANDBOX_CLAIMED = "sandbox_claimed"
    SANDBOX_DISCARDED = "sandbox_discarded"
    # egress through our proxy (issue 12): each connection attempt of a sandbox, allowed or refused, with its
    # host, port and byte counts (never a path or payload); past a per-execution bound, a summary counts them
    EGRESS_CONNECTION = "egress_connection"
    EGRESS_SUMMARY = "egress_summary"
    # grants with budgets: what an execution's real usage took from the grant that covered it
    GRANT_CHARGED = "grant_charged"
    # a CI job (ci/jobs.py), under its own id (job-…): opened (who, its CI context, workspace, profile, image),
    # then closed (its steps, each one's end, how the job ended); its steps' records carry its id (data.ci)
    CI_JOB_OPENED = "ci_job_opened"
    CI_JOB_CLOSED = "ci_job_closed"
    # the profiles re-read while running (profiles/source.py), under one id per re-read (profiles-…): each profile
    # it changed (its old and new hashes, the files and their owners), or the new set refused (the old one kept)
    PROFILE_CHANGED = "profile_changed"
    PROFILE_CHANGE_REFUSED = "profile_change_refused"
    # written by the evidence writer itself (no execution): a torn last line was quarantined
    EVIDENCE_RECOVERED = "evidence_recovered"


END_EVENTS: Final[frozenset[str]] = frozenset(
    {EventType.EXECUTION_FINISHED, EventType.RUN_FAILED, EventType.EXECUTION_ABANDONED}
)
"""The events that end an execution: every ``execution_started`` is followed by one of them."""


_HEX64 = r"^[0-9a-f]{64}$"
_TS_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"
_ENGINE_TS_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$"

EventName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_.]{0,63}$")]
Sha256Hex = Annotated[str, Field(pattern=_HEX64)]
ShortText = Annotated[str, Field(min_length=1, max_length=256)]
Label = Annotated[str, Field(min_length=1, max_length=64)]
ErrorCode = Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]*(\.[A-Z0-9_]+)*$", max_length=64)]
Reason = Annotated[str, Field(max_length=16 * 1024)]
EngineTs = Annotated[str, Field(pattern=_ENGINE_TS_PATTERN)]
JsonData = dict[str, JsonValue]


def format_ts(moment: datetime) -> str:
    """RFC 3339 UTC with microseconds and ``Z``: the form of ``ts`` (and a valid ``engine_ts``)."""
    if moment.tzinfo is None:
        raise ValueError("timestamps must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def now_ts() -> str:
    """The writer's clock, in the form of ``ts``."""
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


ENCODED_NEXT = "encoded_next"
"""Validation context key: the caller encodes the event as canonical JSON next (NaN refused there)."""


def _non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_non_finite(item) for item in value.values())
    if isinstance(value, list):
        return any(_non_finite(item) for item in value)
    return False


def _check_finite(value: Any, where: str) -> None:
    """Refuse NaN and infinities anywhere in ``value``, naming the first one's path (the path is built
    only then: every record passes through here)."""
    if not _non_finite(value):
        return
    if isinstance(value, float):
        raise ValueError(f"{where}: {value!r} is not a JSON number (NaN and infinities are refused)")
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        _check_finite(item, f"{where}.{key}" if isinstance(value, dict) else f"{where}[{key}]")


class _EventFields(BaseModel):
    """The fields a caller describes (shared by the event and the record)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    event: EventName = Field(
        description="What happened: an EventType value (lower_snake_case; unknown names are kept as is)."
    )
    tenant: ShortText | None = Field(default=None, description="Owning tenant of the execution.")
    subject: ShortText | None = Field(default=None, description="Who asked (user, agent or service account).")
    tool: Label | None = Field(default=None, description="The tool name as asked (shell_exec, file_write, ...).")
    call_id: ShortText | None = Field(default=None, description="The agent's tool-call id, if it sent one.")
    inputs_digest: Sha256Hex | None = Field(
        default=None, description="sha256 hex of canonical_json of the sanitized request."
    )
    outputs_digest: Sha256Hex | None = Field(
        default=None, description="sha256 hex of the (capped, redacted) outputs of the execution."
    )
    profile_hash: Sha256Hex | None = Field(default=None, description="sha256 hex of the resolved execution profile.")
    policy_version_hash: Sha256Hex | None = Field(default=None, description="sha256 hex of the policy that decided.")
    decision: Label | None = Field(
        default=None,
        description="decision_made: allow | ask | deny; approval_decided: the approval outcome "
        "(approved, approved_for_session, denied, timeout, abort).",
    )
    approver: ShortText | None = Field(
        default=None, description="Who decided an approval: 'rule:<name>', 'terminal:<user>', 'timeout', ..."
    )
    reason: Reason | None = Field(
        default=None, description="Why: the policy or approval reason, or a short failure description."
    )
    status: Label | None = Field(
        default=None, description="Outcome of a step: succeeded, failed, timeout, oom, killed, abandoned, ..."
    )
    error_code: ErrorCode | None = Field(
        default=None, description="The stable error code (e.g. SANDBOX.OOM) when the step failed."
    )
    engine_ts: EngineTs | None = Field(
        default=None, description="Lifecycle events: the time the container engine reported (RFC 3339)."
    )
    data: JsonData | None = Field(
        default=None, description="Further sanitized fields (JSON values only; never a secret)."
    )

    @field_validator("data")
    @classmethod
    def _finite_numbers(cls, data: JsonData | None, info: ValidationInfo) -> JsonData | None:
        # skipped by a caller that encodes the event canonically next (which refuses NaN itself)
        if data is not None and not (info.context and info.context.get(ENCODED_NEXT)):
            _check_finite(data, "data")
        return data


class EvidenceEvent(_EventFields):
    """What the caller records; the writer turns it into an :class:`EvidenceRecord`."""

    execution_id: ShortText = Field(description="The execution this event belongs to (ex-...).")


class EvidenceRecord(_EventFields):
    """One line of the evidence file. Validated strictly: it is read back from JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, strict=True)

    v: int = Field(ge=FORMAT_VERSION, le=FORMAT_VERSION, description="Format version of the record: 1.")
    seq: int = Field(ge=0, description="Position in the file: 0 for the first line, then +1 per line.")
    ts: str = Field(
        pattern=_TS_PATTERN, description="When the writer recorded the event: RFC 3339 UTC, microseconds, Z."
    )
    execution_id: ShortText | None = Field(
        default=None,
        description="The execution this event belongs to; None only for the writer's own records (evidence_recovered).",
    )
    prev_hash: Sha256Hex = Field(description="hash of the record before (seq - 1); 64 zeros for seq 0.")
    hash: Sha256Hex = Field(
        description="sha256 hex of canonical_json of this record without 'hash' (prev_hash included)."
    )

    def fields(self) -> dict[str, Any]:
        """The record as written: JSON values, fields that do not apply left out."""
        return {k: v for k, v in self.model_dump(mode="json").items() if v is not None}

    def to_json_line(self) -> bytes:
        """The exact bytes of this record's line, newline included."""
        return canonical_json(self.fields()) + b"\n"


RECORD_FIELDS: Final[frozenset[str]] = frozenset(EvidenceRecord.model_fields)
REQUIRED_FIELDS: Final[frozenset[str]] = frozenset(
    name for name, info in EvidenceRecord.model_fields.items() if info.is_required()
)
EVENT_FIELDS: Final[frozenset[str]] = frozenset(EvidenceEvent.model_fields)
WRITER_FIELDS: Final[frozenset[str]] = frozenset({"v", "seq", "ts", "prev_hash", "hash"})
