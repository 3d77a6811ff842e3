"""Executions as the service sees them: accepted at once, decided and run in the background, kept in the
state store, watched by their callers.

Every execution runs through exactly the same ``Orchestrator.execute`` as `sandboxctl run` — the
service adds no second path that could decide differently. It names the execution before the gate
decides, follows it through the orchestrator's observer (decided → pending_approval → running) and
keeps its view in the store, so that a restart finds it: asks still pending are waited for again
(their deadline unchanged; one that passed meanwhile is APPROVAL.TIMEOUT), executions that were
running are ended as abandoned (their sandboxes collected), and nothing accepted is lost or run twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from orchestrator.approvals.base import SUSPEND
from orchestrator.domain.decisions import ApprovalResult
from orchestrator.domain.errors import (
    ApprovalNotPending,
    ExecutionCancelled,
    ExecutionNotRunning,
    Forbidden,
    InputInvalid,
    NotFound,
    OrchestratorError,
)
from orchestrator.domain.ids import ExecutionId, new_execution_id
from orchestrator.domain.principal import Principal, Role
from orchestrator.domain.requests import ExecCommandRequest
from orchestrator.domain.usage import RunUsage
from orchestrator.domain.wire import (
    ApprovalInfo,
    ErrorBody,
    ExecutionPage,
    ExecutionState,
    ExecutionView,
    OutputChunk,
)
from orchestrator.evidence import EventType
from orchestrator.evidence.usage import abandoned_run
from orchestrator.gate.gate import GateResult
from orchestrator.pipeline.orchestrator import ExecutionResult, Observer, Orchestrator
from orchestrator.profiles import ResolvedProfile
from orchestrator.service.output_log import BoundsMemory, OutputLog
from orchestrator.service.workspaces import Workspaces
from orchestrator.state.store import StateStore, StoredExecution

log = logging.getLogger(__name__)

# finished executions kept in memory for late readers (then: read back from the store)
_KEEP_FINISHED = 256
_KEEP_FINISHED_BYTES = 64 * 1024 * 1024  # of output (characters), over all of them
USAGE_KEEP_S = 90 * 86_400  # how long a run's usage row is kept (the evidence keeps it for ever)
USAGE_TRIM_EVERY = 1_000  # rows stored between two trims of the older ones


@dataclass(slots=True)
class _Live:
    """An execution this process drives."""

    view: ExecutionView
    task: asyncio.Task[None] | None = None
    accepted: asyncio.Event = field(default_factory=asyncio.Event)  # decided: refused, asked or running
    done: asyncio.Event = field(default_factory=asyncio.Event)
    output: OutputLog = field(default_factory=OutputLog)
    changed: asyncio.Event = field(default_factory=asyncio.Event)  # replaced after each set
    early_error: OrchestratorError | None = None  # refused before it was accepted (nothing stored)

    def notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


def _now() -> datetime:
    return datetime.now(UTC)


def _error_state(err: OrchestratorError, started: bool) -> ExecutionState:
    if isinstance(err, ExecutionCancelled):
        return ExecutionState.CANCELLED
    return ExecutionState.FAILED if started else ExecutionState.REFUSED


class ExecutionManager(Observer):
    def __init__(
        self,
        orchestrator: Orchestrator,
        store: StateStore,
        workspaces: Workspaces,
        *,
        allow_self_approval: bool = False,
        on_change: Callable[[ExecutionView], None] | None = None,
    ) -> None:
        self.orchestrator = orchestrator
        self.store = store
        self.workspaces = workspaces
        self.allow_self_approval = allow_self_approval
        self._listeners: list[Callable[[ExecutionView], None]] = [on_change] if on_change else []
        self._live: dict[str, _Live] = {}
        self._finished: list[str] = []  # oldest first, for trimming _live
        self._bounds = BoundsMemory()
        self.abandoned: set[str] = set()  # ended by recover(): their sandboxes' removal is no second end
        self._measured = 0  # runs whose usage was stored since the start

    def add_listener(self, listener: Callable[[ExecutionView], None]) -> None:
        """Called with each changed execution (on the loop; must not block)."""
        self._listeners.append(listener)

    # -- the observer (called by the orchestrator, on the loop) ------------------------------------
    def decided(self, execution_id: ExecutionId, gate: GateResult) -> None:
        live = self._live[execution_id]
        d = gate.decision
        live.view = live.view.model_copy(
            update={
                "request": gate.public,
                "decision": d.decision.value,
                "reason": d.reason,
                "risk_level": d.risk.risk_level,
                "matched_rule": d.matched_rule,
                "profile": gate.sanitized.profile or self.orchestrator.gate.default_profile,  # what it will get
                "updated_at": _now(),
            }
        )

    def awaiting_approval(self, execution_id: ExecutionId, deadline_unix: float) -> None:
        live = self._live[execution_id]
        info = ApprovalInfo(approval_id=execution_id, deadline=datetime.fromtimestamp(deadline_unix, UTC))
        live.view = live.view.model_copy(update={"approval": info})
        self._change(live, ExecutionState.PENDING_APPROVAL)

    def approval_settled(self, execution_id: ExecutionId, result: ApprovalResult) -> None:
        live = self._live[execution_id]
        before = live.view.approval or ApprovalInfo(approval_id=execution_id)
        info = before.model_copy(
            update={"outcome": result.outcome.value, "approver": result.approver, "reason": result.reason}
        )
        live.view = live.view.model_copy(update={"approval": info})
        # the approval is answered: the request's secrets leave the store
        self._spawn_store(live.view, keep_request=False)

    def running(self, execution_id: ExecutionId, profile: ResolvedProfile) -> None:
        live = self._live[execution_id]
        live.view = live.view.model_copy(update={"profile": profile.name})
        self._change(live, ExecutionState.RUNNING)

    def measured(self, usage: RunUsage) -> None:
        """A run's usage, kept for ``profiles usage | recommend | whatif``; older rows than USAGE_KEEP_S go
        now and then (every USAGE_TRIM_EVERY rows, and at start)."""
        task = asyncio.ensure_future(self.store.put_usage(usage))
        task.add_done_callback(_log_store_failure)
        self._measured += 1
        if self._measured % USAGE_TRIM_EVERY == 0:
            trim = asyncio.ensure_future(self.store.forget_usage(before=time.time() - USAGE_KEEP_S))
            trim.add_done_callback(_log_store_failure)

    # -- state changes -----------------------------------------------------------------------------
    def _change(self, live: _Live, state: ExecutionState, *, store: bool = True, **update: Any) -> None:
        live.view = live.view.model_copy(update={"state": state, "updated_at": _now(), **update})
        if state is not ExecutionState.RECEIVED:
            live.accepted.set()
        if store:
            # an execution that ended keeps no request (its secrets) in the store, however it ended
            self._spawn_store(live.view, keep_request=not state.final)
        live.notify()
        for listener in self._listeners:
            try:
                listener(live.view)
            except Exception as exc:
                log.warning("execution change listener failed: %s", type(exc).__name__)

    def _spawn_store(self, view: ExecutionView, **kwargs: Any) -> None:
        # ordered: the store runs one call at a time, in submission order
        task = asyncio.ensure_future(self.store.put(view, **kwargs))
        task.add_done_callback(_log_store_failure)

    def add_output(self, execution_id: str, stream: str, data: bytes) -> None:
        """A redacted, capped chunk of a running execution's output (from the orchestrator)."""
        live = self._live.get(execution_id)
        if live is None or not data:
            return
        live.output.append(stream, data.decode("utf-8", "replace"))  # type: ignore[arg-type]
        live.notify()

    # -- submitting --------------------------------------------------------------------------------
    async def submit(
        self,
        raw: Any,
        principal: Principal,
        *,
        wait_s: float | None = None,
        ci_job: str | None = None,
        on_id: Callable[[str], object] | None = None,
    ) -> ExecutionView:
        """Accept ``raw`` for ``principal``; returns once it is decided (refusals raise) — or, with
        ``wait_s``, once it finished or that time passed. ``ci_job``: the controller's CI job the request is a
        step of (ci.jobs only), put in its CI context; a request never names one itself. ``on_id(execution_id)``:
        called as soon as the execution is named, before anything is awaited (its caller may cancel it while
        this waits)."""
        if principal.role is Role.APPROVER:
            raise Forbidden("an approver token cannot submit executions")
        if not isinstance(raw, dict):
            raise InputInvalid("the body must be a JSON object (a request)", details={"fields": ["(root)"]})
        ci = raw.get("ci")
        if isinstance(ci, dict) and "controller_job" in ci:
            raise InputInvalid(
                "ci.controller_job: set by the controller for the steps of its CI jobs, never by a request",
                details={"fields": ["ci.controller_job"]},
            )
        if ci_job is None and raw.get("externals", False) is not False:  # false: what a request model dumps
            raise InputInvalid(
                "externals: set by the controller for the steps of its CI jobs (the runner's externals of a job's"
                " runner), never by a request",
                details={"fields": ["externals"]},
            )
        if ci_job is not None and isinstance(ci, dict):
            raw = {**raw, "ci": {**ci, "controller_job": ci_job}}
        raw = self.owned(raw, principal)
        execution_id = new_execution_id()
        workspace = self.workspaces.path(raw["tenant"], raw.get("session_id"))  # created once it runs
        now = _now()
        live = _Live(
            view=ExecutionView(
                execution_id=execution_id,
                state=ExecutionState.RECEIVED,
                tenant=raw["tenant"],
                subject=raw["subject"],
                tool=str(raw.get("tool", "")),
                session_id=raw.get("session_id") if isinstance(raw.get("session_id"), str) else None,
                created_at=now,
                updated_at=now,
                request={},
            )
        )
        self._live[execution_id] = live
        live.task = asyncio.create_task(self._drive(live, raw, workspace, None), name=f"execution-{execution_id}")
        if on_id is not None:
            on_id(execution_id)
        await live.accepted.wait()
        if live.early_error is not None:
            if live.view.decision is None:
                self._live.pop(execution_id, None)
            raise live.early_error
        if live.view.state is ExecutionState.PENDING_APPROVAL:
            # it waits: keep the whole request, so that a restart can still run it once approved
            await self.store.put(live.view, pending_request=raw, workspace=str(workspace))
            await self._until_queued(live)
        if wait_s is not None and wait_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await live.done.wait()
        return live.view

    async def _until_queued(self, live: _Live) -> None:
        """The 202 of an ask promises it is in the approval queue (listed, decidable): the waiter puts it
        there a moment after it reports the wait."""
        approval_id = live.view.execution_id
        for _ in range(400):
            if live.done.is_set() or live.view.state is not ExecutionState.PENDING_APPROVAL:
                return
            if await asyncio.to_thread(self.store.approvals.known, approval_id):
                return
            await asyncio.sleep(0.005)

    def owned(self, raw: dict[str, Any], principal: Principal) -> dict[str, Any]:
        """The request as its caller may make it: tenant and subject are the token's (an admin may name
        any tenant and subject)."""
        tenant = raw.get("tenant")
        for name in ("tenant", "subject"):
            if name in raw and not isinstance(raw[name], str):
                raise InputInvalid(f"{name}: must be a string", details={"fields": [name]})
        if principal.role is Role.ADMIN:
            return {**raw, "tenant": tenant or "default", "subject": raw.get("subject") or principal.subject}
        if tenant is None:
            if len(principal.tenants) != 1:
                raise InputInvalid(
                    "tenant: name the tenant (this token acts for several)", details={"fields": ["tenant"]}
                )
            tenant = next(iter(principal.tenants))
        if not isinstance(tenant, str) or not principal.sees(tenant):
            raise Forbidden("this token does not act for that tenant")
        subject = raw.get("subject", principal.subject)
        if subject != principal.subject:
            raise Forbidden("subject: a token submits as itself")
        return {**raw, "tenant": tenant, "subject": principal.subject}

    async def _drive(self, live: _Live, raw: dict[str, Any], workspace: Path, approval_deadline: float | None) -> None:
        execution_id = ExecutionId(live.view.execution_id)
        started = False
        try:
            auth = await self.orchestrator.authorize(
                raw, execution_id=execution_id, observer=self, approval_deadline=approval_deadline
            )
            started = True
            try:
                await self.workspaces.ensure(live.view.tenant, live.view.session_id)
            except BaseException:  # never run: what a grant reserved for it is freed
                await asyncio.shield(self.orchestrator.abandon(auth))
                raise
            result = await self.orchestrator.run(
                auth, workspace=workspace, observer=self, on_output=functools.partial(self.add_output, execution_id)
            )
            self._finish(live, result)
        except asyncio.CancelledError as cancel:
            if cancel.args and cancel.args[0] == SUSPEND:
                return  # the service stops; the store keeps the execution as it was
            why = f"cancelled {cancel.args[0]}" if cancel.args else "cancelled"
            self._fail(live, ExecutionCancelled(why), started)
            raise
        except OrchestratorError as err:
            if not live.accepted.is_set():
                live.early_error = err  # refused at once (denied, invalid): the caller gets the error itself
            if live.view.decision is not None:  # invalid input was never accepted: nothing to keep
                self._fail(live, err, started)
        except Exception as exc:  # a bug: the orchestrator recorded what it could; the view says so
            log.warning("execution %s failed unexpectedly: %s", execution_id, type(exc).__name__)
            self._fail(live, OrchestratorError(f"unexpected {type(exc).__name__}"), started)
        finally:
            live.accepted.set()
            live.done.set()
            live.notify()
            self._retire(live.view.execution_id)

    def _finish(self, live: _Live, result: ExecutionResult) -> None:
        wire = result.to_wire()
        bounds = live.output.seal(wire)  # the chunks become boundaries over the result's text
        if bounds is not None:
            self._bounds.remember(live.view.execution_id, bounds)
        state = ExecutionState.SUCCEEDED if result.ok else ExecutionState.FAILED
        error = ErrorBody.of(result.error) if result.error else None
        self._change(live, state, result=wire, error=error)

    def _fail(self, live: _Live, err: OrchestratorError, started: bool) -> None:
        self._change(live, _error_state(err, started), error=ErrorBody.of(err))

    def _retire(self, execution_id: str) -> None:
        """Finished executions stay in memory for late readers, within a count and a size."""
        self._finished.append(execution_id)
        while self._finished and (len(self._finished) > _KEEP_FINISHED or self._kept_bytes() > _KEEP_FINISHED_BYTES):
            self._live.pop(self._finished.pop(0), None)

    def _kept_bytes(self) -> int:
        total = 0
        for ident in self._finished:
            live = self._live.get(ident)
            if live is not None:
                result = live.view.result
                total += live.output.size() + (len(result.stdout) + len(result.stderr) if result else 0)
        return total

    # -- sessions: service.sessions drives them; their views, store rows and events are these --------
    def session_opening(self, execution_id: str, request: ExecCommandRequest) -> Observer:
        """A session's execution is about to be decided: seen, listed and stored like any other (so a
        restart ends it on the record: recover())."""
        now = _now()
        self._live[execution_id] = _Live(
            view=ExecutionView(
                execution_id=execution_id,
                state=ExecutionState.RECEIVED,
                tenant=request.tenant,
                subject=request.subject,
                tool=request.tool,
                session_id=request.session_id,
                created_at=now,
                updated_at=now,
                request={},
            )
        )
        return self

    def session_ended(
        self, execution_id: str, result: ExecutionResult | None, error: OrchestratorError | None, started: bool
    ) -> None:
        live = self._live.get(execution_id)
        if live is None:
            return
        if result is not None:
            self._finish(live, result)
        elif live.view.decision is None:  # refused before the gate decided (invalid): nothing to keep
            self._live.pop(execution_id, None)
            return
        else:
            self._fail(live, error or ExecutionCancelled("the session ended"), started)
        live.accepted.set()
        live.done.set()
        live.notify()
        self._retire(execution_id)

    # -- reading -----------------------------------------------------------------------------------
    async def get(self, execution_id: str, principal: Principal) -> ExecutionView:
        live = self._live.get(execution_id)
        if live is not None and live.view.state is not ExecutionState.RECEIVED:
            view = live.view
        else:
            stored = await self.store.get(execution_id)
            if stored is None:
                raise NotFound(f"no execution {execution_id}")
            view = ExecutionView.model_validate(stored.view)
        if not principal.sees(view.tenant):
            raise NotFound(f"no execution {execution_id}")  # another tenant's: indistinguishable
        return view

    async def wait(self, execution_id: str, principal: Principal, wait_s: float) -> ExecutionView:
        view = await self.get(execution_id, principal)
        live = self._live.get(execution_id)
        if live is not None and not view.state.final:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):
                    await live.done.wait()
            return live.view
        return view

    async def page(
        self, principal: Principal, *, state: str | None, tenant: str | None, limit: int, cursor: str | None
    ) -> ExecutionPage:
        tenants = principal.tenant_filter
        if tenant is not None:
            if not principal.sees(tenant):
                return ExecutionPage(items=[], next_cursor=None)  # like an empty tenant: nothing to tell apart
            tenants = (tenant,)
        if state is not None and state not in {s.value for s in ExecutionState}:
            raise InputInvalid(
                f"state: one of {', '.join(s.value for s in ExecutionState)}", details={"fields": ["state"]}
            )
        before = _cursor_seq(cursor)
        rows = await self.store.page(tenants=tenants, state=state, before_seq=before, limit=limit + 1)
        items = [self._current(row) for row in rows[:limit]]
        next_cursor = str(rows[limit - 1].seq) if len(rows) > limit else None
        return ExecutionPage(items=items, next_cursor=next_cursor)

    def _current(self, row: StoredExecution) -> ExecutionView:
        live = self._live.get(row.id)  # fresher than the store while it runs
        return live.view if live is not None else ExecutionView.model_validate(row.view)

    async def output(
        self, execution_id: str, principal: Principal, after: int
    ) -> AsyncIterator[tuple[int, OutputChunk | ExecutionView | None]]:
        """(index, chunk) for each chunk after index ``after`` as it comes, then (-1, the final view).
        (-2, None) first when ``after`` cannot be honoured (the execution was read back without its
        numbering): the chunks that follow are the whole output again."""
        view = await self.get(execution_id, principal)
        live = self._live.get(execution_id)
        if live is None:  # from the store: the result's output, numbered as remembered
            log = OutputLog.of_result(view.result, self._bounds.get(execution_id))
            if after >= 0 and not log.reliable:
                yield -2, None
                after = -1
            for index in range(after + 1, len(log)):
                yield index, log.chunk(index)
            if view.state.final:
                yield -1, view
            return
        index = after
        while True:
            changed = live.changed
            while index + 1 < len(live.output):
                index += 1
                yield index, live.output.chunk(index)
            if live.done.is_set():
                yield -1, live.view
                return
            await changed.wait()

    # -- cancelling --------------------------------------------------------------------------------
    async def cancel(self, execution_id: str, principal: Principal) -> ExecutionView:
        view = await self.get(execution_id, principal)
        live = self._live.get(execution_id)
        if view.state.final or live is None or live.task is None or live.task.done():
            raise ExecutionNotRunning(f"execution {execution_id} already ended ({view.state.value})")
        await self.orchestrator.evidence.append(
            {
                "event": EventType.CANCEL_REQUESTED,
                "execution_id": execution_id,
                "tenant": view.tenant,
                "subject": principal.label,
                "reason": f"cancel asked by {principal.label} ({principal.role.value})",
            },
            durable=True,
        )
        live.view = live.view.model_copy(update={"cancelled_by": principal.label})
        live.task.cancel(f"by {principal.label}")
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(live.done.wait())
        if live.view.state is not ExecutionState.CANCELLED:  # it ended (ran to its end) before the cancel
            raise ExecutionNotRunning(
                f"execution {execution_id} ended ({live.view.state.value}) before the cancel took effect",
                details={"state": live.view.state.value},
            )
        return live.view

    # -- approvals ---------------------------------------------------------------------------------
    def check_may_decide(self, principal: Principal, tenant: str, submitted_by: str) -> None:
        if principal.role is Role.AGENT:
            raise Forbidden("an agent token cannot decide approvals")
        if not principal.sees(tenant):
            raise NotFound("no such pending approval")
        if submitted_by == principal.subject and not self.allow_self_approval:
            raise Forbidden("an approver cannot decide an execution it submitted itself")

    def not_pending(self, approval_id: str, state: str, kept: ApprovalResult | None) -> ApprovalNotPending:
        what = f"{kept.outcome.value} by {kept.approver}" if kept is not None else state
        return ApprovalNotPending(f"approval {approval_id} is no longer pending: {what}", details={"state": state})

    # -- start-up and shutdown ---------------------------------------------------------------------
    async def recover(self) -> dict[str, int]:
        """After a restart: resume the waits of pending asks, end what was running as abandoned."""
        counts = {"resumed": 0, "abandoned": 0}
        await self.store.forget_ended_requests()  # left by a crash between an end and its row's update
        await self.store.forget_usage(before=time.time() - USAGE_KEEP_S)
        for row in await self.store.in_states(
            [ExecutionState.RECEIVED, ExecutionState.PENDING_APPROVAL, ExecutionState.RUNNING]
        ):
            view = ExecutionView.model_validate(row.view)
            if row.state == ExecutionState.PENDING_APPROVAL and row.pending_request is not None and row.workspace:
                self._resume(view, row.pending_request, Path(row.workspace))
                counts["resumed"] += 1
            else:
                await self._abandon(view)
                counts["abandoned"] += 1
        return counts

    def _resume(self, view: ExecutionView, raw: dict[str, Any], workspace: Path) -> None:
        live = _Live(view=view)
        live.accepted.set()
        self._live[view.execution_id] = live
        deadline = view.approval.deadline.timestamp() if view.approval and view.approval.deadline else time.time()
        live.task = asyncio.create_task(
            self._drive(live, raw, workspace, deadline), name=f"execution-{view.execution_id}"
        )

    async def _abandon(self, view: ExecutionView) -> None:
        self.abandoned.add(view.execution_id)
        await self.orchestrator.evidence.append(
            {
                "event": EventType.EXECUTION_ABANDONED,
                "execution_id": view.execution_id,
                "tenant": view.tenant,
                "subject": view.subject,
                "status": "abandoned",
                "reason": f"the service stopped while the execution was {view.state.value}",
            },
            durable=True,
        )
        if view.state is ExecutionState.RUNNING:  # it began: its usage says it ended failed, every measure unknown
            path = self.orchestrator.evidence.path
            usage = await asyncio.to_thread(abandoned_run, path, view.execution_id, ended_at=time.time())
            if usage is not None:
                self.measured(usage)
                self.orchestrator.telemetry.run_measured(usage)
        error = ErrorBody(code="EXECUTION.CANCELLED", message="the service stopped while it ran: abandoned")
        ended = view.model_copy(update={"state": ExecutionState.CANCELLED, "error": error, "updated_at": _now()})
        await self.store.put(ended, keep_request=False)

    async def suspend(self) -> None:
        """Stop: asks stay queued (resumed at the next start); running executions are cancelled (their
        sandboxes removed, the cancel recorded)."""
        tasks = []
        for live in list(self._live.values()):
            if live.task is None or live.task.done():
                continue
            waiting = live.view.state is ExecutionState.PENDING_APPROVAL
            live.task.cancel(SUSPEND if waiting else "the service is stopping")
            tasks.append(live.task)
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def _cursor_seq(cursor: str | None) -> int | None:
    if cursor is None or cursor == "":
        return None
    if not re.fullmatch(r"[0-9]{1,18}", cursor):
        raise InputInvalid("cursor: not one this service gave", details={"fields": ["cursor"]})
    return int(cursor)


def _log_store_failure(task: asyncio.Future[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not store an execution's state: %s", type(task.exception()).__name__)
