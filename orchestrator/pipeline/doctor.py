"""sandboxctl doctor: is everything a profile needs really there, and are its limits in force?

Each check says what it found and, when it fails, the fix for its true cause (the backend's own fixes:
never Docker's for a cluster). What only one kind of backend can check is its ``preflight()``, made first:
when one of those fails, what depends on it (the engine's runtimes and images, the probes) is reported as
not checked rather than failed with a guessed cause. The probe runs a tiny sandbox per runtime and reads,
from inside, what the kernel enforces: seccomp mode, no-new-privs, capabilities, the cgroup limits and the
rlimits. Profiles are resolved as a run under the same config resolves them (its caps included): what the
doctor compares with is what a run gets.
"""

from __future__ import annotations

import tempfile
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from orchestrator.backends.base import BackendInfo, Capabilities, SandboxBackend
from orchestrator.backends.checks import PreflightCheck, failed, not_checked
from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.ids import new_execution_id
from orchestrator.domain.requests import Request, parse_request
from orchestrator.evidence import EventType, verify
from orchestrator.pipeline.config import PoolSettings
from orchestrator.pipeline.doctor_pool import ServicePool, pool_checks
from orchestrator.pipeline.executor import run_in_sandbox
from orchestrator.pipeline.launch import launch_spec
from orchestrator.pipeline.probe import PROBE, parse_probe, probe_verdict
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.profiles import ResolvedProfile, format_size
from orchestrator.results import Redactor, snapshot

# one check: what the doctor reports is what a backend's preflight reports
Check = PreflightCheck


async def _noop_record(event: EventType, **fields: Any) -> None:
    return None


def probe_request(profile: str) -> Request:
    """The probe as a run of ``profile`` (a shell command): resolved and launched as any run of it is."""
    return parse_request({"tool": "shell_command", "command": PROBE, "profile": profile})


def limits_name(profile: ResolvedProfile) -> str:
    return f"limits in force ({profile.name}, {profile.runtime})"


async def probe(backend: SandboxBackend, profile: ResolvedProfile, *, node_pids: bool = False) -> Check:
    name = limits_name(profile)
    fix = backend.capabilities.fixes.limits
    # where the backend reaches workspaces (a cluster: below its claim's root)
    with tempfile.TemporaryDirectory(prefix="sandbox-doctor-", dir=backend.workspace_root()) as tmp:
        workspace = Path(tmp)
        workspace.chmod(0o777)
        spec = launch_spec(new_execution_id(), probe_request(profile.name), profile, workspace)
        try:
            outcome = await run_in_sandbox(
                backend,
                spec,
                _noop_record,
                redactor=Redactor(builtin=False),
                workspace=workspace,
                before=snapshot(workspace),
            )
        except OrchestratorError as err:
            return failed(name, "DOCTOR.LIMITS", f"the probe did not run: {err.code}: {err.message}", fix)
    seen = parse_probe(outcome.stdout.decode("utf-8", "replace"))
    ok, detail = probe_verdict(profile, seen, node_pids=node_pids)
    return Check(name, True, detail) if ok else failed(name, "DOCTOR.LIMITS", detail, fix)


async def _engine(backend: SandboxBackend) -> tuple[BackendInfo | None, Check]:
    try:
        info = await backend.info()
    except OrchestratorError as err:
        return None, failed("engine", "DOCTOR.ENGINE", f"{err.code}: {err.message}", backend.capabilities.fixes.engine)
    extra = ", ".join(f"{k} {v}" for k, v in sorted(info.details.items()))
    return info, Check("engine", True, f"{info.name} {info.engine_version} at {info.endpoint}; {extra}")


#: a profile file (or one it extends) does not load: its message names the file and the field
PROFILE_FILE_FIX = "change the file and field the message names (sandboxctl profiles validate checks the profiles)"


def _resolve(profiles: Profiles, name: str) -> ResolvedProfile | Check:
    try:
        profile = profiles.resolve(probe_request(name), session=False)  # the runner's own call
    except OrchestratorError as err:
        return failed(f"profile {name}", "DOCTOR.PROFILE", f"{err.code}: {err.message}", _profile_fix(profiles, name))
    return profile


def _profile_fix(profiles: Profiles, name: str) -> str:
    """The config's caps forbid what a valid profile needs (its runtime, its image): that is the config's choice,
    not a field to correct in a file; else the message names the file and field to change."""
    caps = profiles.caps
    try:
        profile = profiles.registry.get(name)
    except OrchestratorError:
        return PROFILE_FILE_FIX
    if caps is not None and caps.allowed_runtimes is not None and profile.runtime not in caps.allowed_runtimes:
        return f"allow {profile.runtime} in caps.allowed_runtimes, or do not use this profile under this config"
    if caps is not None and caps.allowed_images is not None and not _image_allowed(profile.image, caps.allowed_images):
        return f"allow {profile.image} in caps.allowed_images, or do not use this profile under this config"
    return PROFILE_FILE_FIX


