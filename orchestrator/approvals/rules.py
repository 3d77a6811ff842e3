"""Rule-based approvals: ordered rules over the sanitized request, first match wins, default DENIED."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.gate.matching import MatchConditions, Matcher, RequestFacts
from orchestrator.gate.sanitize import analysis_of_sanitized
from orchestrator.yamlfile import load_model_file

GrantOutcome = Literal["approved", "approved_for_session", "denied", "abort"]


class ApprovalRule(MatchConditions):
    name: str = Field(min_length=1, max_length=200, description="Recorded as the approver 'rule:<name>'.")
    outcome: GrantOutcome = Field(description="approved | approved_for_session | denied | abort")
    reason: str = Field(default="", max_length=1000, description="Recorded with the decision.")


class RuleApprovalsConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    rules: list[ApprovalRule] = Field(default_factory=list, description="Ordered; first match wins.")
    default: GrantOutcome = Field(default="denied", description="Outcome when no rule matches.")


class RuleApprover:
    """Deterministic: the same sanitized request always gets the same outcome."""

    def __init__(self, config: RuleApprovalsConfig, default_profile: str = "workspace-write") -> None:
        self.config = config
        self._compiled = [(rule, Matcher.compile(rule)) for rule in config.rules]
        self._default_profile = default_profile

    @property
    def name(self) -> str:
        return "rules"

    @classmethod
    def from_file(cls, path: Path) -> RuleApprover:
        return cls(load_model_file(RuleApprovalsConfig, path, key="approvals"))

    def match(self, request: ApprovalRequest) -> ApprovalResult | None:
        """The first matching rule's outcome; None when no rule matches."""
        sanitized = request.sanitized
        facts = RequestFacts(sanitized, analysis_of_sanitized(sanitized), sanitized.profile or self._default_profile)
        for rule, matcher in self._compiled:
            grants = rule.outcome in ("approved", "approved_for_session")
            if matcher.matches(facts, every_command=grants):
                return ApprovalResult(
                    outcome=ApprovalOutcome(rule.outcome),
                    approver=f"rule:{rule.name}",
                    reason=rule.reason or f"approval rule {rule.name!r} matched",
                )
        return None

    def evaluate(self, request: ApprovalRequest) -> ApprovalResult:
        matched = self.match(request)
        if matched is not None:
            return matched
        return ApprovalResult(
            outcome=ApprovalOutcome(self.config.default),
            approver="rule:default",
            reason="no approval rule matched",
        )

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        return self.evaluate(request)
