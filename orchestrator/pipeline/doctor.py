"""sandboxctl doctor: is everything a profile needs really there, and are its limits in force?

Each check says what it found and, when it fails, the command that fixes it. The probe runs a tiny
container per runtime and reads, from inside, what the kernel enforces: seccomp mode, no-new-privs,
capabilities and the cgroup limits. What only one kind of backend can check is its ``preflight()``; what
the doctor may ask of the engine's answers (its images, a sandbox's own pids limit) its ``capabilities`` say.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.backends.base import BackendInfo, PreflightCheck, SandboxBackend
from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.ids import new_execution_id
from orchestrator.domain.requests import parse_request
from orchestrator.evidence import EventType, verify
from orchestrator.pipeline.executor import run_in_sandbox
from orchestrator.pipeline.launch import launch_spec
from orchestrator.profiles import ProfileRegistry, ResolvedProfile
from orchestrator.results import Redactor, snapshot

SETUP_FIX = "run `make setup` (it starts a project-managed engine when none answers)"
RUNSC_FIX = "run `make setup` (registers runsc with --oci-seccomp) or use a runc profile"
IMAGE_FIX = "run `make setup` (builds images/*/Dockerfile without a registry)"
LIMITS_FIX = "check the engine's cgroup and seccomp support (see docs/setup-notes.md)"
PROBE = (
    "grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' /proc/self/status; "
    "for f in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes "
    '/sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max; do [ -r $f ] && echo "$f=$(cat $f)"; done; '
    "ulimit -n; ulimit -f; id -u; touch /probe-root 2>/dev/null && echo root-writable || echo root-read-only"
)


# one check: what the doctor reports is what a backend's preflight reports
Check = PreflightCheck


async def _noop_record(event: EventType, **fields: Any) -> None:
    return None


def _parse_probe(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^(Seccomp|NoNewPrivs|CapEff|CapBnd):\s*(\S+)", line)
        if m:
            found[m.group(1)] = m.group(2)
        elif "=" in line and line.startswith("/sys/fs/cgroup/"):
            path, _, value = line.partition("=")
            found["memory" if "memory" in path else "pids"] = value
    tail = [line for line in text.splitlines() if line and ":" not in line and "=" not in line]
    if len(tail) >= 4:
        found["nofile"], found["fsize"], found["uid"], found["root"] = tail[-4:]
    return found


def _probe_verdict(profile: ResolvedProfile, seen: dict[str, str], *, node_pids: bool = False) -> tuple[bool, str]:
    """``node_pids``: the pids limit is the node's (a pod has no field of its own), shown, not compared."""
    problems = []
    gvisor = profile.runtime == "runsc"
    if seen.get("Seccomp") != "2":  # gVisor reports it too when registered with --oci-seccomp
        problems.append(f"seccomp mode {seen.get('Seccomp')!r} (want 2: filter)")
    if seen.get("CapEff", "0").strip("0"):
        problems.append(f"effective capabilities {seen.get('CapEff')} (want none)")
    if not gvisor and seen.get("NoNewPrivs") != "1":
        problems.append("no_new_privs is not set")
    memory, pids = seen.get("memory"), seen.get("pids")
    if gvisor:
        # gVisor shows its own cgroup tree inside; the limits sit on the host cgroup around the sandbox
        memory = pids = "host-enforced"
    if memory is not None and memory.isdigit() and int(memory) != profile.memory_bytes:
        problems.append(f"memory limit {memory} (want {profile.memory_bytes})")
    if pids is not None and node_pids:
        pids = f"{pids} (the node's pod limit)"
    elif pids is not None and pids.isdigit() and int(pids) != profile.pids_limit:
        problems.append(f"pids limit {pids} (want {profile.pids_limit})")
    if seen.get("uid") == "0":
        problems.append("runs as root")
    if seen.get("root") != "root-read-only" and profile.read_only_root:
        problems.append("root filesystem is writable")
    detail = (
        f"seccomp={seen.get('Seccomp', '?')} no_new_privs={seen.get('NoNewPrivs', 'n/a')} "
        f"caps={seen.get('CapEff', '?')} memory={memory or '?'} pids={pids or '?'} "
        f"nofile={seen.get('nofile', '?')} fsize={seen.get('fsize', '?')} uid={seen.get('uid', '?')} "
        f"{seen.get('root', '?')}"
    )
    return (not problems, detail if not problems else "; ".join(problems) + f" — saw {detail}")


