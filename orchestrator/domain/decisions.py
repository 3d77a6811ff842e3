"""Outcomes of the policy and of approvals."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.domain.sanitized import Intent, Risk, SanitizedRequest


class Decision(StrEnum):
    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


class Mode(StrEnum):
    ASK = "ask"
    ALLOW = "allow"
    DENY = "deny"


class ApprovalOutcome(StrEnum):
    APPROVED = "approved"
    APPROVED_FOR_SESSION = "approved_for_session"
    DENIED = "denied"
    ABORT = "abort"
    TIMEOUT = "timeout"

    @property
    def grants(self) -> bool:
        return self in (ApprovalOutcome.APPROVED, ApprovalOutcome.APPROVED_FOR_SESSION)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class PolicyDecision(_Frozen):
    decision: Decision
    reason: str
    matched_rule: str | None = Field(description="'denylist:sudo', 'rule:3:name', 'allowlist:ls', 'mode', ...")
    policy_version_hash: str
    risk: Risk
    intent: Intent | None


class ApprovalRequest(_Frozen):
    """What an approver sees: sanitized only."""

    execution_id: str
    approval_key: str
    sanitized: SanitizedRequest
    policy_reason: str
    timeout_s: float = Field(gt=0)
    network_asked: list[str] = Field(
        default_factory=list,
        description="The host:port patterns this ask is about (its egress the policy does not cover and no "
        "earlier approval of its session did): what approving it lets the sandbox reach.",
    )


def utcnow() -> datetime:
    return datetime.now(UTC)


class ApprovalResult(_Frozen):
    outcome: ApprovalOutcome
    approver: str = Field(description="Who decided: 'rule:<name>', 'terminal:<user>', 'queue:<user>', 'timeout'.")
    reason: str = ""
    decided_at: datetime = Field(default_factory=utcnow)
