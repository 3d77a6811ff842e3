"""Rule-based approvals: ordered rules over the sanitized request, first match wins, default DENIED."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.hosts import Allowlist, parse_pattern
from orchestrator.gate.config import EgressPatternText
from orchestrator.gate.matching import MatchConditions, Matcher, RequestFacts
from orchestrator.gate.sanitize import analysis_of_sanitized
from orchestrator.yamlfile import load_model_file

GrantOutcome = Literal["approved", "approved_for_session", "denied", "abort"]


class ApprovalRule(MatchConditions):
    name: str = Field(min_length=1, max_length=200, description="Recorded as the approver 'rule:<name>'.")
    outcome: GrantOutcome = Field(description="approved | approved_for_session | denied | abort")
    reason: str = Field(default="", max_length=1000, description="Recorded with the decision.")
    network: list[EgressPatternText] | None = Field(
        default=None,
        description="The hosts an approving rule may approve: an ask about egress is approved only by a rule "
        "whose patterns cover every host asked (none: it approves no ask about hosts).",
    )
    writable_root: bool = Field(
        default=False, description="Whether an approving rule may approve an ask for a writable root."
    )


def names_escalations(request: ApprovalRequest, network: Sequence[str], writable_root: bool) -> bool:
    """Whether an answer that names ``network`` patterns and (or not) a writable root may approve ``request``:
    every host it asks about covered, its writable root named (a rule or an auto-approve entry alike)."""
    if request.sanitized.sandbox_permissions.writable_root and not writable_root:
        return False
    patterns = Allowlist(network)
    return all(patterns.covers(parse_pattern(host)) for host in request.network_asked)


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
            if grants and not names_escalations(request, rule.network or (), rule.writable_root):
                continue
            if matcher.matches(facts, every_command=grants):
                return ApprovalResult(
                    outcome=ApprovalOutcome(rule.outcome),
                    approver=f"rule:{rule.name}",
                    reason=rule.reason or f"approval rule {rule.name!r} matched",
                )
        return None

    def refusal(self, request: ApprovalRequest) -> ApprovalResult | None:
        """The first matching rule's outcome when it says no (denied, abort): final, whatever else might
        approve the ask (auto-approve, a grant)."""
        matched = self.match(request)
        return matched if matched is not None and not matched.outcome.grants else None

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