async def probe(backend: SandboxBackend, profile: ResolvedProfile, *, node_pids: bool = False) -> Check:
    name = f"limits in force ({profile.name}, {profile.runtime})"
    # where the backend reaches workspaces (a cluster: below its claim's root)
    with tempfile.TemporaryDirectory(prefix="sandbox-doctor-", dir=backend.workspace_root()) as tmp:
        workspace = Path(tmp)
        workspace.chmod(0o777)
        request = parse_request({"tool": "shell_command", "command": PROBE})
        spec = launch_spec(new_execution_id(), request, profile, workspace)
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
            return Check(name, False, f"{err.code}: {err.message}", SETUP_FIX)
    seen = _parse_probe(outcome.stdout.decode("utf-8", "replace"))
    ok, detail = _probe_verdict(profile, seen, node_pids=node_pids)
    return Check(
        name, ok, detail, None if ok else "check the engine's cgroup and seccomp support (see docs/setup-notes.md)"
    )


async def run_doctor(
    backend: SandboxBackend, profiles: ProfileRegistry, evidence_path: Path, *, probes: bool = True
) -> list[Check]:
    checks: list[Check] = []
    try:
        info: BackendInfo | None = await backend.info()
    except OrchestratorError as err:
        info = None
        checks.append(Check("engine", False, f"{err.code}: {err.message}", SETUP_FIX))
    if info is not None:
        extra = ", ".join(f"{k} {v}" for k, v in sorted(info.details.items()))
        checks.append(Check("engine", True, f"{info.name} {info.engine_version} at {info.endpoint}; {extra}"))
    checks.extend(await backend.preflight())
    capabilities = backend.capabilities
    # where images are not the controller's to list (a cluster's nodes), the probe pods show them
    images_listed = info is not None and capabilities.lists_images
    resolved: list[ResolvedProfile] = []
    for name in profiles.names():
        try:
            profile = profiles.resolve(name)
        except OrchestratorError as err:
            checks.append(Check(f"profile {name}", False, f"{err.code}: {err.message}", "sandboxctl profiles validate"))
            continue
        resolved.append(profile)
        checks.append(
            Check(
                f"profile {name}",
                True,
                f"{profile.runtime}, {profile.image}, seccomp {profile.seccomp} "
                f"({profile.seccomp_sha256[:12]}), profile_hash {profile.profile_hash[:12]}",
            )
        )
        if info is not None:
            runtime_ok = profile.runtime in info.runtimes
            checks.append(
                Check(
                    f"runtime {profile.runtime} for {name}",
                    runtime_ok,
                    "registered" if runtime_ok else f"engine runtimes: {', '.join(sorted(info.runtimes))}",
                    None
                    if runtime_ok
                    else "run `make setup` (registers runsc with --oci-seccomp) or use a runc profile",
                )
            )
            if not images_listed:
                continue
            image_ok = profile.image in info.images
            checks.append(
                Check(
                    f"image {profile.image}",
                    image_ok,
                    "present" if image_ok else "missing (no registry: never pulled)",
                    None if image_ok else "run `make setup` (builds images/*/Dockerfile without a registry)",
                )
            )
    try:
        report = verify(evidence_path)
        checks.append(
            Check(
                "evidence",
                report.ok,
                f"{evidence_path}: {report.records} records"
                + ("" if report.ok else f", first bad line {report.first_bad_line}: {report.problem}"),
                None if report.ok else "keep the file for investigation; start a new evidence path",
            )
        )
    except OrchestratorError:
        checks.append(Check("evidence", True, f"{evidence_path}: not created yet"))
    if probes and info is not None:
        seen_runtimes: set[str] = set()
        # the default profile first: its probe is the one most executions get
        for profile in sorted(resolved, key=lambda p: p.name != "workspace-write"):
            if (
                profile.runtime in seen_runtimes
                or profile.runtime not in info.runtimes
                or (images_listed and profile.image not in info.images)
            ):
                continue
            seen_runtimes.add(profile.runtime)
            checks.append(await probe(backend, profile, node_pids=not capabilities.own_pids_limit))
    return checks
