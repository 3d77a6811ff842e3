"""Build an Orchestrator from the config file: the providers it names, the evidence it points to."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from orchestrator.approvals.auto import AutoApprove
from orchestrator.approvals.base import ApprovalProvider
from orchestrator.approvals.queue import ApprovalStore, QueueApprover
from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.approvals.session import SessionApprovals
from orchestrator.approvals.terminal import TerminalApprover
from orchestrator.backends.base import SandboxBackend
from orchestrator.budgets.book import GrantBook
from orchestrator.domain.errors import NoApprovalProvider
from orchestrator.egress.runs import EgressSettings
from orchestrator.evidence import EvidenceWriter, default_evidence_path
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.authorizer import Authorizer
from orchestrator.pipeline.backend_choice import backend_for_file
from orchestrator.pipeline.config import OrchestratorConfig, PoolSettings, load_config
from orchestrator.pipeline.governing import (
    Governing,
    approval_queue,
    check_workspace,
    governing_paths,
    policy_file,
    service_store,
    state_directories,
)
from orchestrator.pipeline.observer import GuardedTelemetry
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.pipeline.profile_changes import ProfileChanges
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.pipeline.reaper import collect_orphans
from orchestrator.pipeline.recorder import Evidence
from orchestrator.pipeline.reservations import Reservations
from orchestrator.pipeline.retries import RestrictedRuns
from orchestrator.pipeline.runner import Runner
from orchestrator.profiles import ProfileCaps, ProfileRegistry
from orchestrator.profiles.source import ProfilesInForce, ProfileSource

log = logging.getLogger(__name__)


def state_dir() -> Path:
    return default_evidence_path().parent


# A path a config file names is absolute once loaded (relative ones count from the file's directory:
# config.load_config); a default one is in the state dir. Never resolved against the current directory here.


def queue_path(config: OrchestratorConfig) -> Path:
    """The queue of ``sandboxctl run`` and the library under ``config`` (approvals.provider: queue)."""
    section = config.approvals
    return Path(os.path.abspath(section.queue_path or state_dir() / "approvals.db"))


def service_store_path(config: OrchestratorConfig) -> Path:
    """The state store of ``sandboxctl serve`` under ``config``: its asks wait there, not at queue_path."""
    section = config.service
    return Path(os.path.abspath(section.store or state_dir() / "service.db"))


def evidence_path(config: OrchestratorConfig) -> Path:
    """The evidence file of everything under ``config`` (run, serve, doctor, gc): evidence.path, else the
    default (SANDBOX_EVIDENCE_PATH, else the state dir's)."""
    return Path(os.path.abspath(config.evidence.path or default_evidence_path()))


_evidence_of = evidence_path  # build_orchestrator's parameter of that name hides it there


def approval_queues(config: OrchestratorConfig) -> tuple[Path, ...]:
    """Every queue an ask under ``config`` may wait in: the service's, then the one local runs use (once, when
    both name the same file, however spelt)."""
    queues: dict[str, Path] = {}
    for path in (service_store_path(config), queue_path(config)):
        queues.setdefault(os.path.realpath(path), path)
    return tuple(queues.values())


def config_governing(config_path: Path | None, config: OrchestratorConfig) -> tuple[Governing, ...]:
    """What a config names that governs runs, whichever process runs under it: the policy file, and every
    queue an answer may come from (the service's store and the runs' queue, whatever the provider: a sandbox
    that wrote the store a service polls would answer its own asks)."""
    governing: tuple[Governing, ...] = (policy_file(config_path),) if config_path is not None else ()
    return (*governing, service_store(service_store_path(config)), approval_queue(queue_path(config)))


def approval_provider(config: OrchestratorConfig) -> ApprovalProvider | None:
    section = config.approvals
    if section.provider == "rules":
        return RuleApprover(RuleApprovalsConfig(rules=section.rules, default=section.default))
    if section.provider == "queue":
        rules = RuleApprover(RuleApprovalsConfig(rules=section.rules)) if section.rules else None
        return QueueApprover(ApprovalStore(queue_path(config)), rules=rules)
    if section.provider in ("terminal", "auto"):
        try:
            return TerminalApprover()
        except NoApprovalProvider:
            # asks will fail fast with CONFIG.NO_APPROVAL_PROVIDER; allowed requests still run
            if section.provider == "terminal":
                log.warning("terminal approvals configured but stdin is not a TTY: asks will be refused")
            return None
    return None


def build_orchestrator(
    config_path: Path | None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    evidence_path: Path | None = None,
    approvals: ApprovalProvider | None = None,
    backend: SandboxBackend | None = None,
    profiles: ProfileRegistry | ProfilesInForce | None = None,
) -> Orchestrator:
    """With ``workspace``, what governs the runs (the config and every file it pulls in, profiles,
    evidence, state, code) is checked to be out of that workspace's reach before anything is decided
    (INPUT.INVALID naming the file); ``run`` checks again for the workspace it is given."""
    governing: tuple[Governing, ...] = (policy_file(config_path),) if config_path is not None else ()
    protected = () if backend is None else backend.capabilities.protected_paths  # the engine's state and socket
    if workspace is not None:
        check_workspace(  # before it is read
            Path(workspace), governing=[*state_directories(), *governing], protected=protected
        )
    config = load_config(config_path)
    path = evidence_path or _evidence_of(config)
    governing = config_governing(config_path, config)
    if workspace is not None:
        profile_dirs = profiles.search_path if profiles is not None else ()
        check_workspace(
            Path(workspace),
            governing=governing_paths(evidence=path, profile_dirs=profile_dirs, extra=governing),
            protected=protected,
        )
    return assemble(
        evidence=EvidenceWriter(path),
        policy=PolicySource(config_path),
        approvals=approvals if approvals is not None else approval_provider(config),
        workspace=workspace,
        backend=backend,
        profiles=profiles,
        caps=config.caps,
        governing=governing,
        pool=config.pool,
        auto_approve=config.approvals.auto_approve,
        egress=config.egress,
    )


def assemble(
    *,
    evidence: EvidenceWriter,
    policy: PolicySource | None = None,
    approvals: ApprovalProvider | None = None,
    workspace: str | os.PathLike[str] | None = None,
    session_approvals: SessionApprovals | None = None,
    backend: SandboxBackend | None = None,
    profiles: ProfileRegistry | ProfilesInForce | None = None,
    caps: ProfileCaps | None = None,
    governing: tuple[Governing, ...] = (),
    pool: PoolSettings | None = None,
    auto_approve: AutoApprove | None = None,
    egress: EgressSettings | None = None,
    budget_grants: GrantBook | None = None,
) -> Orchestrator:
    """The composition root: an Orchestrator from its parts. Without a backend and profiles it only decides
    (``run`` is INTERNAL); what the authorizer and the runner share (the evidence, the grants' reservations,
    the restricted runs that retries link to) is made once here. ``profiles`` a ``ProfileSource``: the set in
    force follows its files, each change on the record and the pool drained of the profiles it changed."""
    records = Evidence(evidence, GuardedTelemetry())
    reservations = Reservations(budget_grants)
    restricted = RestrictedRuns()
    chosen = None if profiles is None else Profiles.under(caps, profiles)
    authorizer = Authorizer(
        evidence=records,
        policy=policy,
        approvals=approvals,
        workspace=workspace,
        session_approvals=session_approvals,
        auto_approve=auto_approve,
        reservations=reservations,
        profiles=chosen,
        restricted=restricted,
        governing=governing,
    )
    runner = None
    if backend is not None and chosen is not None:
        runner = Runner(
            backend=backend,
            profiles=chosen,
            evidence=records,
            reservations=reservations,
            restricted=restricted,
            governing=governing,
            pool=pool,
            egress=egress,
        )
    if chosen is not None:
        chosen.source.subscribe(ProfileChanges(records, caps, runner.pool if runner is not None else None))
    return Orchestrator(authorizer, runner)


async def open_orchestrator(
    config: str | os.PathLike[str] | None = None,
    *,
    workspace: str | os.PathLike[str] | None = None,
    evidence_path: str | os.PathLike[str] | None = None,
    approvals: ApprovalProvider | None = None,
    backend: SandboxBackend | None = None,
) -> Orchestrator:
    """An orchestrator ready to ``execute()``: the config's policy, approvals and evidence, the built-in
    profiles and ``$SANDBOX_PROFILES_PATH``'s (re-read when their files change), the config's backend (Docker
    unless it says otherwise; ``backend`` if given) — and the orphan reaper running once beside it as a
    guarded task. Close it with ``await orch.aclose()``."""
    config_path = Path(config) if config is not None else None
    chosen = backend if backend is not None else backend_for_file(config_path)
    chosen.prepare()
    orch = build_orchestrator(
        config_path,
        workspace=workspace,
        evidence_path=Path(evidence_path) if evidence_path is not None else None,
        approvals=approvals,
        backend=chosen,
        profiles=ProfileSource(),
    )
    orch.background.spawn(collect_orphans(chosen, orch.evidence), "orphan-reaper")
    return orch
