"""The Orchestrator: the one place that wires gate, approvals and evidence together.

Every request goes: parse → gate (sanitize, intent, risk, policy, key) → approval when asked →
an authorization whose last record is durable before anything may run. Every refusal is recorded
with its stable code and raised as an OrchestratorError.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Concatenate, ParamSpec

from orchestrator.approvals.auto import AutoApprove
from orchestrator.approvals.base import ApprovalProvider, SettlesInStore, decide, is_suspend
from orchestrator.approvals.rules import RuleApprover
from orchestrator.approvals.session import ExecSessionOrigin, Scope, SessionGrants, egress_grant_key
from orchestrator.backends._support.launch_message import launch_message
from orchestrator.backends.base import (
    EgressBackend,
    InteractiveBackend,
    LaunchSpec,
    OutputCallback,
    OutputStream,
    PooledBackend,
    SandboxBackend,
    SandboxHandle,
)
from orchestrator.budgets import cover as grant_cover
from orchestrator.budgets.book import GrantBook, Reservation
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult, Decision
from orchestrator.domain.errors import (
    ApprovalAborted,
    ApprovalDenied,
    ApprovalTimeout,
    ConfigInvalid,
    ExecutionCancelled,
    InputInvalid,
    InternalError,
    NoApprovalProvider,
    OrchestratorError,
    PolicyDenied,
    SandboxOutputLimit,
    SandboxRestricted,
    SandboxStartFailed,
    SandboxUnavailable,
)
from orchestrator.domain.ids import ExecutionId, new_execution_id
from orchestrator.domain.requests import ExecCommandRequest, Request, WriteStdinRequest, parse_request
from orchestrator.domain.wire import ErrorBody, RunResult
from orchestrator.egress.runs import Egress, EgressSettings, NameRedactor
from orchestrator.evidence import EventType, EvidenceWriter
from orchestrator.evidence.input_key import load_input_key
from orchestrator.gate.gate import Gate, GateResult
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.config import PoolSettings
from orchestrator.pipeline.end_record import failed_side_effects, finished_fields
from orchestrator.pipeline.executor import RunOutcome, run_in_sandbox, workspace_changes
from orchestrator.pipeline.governing import Governing, governing_paths
from orchestrator.pipeline.launch import (
    active_execution,
    check_out_of_earlier_workspaces,
    check_session_allowed,
    check_workspace,
    launch_spec,
    profile_egress,
    refuse_unavailable_escalations,
)
from orchestrator.pipeline.pool import PooledSandbox, PoolKey, SandboxPool
from orchestrator.pipeline.restrictions import restriction
from orchestrator.pipeline.tasks import Guarded
from orchestrator.profiles import ProfileCaps, ProfileRegistry, ResolvedProfile
from orchestrator.results import Redactor, Snapshot, snapshot

log = logging.getLogger(__name__)

KEPT_RESTRICTED = 4096  # restricted runs remembered for retry_of links (older ones are linked as unknown)

_REFUSALS: dict[ApprovalOutcome, type[OrchestratorError]] = {
    ApprovalOutcome.DENIED: ApprovalDenied,
    ApprovalOutcome.ABORT: ApprovalAborted,
    ApprovalOutcome.TIMEOUT: ApprovalTimeout,
}


class Observer:
    """Told where an execution is while the flow runs (the service keeps its state table with it).
    Called on the event loop; must not block or raise (what it raises is logged and ignored)."""

    def decided(self, execution_id: ExecutionId, gate: GateResult) -> None:
        """The gate decided (before any approval)."""

    def awaiting_approval(self, execution_id: ExecutionId, deadline_unix: float) -> None:
        """The ask is queued; silence until ``deadline_unix`` is APPROVAL.TIMEOUT."""

    def approval_settled(self, execution_id: ExecutionId, result: ApprovalResult) -> None:
        """An approval (or the timeout) answered the ask."""

    def running(self, execution_id: ExecutionId, profile: ResolvedProfile) -> None:
        """The begin record is durable; the sandbox is being created."""


class Telemetry:
    """Timings for the service's metrics (no-ops by default). Must not block or raise."""

    def durable_write(self, seconds: float) -> None:
        """A durable evidence append took ``seconds`` (queued → fsynced)."""

    def sandbox_started(self, seconds: float) -> None:
        """From the begin record to the engine's start event."""


def _tell(observer: Observer | Telemetry | None, method: str, *args: Any) -> None:
    if observer is None:
        return
    try:
        getattr(observer, method)(*args)
    except Exception as exc:  # an observer's (or telemetry's) bug never changes a decision or a run
        log.warning("execution observer failed in %s: %s", method, type(exc).__name__)


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

    def summary(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "decision": self.gate.decision.decision.value,
            "approved_by": self.approved_by,
            "approval_key": self.gate.approval_key,
        }


_RunArgs = ParamSpec("_RunArgs")
_Run = Callable[Concatenate["Orchestrator", Authorization, _RunArgs], Coroutine[Any, Any, "ExecutionResult"]]


