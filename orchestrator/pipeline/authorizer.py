"""The Authorizer: whether a request may run, and on whose word. It needs no backend.

parse → gate (sanitize, intent, risk, policy, key) → when the policy asks: an approval rule's no (final) →
session approvals (approved earlier in the session; a session's own input) → auto-approve (trusted tenants
or tools) → a budget grant with room (its reservation is held for the run) → the approval provider. A bound
(a grant with on_exhausted: refuse) answers no ask: every run it matches, allowed or approved, reserves against
it (and is narrowed to what it has left); one it has no room for is refused, GRANT.EXHAUSTED — before anyone is
asked. Every refusal is recorded with its stable code (durable) and raised; a yes is an ``Authorization``, its
last record durable before anything may run (or queued in order, see ``authorize``'s ``durable``).
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from dataclasses import dataclass
from typing import Any

from orchestrator.approvals.auto import AutoApprove
from orchestrator.approvals.base import ApprovalProvider, SettlesInStore, decide, is_suspend
from orchestrator.approvals.rules import RuleApprover
from orchestrator.approvals.session import ExecSessionOrigin, Scope, SessionApprovals, egress_approval_key
from orchestrator.budgets import cover
from orchestrator.budgets.book import Reservation
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult, Decision
from orchestrator.domain.errors import (
    ApprovalAborted,
    ApprovalDenied,
    ApprovalTimeout,
    ConfigInvalid,
    ExecutionCancelled,
    GrantExhausted,
    InputInvalid,
    NoApprovalProvider,
    OrchestratorError,
    PolicyDenied,
)
from orchestrator.domain.ids import ExecutionId, new_execution_id
from orchestrator.domain.requests import ExecCommandRequest, Request, WriteStdinRequest, parse_request
from orchestrator.evidence import EventType
from orchestrator.evidence.input_key import load_input_key
from orchestrator.gate.gate import Gate, GateResult
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.governing import Governing, check_out_of_earlier_workspaces
from orchestrator.pipeline.observer import GuardedObserver, Observer
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.pipeline.recorder import Evidence, ExecutionRecorder
from orchestrator.pipeline.reservations import Reservations
from orchestrator.pipeline.retries import RestrictedRuns
from orchestrator.pipeline.tasks import cancel_reason, despite_cancellation

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
    # a grant answered the ask: what it reserved for this run (the run is narrowed to it, then charged)
    reservation: Reservation | None = None
    # what each bound matching the run reserved for it (the run is narrowed to each, then charged to each)
    bounds: tuple[Reservation, ...] = ()

    @property
    def reservations(self) -> tuple[Reservation, ...]:
        """Every reservation the run holds: the grant that answered its ask (if one did), then its bounds."""
        return self.bounds if self.reservation is None else (self.reservation, *self.bounds)

    def summary(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "decision": self.gate.decision.decision.value,
            "approved_by": self.approved_by,
            "approval_key": self.gate.approval_key,
        }


class Authorizer:
    def __init__(
        self,
        *,
        evidence: Evidence,
        policy: PolicySource | None = None,
        approvals: ApprovalProvider | None = None,
        workspace: str | os.PathLike[str] | None = None,
        session_approvals: SessionApprovals | None = None,
        auto_approve: AutoApprove | None = None,
        reservations: Reservations | None = None,
        profiles: Profiles | None = None,
        restricted: RestrictedRuns | None = None,
        governing: tuple[Governing, ...] = (),
    ) -> None:
        self.evidence = evidence
        # what is typed into sessions is digested under a key kept beside the evidence (evidence.input_key)
        path = evidence.writer.path
        self.gate = Gate(policy, workspace=workspace, input_key=functools.cache(lambda: load_input_key(path)))
        self.approvals = approvals
        self.session_approvals = session_approvals or SessionApprovals()
        self.auto_approve = auto_approve or AutoApprove()  # asks of trusted tenants or tools, approved without anyone
        self.reservations = reservations or Reservations(None)
        self.profiles = profiles  # None: no profile's hosts are part of an ask, and no grant covers a run
        self.restricted = restricted or RestrictedRuns()
        # what the config names that governs later runs (the policy file, the approval queue): never within a
        # sandbox's reach, like the profiles, evidence, state and code (pipeline.governing)
        self.governing = governing

    async def authorize(
        self,
        raw: Any,
        *,
        execution_id: ExecutionId | None = None,
        observer: Observer | None = None,
        approval_deadline: float | None = None,
        durable: bool = True,
    ) -> Authorization:
        """Decide ``raw`` (a request model or dict). Returns an Authorization or raises the refusal.

        ``execution_id``: chosen by the caller (the service names an execution before it is decided);
        ``approval_deadline``: an ask already queued before a restart keeps its deadline; ``durable`` False:
        a yes is queued to the evidence in order but not awaited on disk (input to a running session, whose
        own begin record was; its end record is durable again). Refusals are always durable."""
        execution_id = execution_id or new_execution_id()
        told = GuardedObserver(observer)
        try:
            check_out_of_earlier_workspaces(self.governing)  # e.g. a policy about to be reloaded
            request = parse_request(raw)
        except (InputInvalid, ConfigInvalid) as err:
            # nothing of the input is recorded but the names of the bad fields
            unparsed = self.evidence.of(execution_id, tenant="unknown", subject="unknown")
            await unparsed.refuse(err, data={"fields": err.details.get("fields")})
            raise

        profile_egress = self.profiles.egress(request) if self.profiles is not None else ()
        gate = self.gate.evaluate(
            request, profile_egress=profile_egress, egress_approved=self._session_egress(request, profile_egress)
        )
        records = self.evidence.of(execution_id, gate)
        decision = gate.decision
        told.decided(execution_id, gate)
        retry = {"retry_of": self.restricted.link(request.retry_of, request.tenant)} if request.retry_of else {}
        await records.record(
            EventType.REQUEST_RECEIVED,
            data={"sanitized": gate.public, "approval_key": gate.approval_key, **retry},
        )
        await records.record(
            EventType.DECISION_MADE,
            # an allow is durable before anything may run; a deny becomes durable with its end record
            # (fsynced before the refusal is answered): one fsync per refusal, not two
            durable=durable and decision.decision is Decision.ALLOW,
            decision=decision.decision.value,
            reason=decision.reason,
            data={"matched_rule": decision.matched_rule, "risk": decision.risk.model_dump(mode="json")},
        )
        if decision.decision is Decision.DENY:
            raise await records.refuse(PolicyDenied(decision.reason))
        if decision.decision is Decision.ALLOW:
            await self._bound(records, request)  # a bound charges (and narrows) what it matches, allowed too
            return self._authorized(execution_id, request, gate, None, "policy")

        await self._bound(records, request, dry=True)  # a spent bound: refused, nobody asked
        try:
            approval = await self._approve(records, request, told, approval_deadline, durable=durable)
        except asyncio.CancelledError as cancel:
            if is_suspend(cancel):  # the service stops: the ask stays queued, the execution resumes later
                raise
            # the ask was withdrawn (approvals.base.decide); the execution ends here, on the record
            reason = cancel_reason(cancel, "cancelled while waiting for approval")
            await despite_cancellation(records.refuse(ExecutionCancelled(reason), status="cancelled"))
            raise
        try:  # approved (by anyone, a grant too): the bounds it matches are charged as well
            await self._bound(records, request)
        except BaseException:  # it will not run: what a grant reserved for it is freed
            await asyncio.shield(self.reservations.release_held(execution_id))
            raise
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
            # the exec session this command opens is named by its execution id; its owner's
            # write_stdin to it is covered by this authorization
            self.session_approvals.approve_exec_session(
                execution_id, ExecSessionOrigin(execution_id, request.tenant, request.subject)
            )
        held = self.reservations.take(execution_id)
        reservation = next((r for r in held if not r.bounding), None)
        bounds = tuple(r for r in held if r.bounding)
        return Authorization(execution_id, request, gate, approval, approved_by, reservation, bounds)

    async def _approve(
        self,
        records: ExecutionRecorder,
        request: Request,
        told: GuardedObserver,
        deadline: float | None = None,
        *,
        durable: bool = True,
    ) -> ApprovalResult:
        gate = records.gate
        assert gate is not None  # a recorder of a decided request
        execution_id = ExecutionId(records.execution_id)
        key = gate.approval_key
        policy_hash = gate.decision.policy_version_hash

        async def settled(result: ApprovalResult, *, cached: bool = False, durable: bool = True) -> None:
            await self._record_approval(records, result, cached=cached, durable=durable)
            told.approval_settled(execution_id, result)

        async def refused(result: ApprovalResult) -> OrchestratorError:
            refusal = _REFUSALS[result.outcome]
            return await records.refuse(refusal(f"{result.approver}: {result.reason}".rstrip(": ")))

        scope = (
            Scope(request.tenant, request.subject, request.session_id)
            if request.session_id is not None and not isinstance(request, WriteStdinRequest)
            else None
        )
        cached = self._approved_earlier(request, scope, key, policy_hash)
        if cached is not None:
            await settled(cached, cached=True, durable=durable)
            return cached
        timeout_s = self.gate.policy.current().config.approval_timeout_s
        if deadline is not None:  # resumed after a restart: what is left of the first wait
            timeout_s = max(deadline - time.time(), 0.001)
        ask = ApprovalRequest(
            execution_id=execution_id,
            approval_key=key,
            sanitized=gate.sanitized,
            policy_reason=gate.decision.reason,
            timeout_s=timeout_s,
            network_asked=self._network_asked(request, gate),
        )
        rules_no = self._rules_refusal(ask)
        if rules_no is not None:  # an approval rule says no: final, whatever else would approve it
            await settled(rules_no)
            raise await refused(rules_no)
        auto = self.auto_approve.decide(ask)
        if auto is not None:  # a trusted tenant's or tool's ask: approved without anyone, on the record as such
            await settled(auto, durable=durable)
            return auto
        granted = await self._grant(execution_id, request, gate, ask.network_asked)
        if granted is not None:  # a live grant covers it, with room for this run: its reservation is held
            try:
                await settled(granted, durable=durable)
            except BaseException:  # never on the record as approved: nothing may hold its budget
                await asyncio.shield(self.reservations.release_held(execution_id))
                raise
            return granted

        if self.approvals is None:
            needed = (
                f"approval needed ({gate.decision.reason}) but nobody can answer: stdin is not a terminal and the"
                " config names no approver; run it in a terminal to answer yourself, or give the config an"
                " allowlist entry or approvals rules for it (docs/policy-and-approvals.md)"
            )
            raise await records.refuse(NoApprovalProvider(needed))
        await records.record(
            EventType.APPROVAL_REQUESTED,
            data={"approval_key": key, "provider": self.approvals.name, "timeout_s": timeout_s},
        )
        told.awaiting_approval(execution_id, time.time() + timeout_s)
        try:
            result = await decide(self.approvals, ask)
        except OrchestratorError as err:
            raise await records.refuse(err) from None
        except asyncio.CancelledError as cancel:
            # withdrawn — unless an answer reached the store first: then it is on the record too (its
            # approver was told it was taken), before the cancellation that ends the execution
            kept = None if is_suspend(cancel) else await _kept_answer(self.approvals, ask)
            if kept is not None:
                await despite_cancellation(settled(kept))
            raise
        await settled(result)
        if not result.outcome.grants:
            raise await refused(result)
        if result.outcome is ApprovalOutcome.APPROVED_FOR_SESSION and scope is not None:
            self.session_approvals.approve_key(scope, key, policy_hash)
            # the hosts asked about are approved for this session: its later requests reach them unasked
            for host in ask.network_asked:
                self.session_approvals.approve_key(scope, egress_approval_key(host), policy_hash)
        return result

    async def _record_approval(
        self, records: ExecutionRecorder, result: ApprovalResult, *, cached: bool, durable: bool
    ) -> None:
        """Durable (unless ``durable`` False, see authorize): an approval is what lets an execution start."""
        assert records.gate is not None
        await records.record(
            EventType.APPROVAL_DECIDED,
            durable=durable,
            decision=result.outcome.value,
            approver=result.approver,
            reason=result.reason,
            data={"approval_key": records.gate.approval_key, "cached": cached},
        )

    def _approved_earlier(
        self, request: Request, scope: Scope | None, key: str, policy_hash: str
    ) -> ApprovalResult | None:
        """A session's yes that answers this ask already: input to the caller's own exec session, or the same
        ask approved earlier in the session (under the same policy)."""
        if isinstance(request, WriteStdinRequest):
            origin = self.session_approvals.exec_session_origin(request.session_id)
            if origin is not None and (origin.tenant, origin.subject) == (request.tenant, request.subject):
                return ApprovalResult(
                    outcome=ApprovalOutcome.APPROVED,
                    approver=f"exec-session:{origin.execution_id}",
                    reason="input to the caller's own authorized exec session",
                )
        elif self.session_approvals.has_key(scope, key, policy_hash):
            return ApprovalResult(
                outcome=ApprovalOutcome.APPROVED_FOR_SESSION,
                approver="session-cache",
                reason=f"approved earlier in session {request.session_id}",
            )
        return None

    def _network_asked(self, request: Request, gate: GateResult) -> list[str]:
        """The hosts an ask is about: its egress the policy does not cover and its session did not approve."""
        approved = self._session_egress(request, tuple(gate.sanitized.egress or ()))
        return self.gate.policy.current().uncovered_egress(gate.sanitized, approved)

    def _rules_refusal(self, ask: ApprovalRequest) -> ApprovalResult | None:
        """An approval rule's no (denied, abort) for ``ask``: consulted before auto-approve and grants."""
        rules = self.approvals if isinstance(self.approvals, RuleApprover) else getattr(self.approvals, "rules", None)
        return rules.refusal(ask) if isinstance(rules, RuleApprover) else None

    async def _grant(
        self, execution_id: ExecutionId, request: Request, gate: GateResult, network_asked: list[str]
    ) -> ApprovalResult | None:
        """The approval of a live grant covering this ask (its reservation kept for the run), or None."""
        book = self.reservations.book
        if book is None or self.profiles is None or not cover.coverable(gate, network_asked):
            return None
        try:
            profile = self.profiles.resolve(request, session=False)
        except OrchestratorError:  # the run refuses it, on the record
            return None
        reservation = await cover.reserve(book, gate, profile, tenant=request.tenant, execution_id=execution_id)
        if reservation is None:
            return None
        self.reservations.hold(execution_id, reservation)
        return ApprovalResult(
            outcome=ApprovalOutcome.APPROVED,
            approver=f"grant:{reservation.grant_id}",
            reason=f"covered by grant {reservation.grant_id}: reserved {_amounts(reservation)}",
        )

    async def _bound(self, records: ExecutionRecorder, request: Request, *, dry: bool = False) -> None:
        """Reserve for this run against every bound it matches (held for its authorization); ``dry``: only
        whether one of them has no room left. GRANT.EXHAUSTED, on the record, when one has none."""
        gate, book = records.gate, self.reservations.book
        assert gate is not None  # a recorder of a decided request
        if book is None or self.profiles is None or not cover.boundable(gate):
            return
        try:
            profile = self.profiles.resolve(request, session=False)
        except OrchestratorError:  # the run refuses it, on the record
            return
        execution_id = records.execution_id
        try:
            held = await cover.bound(book, gate, profile, tenant=request.tenant, execution_id=execution_id, dry=dry)
        except GrantExhausted as spent:  # a bound of this run has nothing left for it: refused, never asked
            await asyncio.shield(self.reservations.release_held(execution_id))
            raise await records.refuse(spent) from None
        for reservation in held:
            self.reservations.hold(execution_id, reservation)

    def _session_egress(self, request: Request, profile_egress: tuple[str, ...]) -> frozenset[str]:
        """Of the hosts ``request`` may reach, those approved earlier in its session (approved_for_session)."""
        if request.session_id is None or isinstance(request, WriteStdinRequest):
            return frozenset()
        scope = Scope(request.tenant, request.subject, request.session_id)
        policy_hash = self.gate.policy.current().version_hash
        hosts = {*profile_egress, *request.sandbox_permissions.egress_hosts}
        return frozenset(h for h in hosts if self.session_approvals.has_key(scope, egress_approval_key(h), policy_hash))


async def _kept_answer(provider: ApprovalProvider | None, ask: ApprovalRequest) -> ApprovalResult | None:
    """The answer a store-backed provider kept for ``ask`` (after its withdrawal lost to it), or None."""
    kept = getattr(provider, "kept", None)
    if not isinstance(provider, SettlesInStore) or kept is None:
        return None
    try:
        result: ApprovalResult | None = await asyncio.shield(kept(ask))
    except (asyncio.CancelledError, Exception):
        return None
    return result


def _amounts(reservation: Reservation) -> str:
    """A reservation said plainly, for the approval's reason."""
    return (
        f"1 execution, {reservation.wall_seconds:g} s wall, {reservation.cpu_seconds:g} CPU-s, "
        f"{reservation.output_bytes} output bytes"
    )
