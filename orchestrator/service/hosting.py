"""The long-running service, assembled: one orchestrator (gate, approvals, evidence, backend, profiles
— the very objects `sandboxctl run` builds), the state store, the execution manager, the credentials,
and the guarded background work (the orphan reaper). The HTTP layer drives it and nothing else."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from orchestrator.approvals.base import ApprovalProvider
from orchestrator.approvals.queue import QueueApprover
from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.backends.base import SandboxBackend
from orchestrator.budgets.book import GrantBook
from orchestrator.domain.errors import Forbidden, OrchestratorError, SessionNotFound
from orchestrator.domain.principal import Principal, Role
from orchestrator.evidence import EvidenceWriter, format_ts, records_of, verify
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.backend_choice import backend_for
from orchestrator.pipeline.config import OrchestratorConfig, ServiceLimits, load_config
from orchestrator.pipeline.factory import assemble, config_governing, evidence_path, service_store_path, state_dir
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.pipeline.reaper import collect_orphans
from orchestrator.pipeline.tasks import Guarded
from orchestrator.profiles.source import ProfileSource
from orchestrator.service.executions import ExecutionManager
from orchestrator.service.sessions import SessionReply, Sessions
from orchestrator.service.tokens import Credential, load_credentials
from orchestrator.service.workspaces import Workspaces
from orchestrator.state.session_approvals import StoredSessionApprovals
from orchestrator.state.store import StateStore

log = logging.getLogger(__name__)

REAP_EVERY_S = 60.0


def _approvals(config: OrchestratorConfig, store: StateStore) -> ApprovalProvider | None:
    """A service has no terminal: asks wait in the queue (rules, when given, answer first)."""
    section = config.approvals
    if section.provider == "none":
        return None
    if section.provider == "rules":
        return RuleApprover(RuleApprovalsConfig(rules=section.rules, default=section.default))
    rules = RuleApprover(RuleApprovalsConfig(rules=section.rules)) if section.rules else None
    return QueueApprover(store.approvals, rules=rules)


@dataclass
class Service:
    config: OrchestratorConfig
    orchestrator: Orchestrator
    store: StateStore
    manager: ExecutionManager
    credentials: list[Credential]
    limits: ServiceLimits
    sessions: Sessions
    background: Guarded = field(default_factory=Guarded)
    recovered: dict[str, int] = field(default_factory=dict)

    @classmethod
    async def open(cls, config_path: Path | None, *, backend: SandboxBackend | None = None) -> Service:
        config = load_config(config_path)
        credentials = load_credentials(config.service.tokens)
        section = config.service
        store_path = service_store_path(config)  # where `sandboxctl approvals --config` finds its asks too
        store = await asyncio.to_thread(StateStore, store_path)
        try:
            governing = config_governing(config_path, config)  # its store, the runs' queue, the policy
            if backend is None:
                backend = backend_for(config)
            backend.prepare()
            orchestrator = assemble(
                evidence=EvidenceWriter(evidence_path(config)),
                policy=PolicySource(config_path),
                approvals=_approvals(config, store),
                session_approvals=StoredSessionApprovals(store),
                backend=backend,
                profiles=ProfileSource(),  # the set in force follows its files: a changed profile needs no restart
                caps=config.caps,
                governing=governing,
                pool=config.pool,
                auto_approve=config.approvals.auto_approve,
                egress=config.egress,
                budget_grants=GrantBook(store),
            )
            uid, gid = (int(x) for x in section.workspace_owner.split(":"))
            root = Path(os.path.abspath(section.workspaces or state_dir() / "workspaces"))
            workspaces = Workspaces(root.resolve(), (uid, gid))  # absolute already: its links resolved
            workspaces.check_owner()  # at start-up, not at the first request
            manager = ExecutionManager(
                orchestrator,
                store,
                workspaces,
                allow_self_approval=section.allow_self_approval,
            )
        except BaseException:
            await store.close()
            raise
        sessions = Sessions(orchestrator, max_per_tenant=section.limits.max_sessions_per_tenant, hooks=manager)
        return cls(config, orchestrator, store, manager, credentials, section.limits, sessions)

    async def start(self) -> None:
        """Recover what a previous run left, then collect orphans now and every minute."""
        self.recovered = await self.manager.recover()
        if self.orchestrator.budget_grants is not None:  # nothing runs yet: what a grant held for a run is freed
            released = await self.orchestrator.budget_grants.recover(())
            if released:
                log.info("released %d grant reservation(s) of runs the last service left", len(released))
        self.background.spawn(self._reap_forever(), "orphan-reaper")

    async def _reap_forever(self) -> None:
        backend = self.orchestrator.backend
        assert backend is not None
        while True:
            try:
                await collect_orphans(backend, self.orchestrator.evidence, ended=self.manager.abandoned)
            except OrchestratorError as err:  # the engine is away: try again next time
                log.warning("orphan collection failed: %s", err.code)
            await asyncio.sleep(REAP_EVERY_S)

    async def readiness(self) -> dict[str, str]:
        """Each check: 'ok', or why not."""
        checks: dict[str, str] = {}
        backend = self.orchestrator.backend
        try:
            assert backend is not None
            async with asyncio.timeout(5):
                await backend.info()
            checks["engine"] = "ok"
        except (OrchestratorError, TimeoutError, AssertionError) as err:
            checks["engine"] = f"unreachable: {getattr(err, 'code', type(err).__name__)}"
        try:
            async with asyncio.timeout(5):
                await self.store.writable()
            checks["store"] = "ok"
        except Exception as err:
            checks["store"] = f"not writable: {type(err).__name__}"
        failure = self.orchestrator.evidence.failed
        checks["evidence"] = "ok" if failure is None else f"failed: {type(failure).__name__}"
        return checks

    async def close(self) -> None:
        await self.background.cancel_all()
        await self.manager.suspend()
        await self.sessions.aclose()  # a session does not outlive its controller: each ends, on the record
        await self.orchestrator.aclose()
        await self.store.close()


# -- a caller's sessions: the rules every front door (the HTTP routes, the MCP tools) applies alike --------------
async def open_session_for(service: Service, raw: dict[str, Any], principal: Principal) -> SessionReply:
    """Open ``raw`` (an exec_command request's fields) for ``principal``: its tenant and subject are the token's,
    its workspace made."""
    if principal.role is Role.APPROVER:
        raise Forbidden("an approver token cannot open sessions")
    owned = service.manager.owned({**raw, "tool": "exec_command"}, principal)
    workspace = await service.manager.workspaces.ensure(owned["tenant"], owned.get("session_id"))
    return await service.sessions.open(owned, workspace=workspace)


def session_owner(service: Service, session_id: str, principal: Principal) -> tuple[str, str]:
    """The session's (tenant, subject) when ``principal`` may use it; else SESSION.NOT_FOUND (another tenant's or
    subject's session is never told apart from none)."""
    if principal.role is Role.APPROVER:
        raise Forbidden("an approver token cannot use sessions")
    owner = service.sessions.owner(session_id)
    if (
        owner is None
        or not principal.sees(owner[0])
        or (principal.role is not Role.ADMIN and owner[1] != principal.subject)
    ):
        raise SessionNotFound(f"no session {session_id}", details={"session_id": session_id})
    return owner


async def write_stdin_for(
    service: Service,
    session_id: str,
    principal: Principal,
    *,
    chars: str,
    yield_ms: int,
    max_bytes: int,
    context: dict[str, Any] | None = None,
) -> SessionReply:
    """``chars`` to a session ``principal`` may use. ``context``: what the request records beside (an MCP call's
    ``mcp`` and ``call_id``); never the caller's, the session's or the tool's fields."""
    tenant, subject = session_owner(service, session_id, principal)
    return await service.sessions.write(
        {
            **(context or {}),
            "tool": "write_stdin",
            "session_id": session_id,
            "chars": chars,
            "yield_time_ms": yield_ms,
            "max_output_bytes": max_bytes,
            "tenant": tenant,
            "subject": subject,
        }
    )


# evidence reads run apart (never in the pool the approval queue and the engine calls use), two at a time
_EVIDENCE_READS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="evidence-read")
_EVIDENCE_MARGIN_S = 10.0  # writers of other processes may append slightly out of time order


async def evidence_of(
    service: Service, execution_id: str, principal: Principal, limit: int = 1000
) -> list[dict[str, Any]]:
    """The evidence records of one execution the caller may see (404 otherwise), oldest first: read from
    where the file reaches its creation time, up to a little after its last change when it has ended."""
    view = await service.manager.get(execution_id, principal)
    since = format_ts(view.created_at - timedelta(seconds=_EVIDENCE_MARGIN_S))
    until = format_ts(view.updated_at + timedelta(seconds=60)) if view.state.final else None
    read = functools.partial(
        records_of, service.orchestrator.evidence.path, execution_id, since=since, until=until, limit=limit
    )
    records = await asyncio.get_running_loop().run_in_executor(_EVIDENCE_READS, read)
    return [r.model_dump(mode="json") for r in records]


async def verify_evidence(service: Service) -> dict[str, Any]:
    await service.orchestrator.evidence.flush()
    report = await asyncio.to_thread(verify, service.orchestrator.evidence.path)
    return report.to_dict()