def _settles_reservation(run: _Run[_RunArgs]) -> _Run[_RunArgs]:
    """``run`` settles or releases its grant's reservation exactly once, whatever ends it (cancellation too)."""

    @functools.wraps(run)
    async def settled(
        self: Orchestrator, auth: Authorization, /, *args: _RunArgs.args, **kwargs: _RunArgs.kwargs
    ) -> ExecutionResult:
        try:
            return await run(self, auth, *args, **kwargs)
        finally:
            await _despite_cancellation(self.abandon(auth))

    return settled


class Orchestrator:
    def __init__(
        self,
        *,
        evidence: EvidenceWriter,
        policy: PolicySource | None = None,
        approvals: ApprovalProvider | None = None,
        workspace: str | os.PathLike[str] | None = None,
        grants: SessionGrants | None = None,
        backend: SandboxBackend | None = None,
        profiles: ProfileRegistry | None = None,
        caps: ProfileCaps | None = None,
        governing: tuple[Governing, ...] = (),
        pool: PoolSettings | None = None,
        auto_approve: AutoApprove | None = None,
        egress: EgressSettings | None = None,
        budget_grants: GrantBook | None = None,
    ) -> None:
        # what is typed into sessions is digested under a key kept beside the evidence (evidence.input_key)
        self.gate = Gate(policy, workspace=workspace, input_key=functools.cache(lambda: load_input_key(evidence.path)))
        # what the config names that governs later runs (the policy file, the approval queue): never
        # within a sandbox's reach, like the profiles, evidence, state and code (service.governing)
        self.governing = governing
        self.evidence = evidence
        self.approvals = approvals
        self.auto_approve = auto_approve or AutoApprove()  # asks of trusted tenants or tools, approved without anyone
        self.budget_grants = budget_grants  # grants with budgets (the service's store): asks a live grant covers
        self._reserved: dict[str, Reservation] = {}  # execution id -> what a grant reserved, until authorized
        self._charged: set[str] = set()  # executions whose reservation was settled or released (once each)
        self.grants = grants or SessionGrants()
        self.backend = backend
        self.profiles = profiles
        self.caps = caps
        self.telemetry = Telemetry()
        self.egress = Egress(egress or EgressSettings())  # the proxy of the runs whose profile reaches hosts
        # recent SANDBOX.RESTRICTED runs (execution id -> tenant, what was denied): what a retry_of links to
        self._restricted: OrderedDict[str, tuple[str, list[dict[str, Any]]]] = OrderedDict()
        self.background = Guarded()  # e.g. the orphan reaper (service.factory.open_orchestrator)
        # pre-started sandboxes (pipeline/pool.py): when the config enables them and the backend can
        self.pool: SandboxPool | None = None
        if pool is not None and pool.enabled and isinstance(backend, PooledBackend) and backend.can_pool:
            self.pool = SandboxPool(backend, pool, self._record_pooled)
        elif pool is not None and pool.enabled and backend is not None:
            log.warning(
                "pool.enabled: the %s cannot pre-start sandboxes as configured; every run starts cold",
                type(backend).__name__,
            )

    async def _record_pooled(self, event: EventType, pool_id: str, *, tenant: str, **fields: Any) -> None:
        await self._record(event, pool_id, None, tenant=tenant, subject="pool", **fields)

    # -- evidence helpers ------------------------------------------------------------------
    def _fields(
        self, event: EventType, execution_id: str, gate: GateResult | None, fields: dict[str, Any]
    ) -> dict[str, Any]:
        base: dict[str, Any] = {"event": event, "execution_id": execution_id}
        if gate is not None:
            ctx = gate.sanitized.context
            base.update(
                tenant=ctx.tenant,
                subject=ctx.subject,
                tool=gate.sanitized.tool,
                call_id=ctx.call_id,
                inputs_digest=gate.inputs_digest,
                policy_version_hash=gate.decision.policy_version_hash,
            )
        base.update(fields)
        return base

    async def _record(
        self,
        event: EventType,
        execution_id: str,
        gate: GateResult | None,
        *,
        durable: bool = False,
        **fields: Any,
    ) -> None:
        # a mapping, not an EvidenceEvent: the writer fits it to one record before validating it, so a
        # record is never lost to the size or the text of what a workload put in it
        base = self._fields(event, execution_id, gate, fields)
        if durable:
            # waits for this record and everything queued before it to be fsynced
            began = time.monotonic()
            await self.evidence.append(base, durable=True)
            _tell(self.telemetry, "durable_write", time.monotonic() - began)
        else:
            self.evidence.append_nowait(base)

    def _record_nowait(self, event: EventType, *, execution_id: str, gate: GateResult | None, **fields: Any) -> None:
        """A record queued in order, not awaited (what the proxy reports of a run's connections)."""
        self.evidence.append_nowait(self._fields(event, execution_id, gate, fields))

    async def record_event(
        self, event: EventType, auth: Authorization, *, durable: bool = False, data: dict[str, Any]
    ) -> None:
        """A record of ``auth``'s execution beside the flow's own (a session's input, output and end)."""
        await self._record(event, auth.execution_id, auth.gate, durable=durable, data=data)

    async def _refuse(
        self,
        execution_id: str,
        gate: GateResult | None,
        err: OrchestratorError,
        *,
        status: str = "refused",
        **fields: Any,
    ) -> OrchestratorError:
        """Record why an execution ends without finishing (durable), and return the error to raise."""
        err.details.setdefault("execution_id", execution_id)
        if gate is not None:
            err.details.setdefault("decision", gate.decision.decision.value)
        await self._record(
            EventType.RUN_FAILED,
            execution_id,
            gate,
            durable=True,
            status=status,
            error_code=err.code,
            reason=err.message,
            **fields,
        )
        return err

    # -- the flow --------------------------------------------------------------------------
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
        try:
            check_out_of_earlier_workspaces(self.governing)  # e.g. a policy about to be reloaded
            request = parse_request(raw)
        except (InputInvalid, ConfigInvalid) as err:
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

        profile_egress = self._profile_egress(request)
        gate = self.gate.evaluate(
            request, profile_egress=profile_egress, egress_approved=self._session_egress(request, profile_egress)
        )
        decision = gate.decision
        _tell(observer, "decided", execution_id, gate)
        await self._record(
            EventType.REQUEST_RECEIVED,
            execution_id,
            gate,
            data={
                "sanitized": gate.public,
                "approval_key": gate.approval_key,
                **({"retry_of": self._retry_link(request)} if request.retry_of else {}),
            },
        )
        await self._record(
            EventType.DECISION_MADE,
            execution_id,
            gate,
            # an allow is durable before anything may run; a deny becomes durable with its end record
            # (fsynced before the refusal is answered): one fsync per refusal, not two
            durable=durable and decision.decision is Decision.ALLOW,
            decision=decision.decision.value,
            reason=decision.reason,
            data={"matched_rule": decision.matched_rule, "risk": decision.risk.model_dump(mode="json")},
        )
        if decision.decision is Decision.DENY:
            raise await self._refuse(execution_id, gate, PolicyDenied(decision.reason))
        if decision.decision is Decision.ALLOW:
            return self._authorized(execution_id, request, gate, None, "policy")

        try:
            approval = await self._approve(execution_id, request, gate, observer, approval_deadline, durable=durable)
        except asyncio.CancelledError as cancel:
            if is_suspend(cancel):  # the service stops: the ask stays queued, the execution resumes later
                raise
            # the ask was withdrawn (approvals.base.decide); the execution ends here, on the record
            reason = _cancel_reason(cancel, "cancelled while waiting for approval")
            await _despite_cancellation(
                self._refuse(execution_id, gate, ExecutionCancelled(reason), status="cancelled")
            )
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
            self.grants.approve_exec_session(
                execution_id, ExecSessionOrigin(execution_id, request.tenant, request.subject)
            )
        return Authorization(execution_id, request, gate, approval, approved_by, self._reserved.pop(execution_id, None))

    async def _record_approval(
        self, execution_id: str, gate: GateResult, result: ApprovalResult, *, cached: bool, durable: bool = True
    ) -> None:
        """Durable (unless ``durable`` False, see authorize): an approval is what lets an execution start."""
        await self._record(
            EventType.APPROVAL_DECIDED,
            execution_id,
            gate,
            durable=durable,
            decision=result.outcome.value,
            approver=result.approver,
            reason=result.reason,
            data={"approval_key": gate.approval_key, "cached": cached},
        )

    async def _approve(
        self,
        execution_id: ExecutionId,
        request: Request,
        gate: GateResult,
        observer: Observer | None = None,
        deadline: float | None = None,
        *,
        durable: bool = True,
    ) -> ApprovalResult:
        key = gate.approval_key
        policy_hash = gate.decision.policy_version_hash
        scope = (
            Scope(request.tenant, request.subject, request.session_id)
            if request.session_id is not None and not isinstance(request, WriteStdinRequest)
            else None
        )
        cached: ApprovalResult | None = None
        if isinstance(request, WriteStdinRequest):
            origin = self.grants.exec_session_origin(request.session_id)
            if origin is not None and (origin.tenant, origin.subject) == (request.tenant, request.subject):
                cached = ApprovalResult(
                    outcome=ApprovalOutcome.APPROVED,
                    approver=f"exec-session:{origin.execution_id}",
                    reason="input to the caller's own authorized exec session",
                )
        elif self.grants.has_key(scope, key, policy_hash):
            cached = ApprovalResult(
                outcome=ApprovalOutcome.APPROVED_FOR_SESSION,
                approver="session-cache",
                reason=f"approved earlier in session {request.session_id}",
            )
        if cached is not None:
            await self._record_approval(execution_id, gate, cached, cached=True, durable=durable)
            _tell(observer, "approval_settled", execution_id, cached)
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
        refused = self._rules_refusal(ask)
        if refused is not None:  # an approval rule says no: final, whatever else would approve it
            await self._record_approval(execution_id, gate, refused, cached=False)
            _tell(observer, "approval_settled", execution_id, refused)
            refusal = _REFUSALS[refused.outcome]
            raise await self._refuse(execution_id, gate, refusal(f"{refused.approver}: {refused.reason}".rstrip(": ")))
        auto = self.auto_approve.decide(ask)
        if auto is not None:  # a trusted tenant's or tool's ask: approved without anyone, on the record as such
            await self._record_approval(execution_id, gate, auto, cached=False, durable=durable)
            _tell(observer, "approval_settled", execution_id, auto)
            return auto
        granted = await self._grant(execution_id, request, gate, ask.network_asked)
        if granted is not None:  # a live grant covers it, with room for this run: its reservation is held
            try:
                await self._record_approval(execution_id, gate, granted, cached=False, durable=durable)
            except BaseException:  # never on the record as approved: nothing may hold its budget
                await asyncio.shield(self._release_reserved(execution_id))
                raise
            _tell(observer, "approval_settled", execution_id, granted)
            return granted

        if self.approvals is None:
            raise await self._refuse(
                execution_id,
                gate,
                NoApprovalProvider(f"approval needed ({gate.decision.reason}) but no approval provider is configured"),
            )
        await self._record(
            EventType.APPROVAL_REQUESTED,
            execution_id,
            gate,
            data={"approval_key": key, "provider": self.approvals.name, "timeout_s": timeout_s},
        )
        _tell(observer, "awaiting_approval", execution_id, time.time() + timeout_s)
        try:
            result = await decide(self.approvals, ask)
        except OrchestratorError as err:
            raise await self._refuse(execution_id, gate, err) from None
        except asyncio.CancelledError as cancel:
            # withdrawn — unless an answer reached the store first: then it is on the record too (its
            # approver was told it was taken), before the cancellation that ends the execution
            kept = None if is_suspend(cancel) else await _kept_answer(self.approvals, ask)
            if kept is not None:
                await _despite_cancellation(self._record_approval(execution_id, gate, kept, cached=False))
                _tell(observer, "approval_settled", execution_id, kept)
            raise
        await self._record_approval(execution_id, gate, result, cached=False)
        _tell(observer, "approval_settled", execution_id, result)
        if not result.outcome.grants:
            refusal = _REFUSALS[result.outcome]
            raise await self._refuse(execution_id, gate, refusal(f"{result.approver}: {result.reason}".rstrip(": ")))
        if result.outcome is ApprovalOutcome.APPROVED_FOR_SESSION and scope is not None:
            self.grants.grant_key(scope, key, policy_hash)
            # the hosts asked about are approved for this session: its later requests reach them unasked
            for host in ask.network_asked:
                self.grants.grant_key(scope, egress_grant_key(host), policy_hash)
        return result

    def _network_asked(self, request: Request, gate: GateResult) -> list[str]:
        """The hosts an ask is about: its egress the policy does not cover and its session did not approve."""
        approved = self._session_egress(request, tuple(gate.sanitized.egress or ()))
        return self.gate.policy.current().uncovered_egress(gate.sanitized, approved)

    def _rules_refusal(self, ask: ApprovalRequest) -> ApprovalResult | None:
        """An approval rule's no (denied, abort) for ``ask``: consulted before auto-approve and grants."""
        rules = self.approvals if isinstance(self.approvals, RuleApprover) else getattr(self.approvals, "rules", None)
        return rules.refusal(ask) if isinstance(rules, RuleApprover) else None

    async def _release_reserved(self, execution_id: str) -> None:
        """Free what a grant reserved for an execution that will not run (never authorized, or abandoned)."""
        reservation = self._reserved.pop(execution_id, None)
        if reservation is not None and self.budget_grants is not None:
            try:
                await self.budget_grants.release(reservation)
            except Exception as exc:  # held until the service's next start releases it
                log.warning("grant %s of %s not released: %s", reservation.grant_id, execution_id, exc)

    async def abandon(self, auth: Authorization) -> None:
        """What a grant reserved for ``auth`` and nobody charged yet is freed: the caller gave up before
        ``run``, or the run ended before it settled the reservation (see ``_settles_reservation``)."""
        if auth.reservation is not None and auth.execution_id not in self._charged:
            await self._charge(auth, None, ran=False)
        self._charged.discard(auth.execution_id)

    async def _grant(
        self, execution_id: ExecutionId, request: Request, gate: GateResult, network_asked: list[str]
    ) -> ApprovalResult | None:
        """The approval of a live grant covering this ask (its reservation kept for the run), or None."""
        if self.budget_grants is None or self.profiles is None or not grant_cover.coverable(gate, network_asked):
            return None
        try:
            profile = self._resolve(request, session=False)
        except OrchestratorError:  # the run refuses it, on the record
            return None
        reservation = await grant_cover.reserve(
            self.budget_grants, gate, profile, tenant=request.tenant, execution_id=execution_id
        )
        if reservation is None:
            return None
        self._reserved[execution_id] = reservation
        return ApprovalResult(
            outcome=ApprovalOutcome.APPROVED,
            approver=f"grant:{reservation.grant_id}",
            reason=f"covered by grant {reservation.grant_id}: reserved {_amounts(reservation)}",
        )

    def _retry_link(self, request: Request) -> dict[str, Any]:
        """What the evidence says of the execution ``request`` retries: what the sandbox refused it, when that
        run was this process's and the same tenant's (else ``known`` false: the link is kept as asked)."""
        assert request.retry_of is not None
        restricted = self._restricted.get(request.retry_of)
        if restricted is None or restricted[0] != request.tenant:
            return {"execution_id": request.retry_of, "known": False}
        return {"execution_id": request.retry_of, "known": True, "denied": restricted[1]}

    def _profile_egress(self, request: Request) -> tuple[str, ...]:
        """The egress allowlist of the profile ``request`` runs with (part of what it asks)."""
        return () if self.profiles is None else profile_egress(self.profiles, request, self.gate.default_profile)

    def _session_egress(self, request: Request, profile_egress: tuple[str, ...]) -> frozenset[str]:
        """Of the hosts ``request`` may reach, those approved earlier in its session (approved_for_session)."""
        if request.session_id is None or isinstance(request, WriteStdinRequest):
            return frozenset()
        scope = Scope(request.tenant, request.subject, request.session_id)
        policy_hash = self.gate.policy.current().version_hash
        hosts = {*profile_egress, *request.sandbox_permissions.egress_hosts}
        return frozenset(h for h in hosts if self.grants.has_key(scope, egress_grant_key(h), policy_hash))

    # -- execution ---------------------------------------------------------------------------
    async def execute(
        self,
        raw: Any,
        *,
        workspace: Path,
        execution_id: ExecutionId | None = None,
        observer: Observer | None = None,
        on_output: OutputCallback | None = None,
    ) -> ExecutionResult:
        """Authorize ``raw``, then run it in a fresh sandbox. Refusals raise; a command that ran
        (whatever its exit) returns an ExecutionResult. ``on_output`` gets the output as it is produced
        (redacted, within the caps)."""
        # the yes is queued, not awaited on disk: run() goes on at once, and whatever it does first ends in
        # a durable record (the begin record, or a refusal) whose fsync takes everything queued before it, so
        # the decision is on disk before anything runs all the same, for one fsync instead of two
        auth = await self.authorize(raw, execution_id=execution_id, observer=observer, durable=False)
        return await self.run(auth, workspace=workspace, observer=observer, on_output=on_output)

    @_settles_reservation
    async def run(
        self,
        auth: Authorization,
        *,
        workspace: Path,
        observer: Observer | None = None,
        on_output: OutputCallback | None = None,
        session: bool = False,
        on_started: Callable[[SandboxHandle, ResolvedProfile], None] | None = None,
        on_capped: Callable[[OutputStream], None] | None = None,
    ) -> ExecutionResult:
        """Run an authorized request in a fresh sandbox. ``session``: an interactive session's sandbox
        (its stdin open for the backend's send_input from ``on_started`` on, its deadline the profile's
        session lifetime); see :mod:`orchestrator.service.sessions`. ``on_capped(stream)``: with
        ``on_output``, once a stream passed the profile's cap (nothing more of it is shown)."""
        if self.backend is None or self.profiles is None:
            raise InternalError("this orchestrator has no sandbox backend")
        request, gate = auth.request, auth.gate
        execution_id = auth.execution_id
        workspace = Path(workspace).resolve()  # the engine takes absolute bind sources only
        try:
            check_workspace(workspace, governing=self._governing_paths())
            refuse_unavailable_escalations(request)
            profile = self._resolve(request, session=session)
            if auth.reservation is not None:  # within what its grant reserved for it
                profile = grant_cover.narrowed(profile, auth.reservation)
            spec = launch_spec(execution_id, request, profile, workspace, interactive=session)
            if set(profile.egress_allow) != set(gate.sanitized.egress or ()):
                # the profile changed while its request waited (an approval): never hosts nobody decided about
                raise SandboxUnavailable(
                    f"profile {profile.name!r} now reaches other hosts than its request was decided with; ask again"
                )
            if profile.network == "allowlist":
                self._check_egress(profile, spec)
            if session:
                check_session_allowed(profile, spec.argv)
                if not isinstance(self.backend, InteractiveBackend):
                    raise SandboxUnavailable(
                        f"the {type(self.backend).__name__} cannot run interactive sessions (it takes no input "
                        "while a sandbox runs): never a session without its input"
                    )
        except OrchestratorError as err:
            await self._charge(auth, None, ran=False)
            raise await self._refuse(execution_id, gate, err) from None

        began = time.monotonic()

        async def record(event: EventType, **fields: Any) -> None:
            if event is EventType.CONTAINER_STARTED:
                _tell(self.telemetry, "sandbox_started", time.monotonic() - began)
            await self._record(event, execution_id, gate, profile_hash=profile.profile_hash, **fields)

        redactor = Redactor(literals=request.env.values())
        try:
            before = await asyncio.to_thread(snapshot, workspace)  # the workspace before the sandbox exists
        except OrchestratorError as exc:
            await self._charge(auth, None, ran=False)
            raise await self._refuse(execution_id, gate, exc) from None
        except OSError as exc:
            await self._charge(auth, None, ran=False)
            unreadable = InputInvalid(f"workspace {workspace} cannot be read: {exc.strerror or exc}")
            raise await self._refuse(execution_id, gate, unreadable) from None
        failed = functools.partial(
            self._failed_while_running,
            execution_id=execution_id,
            gate=gate,
            profile=profile,
            before=before,
            workspace=workspace,
            redactor=redactor,
        )
        pool_key = self._pool_key(spec, gate.sanitized.context.tenant, session=session)
        pooled = None if pool_key is None or self.pool is None else await self.pool.claim(pool_key)
        handed: PooledSandbox | None = None
        # From the begin record on, every way out ends with an end record: execution_finished below,
        # run_failed here (the begin record too may be interrupted once queued: it is written all the same)
        try:
            # the begin record is on disk before the sandbox is created (or, pooled, used)
            await record(
                EventType.EXECUTION_STARTED,
                durable=True,
                status="starting",
                data={
                    "image": profile.image,
                    "runtime": profile.runtime,
                    "profile": profile.name,
                    "seccomp_sha256": profile.seccomp_sha256,
                    "workdir": spec.workdir,
                    "deadline_unix": round(spec.deadline_unix),
                    "env_keys": sorted(spec.env),
                    **({} if pooled is None else {"pooled": _pooled_fields(pooled)}),
                    **({"egress": list(profile.egress_allow)} if profile.network == "allowlist" else {}),
                },
            )
            if pooled is not None and self.pool is not None:
                await self.pool.claimed(pooled, execution_id)
            _tell(observer, "running", execution_id, profile)
            handed, pooled = pooled, None  # from here on run_in_sandbox owns it: its teardown destroys it
            route = None
            names: Callable[[str], str] = str
            if profile.network == "allowlist":  # its connections are recorded from the first one on
                write = functools.partial(self._record_nowait, execution_id=execution_id, gate=gate)
                names = NameRedactor(request.env.values())
                route = self.egress.open(execution_id, profile.egress_allow, write, names)
            try:
                with active_execution(execution_id, workspace):
                    outcome = await run_in_sandbox(
                        self.backend,
                        dataclasses.replace(spec, egress=route),
                        record,
                        redactor=redactor,
                        workspace=workspace,
                        before=before,
                        on_output=on_output,
                        on_started=on_started,
                        on_capped=on_capped,
                        pooled=handed,
                        egress_proxy=None if route is None else self.egress.proxy,
                    )
            finally:
                if route is not None:  # the sandbox is gone, each connection recorded: the totals, before the end
                    self.egress.close(execution_id)
        except asyncio.CancelledError as cancel:
            reason = _cancel_reason(cancel, "cancelled while running")
            await _despite_cancellation(self._charge(auth, None, ran=True))
            await _despite_cancellation(failed(ExecutionCancelled(reason)))
            raise
        except OrchestratorError as err:
            # a sandbox that never started ran nothing; any other failure may have used all it was allowed
            await self._charge(auth, None, ran=not isinstance(err, SandboxStartFailed))
            raise await failed(err) from None
        except Exception as exc:  # a bug: still an end record, never a silent begin-only execution
            log.warning("execution %s failed unexpectedly: %s: %s", execution_id, type(exc).__name__, exc)
            await self._charge(auth, None, ran=True)
            raise await failed(InternalError(f"unexpected {type(exc).__name__} while running")) from exc
        except (KeyboardInterrupt, SystemExit):  # leaving the interpreter: the end record first
            await _despite_cancellation(failed(InternalError("interrupted while running")))
            raise
        finally:
            if pooled is not None and self.pool is not None:  # claimed, never used: never handed out again
                self.pool.discard(pooled, "unused")
            if handed is not None:  # its run destroyed it
                SandboxPool.release(handed)
            if pool_key is not None and self.pool is not None:
                # the key filled again once this run is over: a fill beside it would slow it down (the
                # engine's work is most of a run), and the next command of an agent comes later than that
                self.pool.want(pool_key, spec)  # the route is the run's own: never in the spec kept

        error = outcome.error
        if error is None:
            error = restriction(outcome, profile, route, execution_id, names)
            if error is not None:  # a retry of it is linked to what it was refused
                self._restricted[execution_id] = (request.tenant, error.details["denied"])
                while len(self._restricted) > KEPT_RESTRICTED:
                    self._restricted.popitem(last=False)
        if error is None and outcome.truncated:
            error = SandboxOutputLimit("output passed the profile's cap and was truncated")
        await _despite_cancellation(self._charge(auth, outcome, ran=True))
        # bounded in advance, and never raising: the end record is what makes the run accountable
        try:
            await _despite_cancellation(
                record(EventType.EXECUTION_FINISHED, durable=True, **finished_fields(outcome, profile, error))
            )
        except asyncio.CancelledError:
            # the command ran to its end and its end record is on disk: a cancel now comes too late
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        return ExecutionResult(auth, outcome, error)

    def _resolve(self, request: Request, *, session: bool) -> ResolvedProfile:
        """The profile a run of ``request`` gets: its own or the default, narrowed by the request and caps,
        with the egress hosts it asked for (authorized: the gate asked about those its policy does not cover)."""
        assert self.profiles is not None
        return self.profiles.resolve(
            request.profile or self.gate.default_profile,
            request_timeout_s=request.timeout_ms / 1000 if request.timeout_ms else None,
            caps=self.caps,
            writable_root=request.sandbox_permissions.writable_root,
            session=session,
            egress=request.sandbox_permissions.egress_hosts,
        )

    def _check_egress(self, profile: ResolvedProfile, spec: LaunchSpec) -> None:
        """SANDBOX.UNAVAILABLE when a run that may reach hosts cannot have the proxy as its only route here:
        never a wider network instead, and never the run without what it was allowed."""
        if spec.interactive or spec.tty:
            raise SandboxUnavailable("egress is for one-shot commands without a terminal in this release")
        problem = (
            self.backend.egress_problem(profile)
            if isinstance(self.backend, EgressBackend) and isinstance(self.backend, PooledBackend)
            else f"the {type(self.backend).__name__} gives sandboxes no egress proxy"
        )
        if problem is not None:
            raise SandboxUnavailable(f"profile {profile.name!r} reaches hosts through the egress proxy, but {problem}")

    def _pool_key(self, spec: LaunchSpec, tenant: str, *, session: bool) -> PoolKey | None:
        """The pool key of this run, when it may take a pre-started sandbox: not a session, no terminal,
        its profile allows it, the config's pool is on, and what it runs fits a launch message (else it
        would fail pooled where it runs cold)."""
        if self.pool is None or session or spec.tty or not spec.profile.pool_enabled:
            return None
        try:
            launch_message(spec.argv, spec.env, spec.workdir, with_stdin=spec.stdin is not None)
            found = os.stat(spec.workspace.local_path)
        except (OrchestratorError, OSError):
            return None
        # the directory itself, not only its path: a workspace replaced since a sandbox was filled with it
        # (its bind mount is the old directory) is another key
        return PoolKey(spec.profile.profile_hash, spec.workspace.local_path, (found.st_dev, found.st_ino), tenant)

    def prestart(self, raw: Any, *, workspace: Path) -> bool:
        """Have the pool start a sandbox for runs like ``raw`` in ``workspace`` now, before the first one
        comes (nothing is decided, recorded or run: a run still goes through the gate). False when such a
        run would not take a pooled sandbox (no pool, a terminal, a profile that keeps its runs cold) or
        would be refused (the run says why, on the record)."""
        if self.pool is None or self.profiles is None:
            return False
        try:
            return self._prestart(raw, workspace)
        except OrchestratorError:
            return False

    def _prestart(self, raw: Any, workspace: Path) -> bool:
        assert self.pool is not None
        request = parse_request(raw)
        workspace = Path(workspace).resolve()
        # what a run would check before anything starts: never a sandbox a run would be refused
        check_workspace(workspace, governing=self._governing_paths())
        refuse_unavailable_escalations(request)
        spec = launch_spec(new_execution_id(), request, self._resolve(request, session=False), workspace)
        key = self._pool_key(spec, request.tenant, session=False)
        if key is None:
            return False
        self.pool.want(key, spec)
        return True

    def _governing_paths(self) -> list[Governing]:
        profile_dirs = self.profiles.search_path if self.profiles is not None else ()
        return governing_paths(evidence=self.evidence.path, profile_dirs=profile_dirs, extra=self.governing)

    async def _charge(self, auth: Authorization, outcome: RunOutcome | None, *, ran: bool) -> None:
        """Settle what a grant reserved for ``auth``'s run, on the record before its end record: its real use
        when it ran to an end (``outcome``), all it reserved when it failed after starting (what it used is
        unknown), nothing when it never started. A bookkeeping failure is logged: never in the way of the end
        record (the reservation stays held until the service's next start releases it)."""
        reservation, book = auth.reservation, self.budget_grants
        if reservation is None or book is None or auth.execution_id in self._charged:
            return
        self._charged.add(auth.execution_id)
        try:
            if not ran:
                await book.release(reservation)
                data: dict[str, Any] = {"grant_id": reservation.grant_id, "kind": "released"}
            else:
                usage = (
                    grant_cover.used(
                        reservation,
                        cpu_seconds=outcome.cpu_seconds,
                        output_bytes=outcome.kept_bytes,
                        wall_seconds=outcome.duration_ms / 1000,
                    )
                    if outcome is not None
                    else reservation.most()
                )
                charge = await book.settle(reservation, usage)
                data = {"grant_id": charge.grant_id, "kind": charge.kind, "charged": charge.charged.model_dump(),
                        "state": charge.state}  # fmt: skip
        except Exception as exc:
            log.warning("grant %s of %s not settled: %s", reservation.grant_id, auth.execution_id, exc)
            return
        await self._record(EventType.GRANT_CHARGED, auth.execution_id, auth.gate, data=data)

    async def _failed_while_running(
        self,
        err: OrchestratorError,
        *,
        execution_id: str,
        gate: GateResult,
        profile: ResolvedProfile,
        before: Snapshot,
        workspace: Path,
        redactor: Redactor,
    ) -> OrchestratorError:
        """The end record of an execution that started but did not finish: its code, and what it
        changed in the workspace so far (the sandbox itself was torn down by the executor; set-id bits
        it left are removed here too)."""
        try:
            effects = failed_side_effects(*await workspace_changes(before, workspace, redactor, profile))
        except Exception as exc:  # a bug: never in the way of the end record
            log.warning("side effects of %s unknown: %s", execution_id, type(exc).__name__)
            effects = {"error": f"unknown: {type(exc).__name__}", "complete": False}
        return await self._refuse(
            execution_id,
            gate,
            err,
            status="cancelled" if isinstance(err, ExecutionCancelled) else "error",
            profile_hash=profile.profile_hash,
            data={"side_effects": effects},
        )

    async def aclose(self) -> None:
        await self.background.cancel_all()
        if self.pool is not None:
            await self.pool.aclose()
        await self.egress.aclose()
        await self.evidence.close()
        if self.backend is not None:
            await self.backend.close()


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