def _image_allowed(image: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatchcase(image, pattern) for pattern in patterns)


def _profile_line(profile: ResolvedProfile) -> Check:
    limits = f"memory {format_size(profile.memory_bytes)}, pids {profile.pids_limit}"
    return Check(
        f"profile {profile.name}",
        True,
        f"{profile.runtime}, {profile.image}, {limits}, seccomp {profile.seccomp} "
        f"({profile.seccomp_sha256[:12]}), profile_hash {profile.profile_hash[:12]}",
    )


def _evidence(evidence_path: Path) -> Check:
    try:
        report = verify(evidence_path)
    except OrchestratorError:
        return Check("evidence", True, f"{evidence_path}: not created yet")
    if report.ok:
        return Check("evidence", True, f"{evidence_path}: {report.records} records")
    return failed(
        "evidence",
        "DOCTOR.EVIDENCE",
        f"{evidence_path}: {report.records} records, first bad line {report.first_bad_line}: {report.problem}",
        "keep the file for investigation; start a new evidence path",
    )


async def run_doctor(
    backend: SandboxBackend,
    profiles: Profiles,
    evidence_path: Path,
    *,
    probes: bool = True,
    pool: PoolSettings | None = None,
    service: ServicePool | None = None,
) -> list[Check]:
    """``profiles``: the run's own resolution (the config's caps): what is probed is what runs get. ``pool``: the
    config's (its checks follow the evidence's), ``service``: what a running service's pool holds now."""
    resolutions = [_resolve(profiles, name) for name in profiles.registry.names()]
    resolved = [p for p in resolutions if not isinstance(p, Check)]
    # a cluster's dry runs send the pod of the profile most executions get, as runs under this config get it
    default = next((p for p in resolved if p.name == profiles.default), resolved[0] if resolved else None)
    preflight = await backend.preflight(default)
    info, engine = await _engine(backend)
    checks = [engine, *preflight]
    # the first failure everything below depends on: the engine's, else the backend's own
    blocker = next((c for c in checks if not c.ok), None)
    because = f"{blocker.name} failed (above)" if blocker is not None else ""
    for profile in resolutions:
        if isinstance(profile, Check):
            checks.append(profile)
            continue
        checks.append(_profile_line(profile))
        checks.extend(_engine_has(profile, info, because, backend.capabilities))
    checks.append(_evidence(evidence_path))
    if pool is not None:
        kind, names = type(backend).__name__, profiles.registry.names()
        capabilities = backend.capabilities
        checks.extend(
            pool_checks(
                pool, capabilities=capabilities, backend_name=kind, resolved=resolved, known=names, service=service
            )
        )
    if probes:
        first = [p for p in resolved if p.name == profiles.default]  # the probe most executions get
        ordered = first + [p for p in resolved if p.name != profiles.default]
        checks.extend(await _probes(backend, ordered, info, because))
    return checks


def _engine_has(
    profile: ResolvedProfile, info: BackendInfo | None, because: str, capabilities: Capabilities
) -> list[Check]:
    """The profile's runtime, and its image where the engine lists them (a cluster's nodes: the probe pods
    show them), or why that was not checked."""
    runtime = f"runtime {profile.runtime} for {profile.name}"
    image = f"image {profile.image}"
    names = [runtime, image] if capabilities.lists_images else [runtime]
    if because:
        return [not_checked(name, because) for name in names]
    assert info is not None  # nothing failed: the engine answered
    fixes = capabilities.fixes
    checks = [
        Check(runtime, True, "registered")
        if profile.runtime in info.runtimes
        else failed(runtime, "DOCTOR.RUNTIME", f"engine runtimes: {', '.join(sorted(info.runtimes))}", fixes.runtime)
    ]
    if capabilities.lists_images:
        checks.append(
            Check(image, True, "present")
            if profile.image in info.images
            else failed(image, "DOCTOR.IMAGE", "missing (no registry: never pulled)", fixes.image)
        )
    return checks


async def _probes(
    backend: SandboxBackend, resolved: list[ResolvedProfile], info: BackendInfo | None, because: str
) -> list[Check]:
    """One probe per runtime (the first profile of each, in ``resolved``'s order)."""
    checks: list[Check] = []
    seen_runtimes: set[str] = set()
    for profile in resolved:
        if profile.runtime in seen_runtimes:
            continue
        if because:
            seen_runtimes.add(profile.runtime)
            checks.append(not_checked(limits_name(profile), because))
            continue
        assert info is not None  # no blocker: the engine answered
        if profile.runtime not in info.runtimes or (
            backend.capabilities.lists_images and profile.image not in info.images
        ):
            continue  # reported above
        seen_runtimes.add(profile.runtime)
        checks.append(await probe(backend, profile, node_pids=not backend.capabilities.own_pids_limit))
    return checks
