"""The Orchestrator: the façade every front door calls — ``authorize`` (the Authorizer: gate, approvals,
session approvals, auto-approve, budget grants; no backend needed), ``run`` (the Runner: profile, backend,
pool, evidence), ``execute`` (both). ``pipeline.factory`` wires one from a config (``open_orchestrator``,
``assemble``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.approvals.base import ApprovalProvider
from orchestrator.approvals.session import SessionApprovals
from orchestrator.backends.base import OutputCallback, OutputStream, SandboxBackend, SandboxHandle
from orchestrator.budgets.book import GrantBook
from orchestrator.domain.errors import InternalError
from orchestrator.domain.ids import ExecutionId
from orchestrator.evidence import EventType, EvidenceWriter
from orchestrator.gate.gate import Gate
from orchestrator.pipeline.authorizer import Authorization, Authorizer
from orchestrator.pipeline.governing import Governing, governing_paths
from orchestrator.pipeline.observer import Observer, Telemetry
from orchestrator.pipeline.pool import SandboxPool
from orchestrator.pipeline.runner import ExecutionResult, Runner
from orchestrator.pipeline.tasks import Guarded, despite_cancellation
from orchestrator.profiles import ProfileRegistry, ResolvedProfile

__all__ = ["Authorization", "ExecutionResult", "Observer", "Orchestrator", "Telemetry"]


class Orchestrator:
    def __init__(self, authorizer: Authorizer, runner: Runner | None = None) -> None:
        self.authorizer = authorizer
        self.runner = runner  # None: this orchestrator decides only (nothing can run)
        self.background = Guarded()  # e.g. the orphan reaper (pipeline.factory.open_orchestrator)

    # -- what the front doors read ------------------------------------------------------------------
    @property
    def evidence(self) -> EvidenceWriter:
        return self.authorizer.evidence.writer

    @property
    def gate(self) -> Gate:
        return self.authorizer.gate

    @property
    def approvals(self) -> ApprovalProvider | None:
        return self.authorizer.approvals

    @approvals.setter
    def approvals(self, provider: ApprovalProvider | None) -> None:
        self.authorizer.approvals = provider

    @property
    def session_approvals(self) -> SessionApprovals:
        return self.authorizer.session_approvals

    @property
    def budget_grants(self) -> GrantBook | None:
        return self.authorizer.reservations.book

    @property
    def governing(self) -> tuple[Governing, ...]:
        return self.authorizer.governing

    @property
    def telemetry(self) -> Telemetry:
        return self.authorizer.evidence.telemetry.sink

    @telemetry.setter
    def telemetry(self, sink: Telemetry) -> None:
        self.authorizer.evidence.telemetry.sink = sink

    @property
    def backend(self) -> SandboxBackend | None:
        return None if self.runner is None else self.runner.backend

    @property
    def profiles(self) -> ProfileRegistry | None:
        return None if self.runner is None else self.runner.profiles.registry

    @property
    def pool(self) -> SandboxPool | None:
        return None if self.runner is None else self.runner.pool

    def governing_paths(self) -> list[Governing]:
        """What governs the runs here (evidence, profiles, the config's files, state, code): what ``run`` keeps
        out of every workspace it is given."""
        if self.runner is not None:
            return self.runner.governing_paths()
        return governing_paths(evidence=self.evidence.path, profile_dirs=(), extra=self.governing)

    # -- the flow -----------------------------------------------------------------------------------
    async def authorize(
        self,
        raw: Any,
        *,
        execution_id: ExecutionId | None = None,
        observer: Observer | None = None,
        approval_deadline: float | None = None,
        durable: bool = True,
    ) -> Authorization:
        """Decide ``raw`` (a request model or dict): an Authorization, or the refusal raised (see
        ``Authorizer.authorize``)."""
        return await self.authorizer.authorize(
            raw, execution_id=execution_id, observer=observer, approval_deadline=approval_deadline, durable=durable
        )

    async def record_event(
        self, event: EventType, auth: Authorization, *, durable: bool = False, data: dict[str, Any]
    ) -> None:
        """A record of ``auth``'s execution beside the flow's own (a session's input, output and end)."""
        await self.authorizer.evidence.of(auth.execution_id, auth.gate).record(event, durable=durable, data=data)

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
        stopped_by: Callable[[], str | None] | None = None,
    ) -> ExecutionResult:
        """Run an authorized request in a fresh sandbox. ``stopped_by()``: why its caller stopped it, if it did (a
        session closed or idle: its end record says so, as its end cause). ``session``: an interactive session's sandbox
        (its stdin open for the backend's send_input from ``on_started`` on, its deadline the profile's
        session lifetime); see :mod:`orchestrator.service.sessions`. ``on_capped(stream)``: with
        ``on_output``, once a stream passed the profile's cap (nothing more of it is shown). Its grant's
        reservation is settled or released exactly once, whatever ends it (cancellation too)."""
        try:
            if self.runner is None:
                raise InternalError("this orchestrator has no sandbox backend")
            return await self.runner.run(
                auth,
                workspace=workspace,
                observer=observer,
                on_output=on_output,
                session=session,
                on_started=on_started,
                on_capped=on_capped,
                stopped_by=stopped_by,
            )
        finally:
            await despite_cancellation(self.abandon(auth))

    async def abandon(self, auth: Authorization) -> None:
        """What a grant reserved for ``auth`` and nobody charged yet is freed: the caller gave up before
        ``run``, or the run ended before it settled the reservation."""
        records = self.authorizer.evidence.of(auth.execution_id, auth.gate)
        await self.authorizer.reservations.abandon(auth.reservations, records)

    def prestart(self, raw: Any, *, workspace: Path) -> bool:
        """Have the pool start a sandbox for runs like ``raw`` in ``workspace`` now, before the first one
        comes (nothing is decided, recorded or run: a run still goes through the gate). False when such a
        run would not take a pooled sandbox (no pool, a terminal, a profile that keeps its runs cold) or
        would be refused (the run says why, on the record)."""
        return self.runner is not None and self.runner.prestart(raw, workspace=workspace)

    def retire_workspace(self, workspace: Path) -> int:
        """``workspace`` is about to be removed: the pool's sandboxes started for it are destroyed, unclaimed
        (none will ever be claimed: a new directory is a new key), and its keys forgotten. How many were ready."""
        pool = self.pool
        return 0 if pool is None else pool.retire(str(Path(workspace).resolve()))

    async def settle(self) -> None:
        """Until the runs answered from their sandbox's own end report have the engine's confirmation on the
        record and their sandbox removed (they follow the end record: ``pipeline/confirmations.py``)."""
        if self.runner is not None:
            await self.runner.confirmations.settle()

    async def aclose(self) -> None:
        await self.background.cancel_all()
        if self.runner is not None:
            await self.runner.aclose()
        await self.evidence.close()
        if self.runner is not None:
            await self.runner.backend.close()