def _error_body(error: OrchestratorError) -> ErrorBody:
    """An execution's error as its result says it: the details only where they are the answer (what a
    restricted run was denied, and the escalation a retry may ask for)."""
    if isinstance(error, SandboxRestricted):
        return ErrorBody.of(error)
    return ErrorBody(code=error.code, message=error.message)


def _pooled_fields(pooled: PooledSandbox) -> dict[str, object]:
    """What the begin record says of a pre-started sandbox: its own records' id and when it was made."""
    return {
        "pool_id": pooled.pool_id,
        "sandbox_id": pooled.handle.sandbox_id,
        "filled_at": datetime.fromtimestamp(pooled.filled_unix, UTC).isoformat(),
    }


def _cancel_reason(cancel: asyncio.CancelledError, default: str) -> str:
    """The message a canceller gave ``Task.cancel(msg)`` (the service names who asked), or ``default``."""
    given = cancel.args[0] if cancel.args and isinstance(cancel.args[0], str) else ""
    return f"{default}: {given}" if given else default


async def _despite_cancellation(step: Coroutine[Any, Any, object]) -> None:
    """Run ``step`` to its end even if this task is cancelled again meanwhile (a second Ctrl-C or
    SIGTERM): an end record must not be cut off half-way. The cancellation is delivered afterwards."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:
            break
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not record the end of an interrupted execution: %s", task.exception())
    if cancelled:
        raise asyncio.CancelledError


@dataclass(frozen=True, slots=True)
class ExecutionResult:
    authorization: Authorization
    outcome: RunOutcome
    error: OrchestratorError | None

    @property
    def ok(self) -> bool:
        """The command ran to exit 0 within every limit, and the workspace record is complete."""
        o = self.outcome
        return o.exit_code == 0 and not self.sandbox_failed

    @property
    def sandbox_failed(self) -> bool:
        """The run failed for a reason of the sandbox's, not the command's own exit status (CLI: 125)."""
        o = self.outcome
        return (
            o.exit_code is None
            or o.timed_out
            or o.oom_killed
            or o.pids_limit_killed
            or o.over_budget
            or not o.side_effects_complete
        )

    def to_wire(self) -> RunResult:
        o = self.outcome
        return RunResult(
            ok=self.ok,
            execution_id=self.authorization.execution_id,
            decision=self.authorization.gate.decision.decision.value,
            exit_code=o.exit_code,
            stdout=o.stdout.decode("utf-8", "replace"),
            stderr=o.stderr.decode("utf-8", "replace"),
            truncated=o.truncated,
            timed_out=o.timed_out,
            oom_killed=o.oom_killed,
            duration_ms=o.duration_ms,
            side_effects=o.side_effects.summary() if o.side_effects is not None else None,
            error=_error_body(self.error) if self.error else None,
        )

    def to_json(self) -> dict[str, Any]:
        """The `sandboxctl run --json` shape."""
        return self.to_wire().model_dump(mode="json")
