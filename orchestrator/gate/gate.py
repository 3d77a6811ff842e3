"""The gate: sanitize → intent → risk → policy → approval key, in one call, without side effects."""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.domain.canonical import canonical_sha256
from orchestrator.domain.decisions import PolicyDecision
from orchestrator.domain.ids import ApprovalKey
from orchestrator.domain.requests import Request
from orchestrator.domain.sanitized import SanitizedRequest
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.intent import ShellAnalysis
from orchestrator.gate.policy import PolicySource
from orchestrator.gate.sanitize import sanitize

DEFAULT_PROFILE = "workspace-write"


@dataclass(frozen=True, slots=True)
class GateResult:
    sanitized: SanitizedRequest
    analysis: ShellAnalysis | None
    decision: PolicyDecision
    approval_key: ApprovalKey
    # the sanitized request as recorded, and its digest: computed once, every record of the execution
    # carries them
    public: dict[str, Any] = field(init=False, repr=False, compare=False)
    inputs_digest: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        public = self.sanitized.public()
        object.__setattr__(self, "public", public)
        object.__setattr__(self, "inputs_digest", canonical_sha256(public))

    def to_json(self) -> dict[str, Any]:
        """The `sandboxctl check --json` shape."""
        d = self.decision
        return {
            "decision": d.decision.value,
            "reason": d.reason,
            "matched_rule": d.matched_rule,
            "risk": d.risk.model_dump(mode="json"),
            "intent": d.intent.model_dump(mode="json") if d.intent is not None else None,
            "approval_key": self.approval_key,
            "policy_version_hash": d.policy_version_hash,
            "sanitized": self.sanitized.public(),
        }


class Gate:
    def __init__(
        self,
        policy: PolicySource | None = None,
        *,
        workspace: str | os.PathLike[str] | None = None,
        default_profile: str = DEFAULT_PROFILE,
        input_key: Callable[[], bytes] | None = None,
    ) -> None:
        self.policy = policy if policy is not None else PolicySource()
        self.workspace = workspace
        self.default_profile = default_profile
        self.input_key = input_key  # write_stdin's digest is keyed with it (sanitize.keyed_digest)

    def evaluate(
        self,
        request: Request,
        *,
        profile_egress: Sequence[str] = (),
        egress_approved: Collection[str] = (),
    ) -> GateResult:
        """``profile_egress``: the canonical egress patterns of the request's profile (they are part of what is
        asked); ``egress_approved``: patterns approved earlier in the request's session (not asked again)."""
        sanitized, analysis = sanitize(
            request, workspace=self.workspace, input_key=self.input_key, profile_egress=profile_egress
        )
        decision = self.policy.current().decide(
            sanitized, analysis, profile=request.profile or self.default_profile, egress_approved=egress_approved
        )
        return GateResult(sanitized, analysis, decision, approval_key(sanitized))
