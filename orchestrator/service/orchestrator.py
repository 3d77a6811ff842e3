"""The Orchestrator: the one place that wires gate, approvals and evidence together.

Every request goes: parse → gate (sanitize, intent, risk, policy, key) → approval when asked →
an authorization whose last record is durable before anything may run. Every refusal is recorded
with its stable code and raised as an OrchestratorError.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from orchestrator.approvals.base import ApprovalProvider, decide
from orchestrator.approvals.session import SessionGrants
from orchestrator.domain.canonical import canonical_sha256
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult, Decision
from orchestrator.domain.errors import (
    ApprovalAborted,
    ApprovalDenied,
    ApprovalTimeout,
    InputInvalid,
    NoApprovalProvider,
    OrchestratorError,
    PolicyDenied,
)
from orchestrator.domain.ids import ExecutionId, new_execution_id
from orchestrator.domain.requests import ExecCommandRequest, Request, WriteStdinRequest, parse_request
from orchestrator.evidence import EventType, EvidenceEvent, EvidenceWriter
from orchestrator.gate.gate import Gate, GateResult
from orchestrator.gate.policy import PolicySource

log = logging.getLogger(__name__)

_REFUSALS: dict[ApprovalOutcome, type[OrchestratorError]] = {
    ApprovalOutcome.DENIED: ApprovalDenied,
    ApprovalOutcome.ABORT: ApprovalAborted,
    ApprovalOutcome.TIMEOUT: ApprovalTimeout,
}


@dataclass(frozen=True, slots=True)
class Authorization:
    """A yes: the request may run. ``approval`` is None when the policy allowed it outright."""

    execution_id: ExecutionId
    request: Request
    gate: GateResult
    approval: ApprovalResult | None
    approved_by: str

    def summary(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "decision": self.gate.decision.decision.value,
            "approved_by": self.approved_by,
            "approval_key": self.gate.approval_key,
        }


class Orchestrator:
    def __init__(
        self,
        *,
        evidence: EvidenceWriter,
        policy: PolicySource | None = None,
        approvals: ApprovalProvider | None = None,
        workspace: str | os.PathLike[str] | None = None,
        grants: SessionGrants | None = None,
    ) -> None:
        self.gate = Gate(policy, workspace=workspace)
        self.evidence = evidence
        self.approvals = approvals
        self.grants = grants or SessionGrants()

    # -- evidence helpers ------------------------------------------------------------------
    async def _record(
        self,
        event: EventType,
        execution_id: str,
        gate: GateResult | None,
        *,
        durable: bool = False,
        **fields: Any,
    ) -> None:
        base: dict[str, Any] = {"event": event, "execution_id": execution_id}
        if gate is not None:
            ctx = gate.sanitized.context
            base.update(
                tenant=ctx.tenant,
                subject=ctx.subject,
                tool=gate.sanitized.tool,
                call_id=ctx.call_id,
                inputs_digest=canonical_sha256(gate.sanitized.public()),
                policy_version_hash=gate.decision.policy_version_hash,
            )
        base.update(fields)
        if durable:
            # waits for this record and everything queued before it to be fsynced
            await self.evidence.append(EvidenceEvent(**base), durable=True)
        else:
            self.evidence.append_nowait(EvidenceEvent(**base))

    async def _refuse(self, execution_id: str, gate: GateResult | None, err: OrchestratorError) -> OrchestratorError:
        err.details.setdefault("execution_id", execution_id)
        await self._record(
            EventType.RUN_FAILED,
            execution_id,
            gate,
            durable=True,
            status="refused",
            error_code=err.code,
            reason=err.message,
        )
        return err

    # -- the flow --------------------------------------------------------------------------
    async def authorize(self, raw: Any) -> Authorization:
        """Decide ``raw`` (a request model or dict). Returns an Authorization or raises the refusal."""
        execution_id = new_execution_id()
        try:
            request = parse_request(raw)
        except InputInvalid as err:
            # nothing of the input is recorded but the names of the bad fields
            await self._record(
                EventType.RUN_FAILED,
                execution_id,
                None,
                durable=True,
                tenant="unknown",
                subject="unknown",
                status="refused",
                error_code=err.code,
                reason=err.message,
                data={"fields": err.details.get("fields")},
            )
            err.details["execution_id"] = execution_id
            raise

        gate = self.gate.evaluate(request)
        decision = gate.decision
        await self._record(
            EventType.REQUEST_RECEIVED,
            execution_id,
            gate,
            data={"sanitized": gate.sanitized.public(), "approval_key": gate.approval_key},
        )
        await self._record(
            EventType.DECISION_MADE,
            execution_id,
            gate,
            durable=decision.decision is not Decision.ASK,
            decision=decision.decision.value,
            reason=decision.reason,
            data={"matched_rule": decision.matched_rule, "risk": decision.risk.model_dump(mode="json")},
        )
        if decision.decision is Decision.DENY:
            raise await self._refuse(execution_id, gate, PolicyDenied(decision.reason))
        if decision.decision is Decision.ALLOW:
            return self._authorized(execution_id, request, gate, None, "policy")

        approval = await self._approve(execution_id, request, gate)
        return self._authorized(execution_id, request, gate, approval, approval.approver)

    def _authorized(
        self,
        execution_id: ExecutionId,
        request: Request,
        gate: GateResult,
        approval: ApprovalResult | None,
        approved_by: str,
    ) -> Authorization:
        if isinstance(request, ExecCommandRequest):
            # the exec session this command opens is named by its execution id; write_stdin to it
            # is covered by this authorization
            self.grants.approve_exec_session(execution_id, execution_id)
        return Authorization(execution_id, request, gate, approval, approved_by)

    async def _approve(self, execution_id: ExecutionId, request: Request, gate: GateResult) -> ApprovalResult:
        key = gate.approval_key
        session = request.session_id if not isinstance(request, WriteStdinRequest) else None
        cached: ApprovalResult | None = None
        if isinstance(request, WriteStdinRequest):
            origin = self.grants.exec_session_origin(request.session_id)
            if origin is not None:
                cached = ApprovalResult(
                    outcome=ApprovalOutcome.APPROVED,
                    approver=f"exec-session:{origin}",
                    reason="input to an approved exec session",
                )
        elif self.grants.has_key(session, key):
            cached = ApprovalResult(
                outcome=ApprovalOutcome.APPROVED_FOR_SESSION,
                approver="session-cache",
                reason=f"approved earlier in session {session}",
            )
        if cached is not None:
            await self._record(
                EventType.APPROVAL_DECIDED,
                execution_id,
                gate,
                durable=True,
                decision=cached.outcome.value,
                approver=cached.approver,
                reason=cached.reason,
                data={"approval_key": key, "cached": True},
            )
            return cached

        if self.approvals is None:
            raise await self._refuse(
                execution_id,
                gate,
                NoApprovalProvider(f"approval needed ({gate.decision.reason}) but no approval provider is configured"),
            )
        timeout_s = self.gate.policy.current().config.approval_timeout_s
        ask = ApprovalRequest(
            execution_id=execution_id,
            approval_key=key,
            sanitized=gate.sanitized,
            policy_reason=gate.decision.reason,
            timeout_s=timeout_s,
        )
        await self._record(
            EventType.APPROVAL_REQUESTED,
            execution_id,
            gate,
            data={"approval_key": key, "provider": self.approvals.name, "timeout_s": timeout_s},
        )
        try:
            result = await decide(self.approvals, ask)
        except OrchestratorError as err:
            raise await self._refuse(execution_id, gate, err) from None
        await self._record(
            EventType.APPROVAL_DECIDED,
            execution_id,
            gate,
            durable=True,
            decision=result.outcome.value,
            approver=result.approver,
            reason=result.reason,
            data={"approval_key": key, "cached": False},
        )
        if not result.outcome.grants:
            refusal = _REFUSALS[result.outcome]
            raise await self._refuse(execution_id, gate, refusal(f"{result.approver}: {result.reason}".rstrip(": ")))
        if result.outcome is ApprovalOutcome.APPROVED_FOR_SESSION and session is not None:
            self.grants.grant_key(session, key)
        return result

    async def aclose(self) -> None:
        await self.evidence.close()
