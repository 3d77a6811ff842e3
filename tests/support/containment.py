"""The containment suite's harness (tests/integration/test_containment.py): one orchestrator per test, built
from a config file as the CLI builds it, on either backend, and the checks every execution gets.

``docker``: DockerBackend on the project's engine; a sandbox is a container, its id the container id.
``kubernetes``: KubernetesBackend on the test cluster (``sandbox_space``: a restricted namespace with a
default-deny NetworkPolicy, the workspaces a sub-path of a claim this process sees); a sandbox is a pod,
its id the pod's uid.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from orchestrator.backends._support.labels import sandbox_name
from orchestrator.backends.docker import DockerBackend
from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.backends.kubernetes.kube import KubeClient, KubeError
from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.requests import ExecCommandRequest
from orchestrator.evidence import EvidenceRecord, iter_records, verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.observer import Observer
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from orchestrator.profiles import ProfileRegistry, ResolvedProfile
from orchestrator.service.sessions import Sessions
from scripts.testcluster.settings import NODE_POD_PIDS_LIMIT as NODE_POD_PIDS_LIMIT
from scripts.testcluster.settings import Settings
from tests.support.images import SANDBOX_UID

if TYPE_CHECKING:
    from tests.support.kube import SandboxSpace

PROFILES = ["workspace-write", "untrusted"]
RUNTIME = {"workspace-write": "runc", "untrusted": "runsc"}
# the Docker params need the engine (marker `integration`), the Kubernetes ones the test cluster (`k8s`)
BACKENDS = [
    pytest.param("docker", marks=pytest.mark.integration),
    # every sandbox pre-started (the config's pool): the same battery, unchanged, on pooled sandboxes
    pytest.param("docker-pooled", marks=pytest.mark.integration),
    pytest.param("kubernetes", marks=pytest.mark.k8s),
    pytest.param("kubernetes-pooled", marks=pytest.mark.k8s),
    # every probe in a session (exec_command, its input ended at once, polled to its end), cold and launched into
    # a pre-started sandbox: `long` (CI runs them after make test: make test-long)
    pytest.param("docker-session", marks=[pytest.mark.integration, pytest.mark.long]),
    pytest.param("docker-pooled-session", marks=[pytest.mark.integration, pytest.mark.long]),
    pytest.param("kubernetes-session", marks=[pytest.mark.k8s, pytest.mark.long]),
    pytest.param("kubernetes-pooled-session", marks=[pytest.mark.k8s, pytest.mark.long]),
]
# the paths whose runs start cold and one-shot: where the engines' own timing is measured (on a quiet machine)
COLD_ONE_SHOT = ("docker", "kubernetes")
# mode allow lets through only what the gate fully sees; the probes run code it cannot read (python3 from
# a here-document), so they are asked, and a rule approves every ask: the approval is recorded like any other
POLICY = "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"
POOLED = "pool: {enabled: true, per_key: 1, ttl_s: 600}\n"
LIFECYCLE = {
    # (docker-pooled: a pooled sandbox's create and start are on its own records, under its pool id; the
    # harness shows them with the execution that claimed it)
    "docker": ("container_created", "container_started", "container_died", "container_destroyed"),
    # a pod is placed on a node before it starts: PodScheduled, with the node
    "kubernetes": (
        "container_created",
        "container_scheduled",
        "container_started",
        "container_died",
        "container_destroyed",
    ),
}
ZERO_CAPS = "0000000000000000"
CONTAINER_ID = re.compile(r"[0-9a-f]{64}")  # in a host process's cgroup paths (Docker's and containerd's)
POD_CGROUP = re.compile(r"/pod([0-9a-f-]{36})[/\n]|/pod([0-9a-f-]{36})$", re.M)  # cgroupfs: .../kubepods/pod<uid>/
CRI_SANDBOX_UID = "io.kubernetes.cri.sandbox-uid"  # on every container's OCI spec made by containerd's CRI
# a pod's processes outlive its API object by a moment: the kubelet stops the pod sandbox (pause or the
# gVisor sandbox, their shims) once it sees the deletion (measured: 1.5-3 s); Docker's shim is quicker
GONE_WITHIN_S = {"docker": 5.0, "kubernetes": 20.0}
EXECUTION_MARGIN_S = 120.0
# the test cluster (scripts/testcluster/settings.py): the kubelet's podPidsLimit (a pod has no pids field of its
# own), and the pods' subnet on the CNI bridge (no gateway: pods have no default route; SANDBOX_K8S_POD_SUBNET)
POD_SUBNET = Settings.from_env().pod_subnet


def resolved(name: str) -> ResolvedProfile:
    return ProfileRegistry().resolve(name)


def gvisor(profile: str) -> bool:
    return RUNTIME[profile] == "runsc"


# -- probes ---------------------------------------------------------------------------------------------

PRELUDE = r"""
import ctypes, errno, json, os, socket, stat, sys
V = {}
EAI = {getattr(socket, n): n for n in dir(socket) if n.startswith("EAI_")}
def errname(number):
    return errno.errorcode.get(number, str(number))
def attempt(name, fn):
    try:
        result = fn()
        V[name] = "ok" if result is None else result
    except socket.gaierror as e:
        V[name] = EAI.get(e.errno, str(e.errno))
    except OSError as e:
        V[name] = errname(e.errno) if e.errno else repr(e)
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def syscall(nr, *args):
    ctypes.set_errno(0)
    r = _libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return "ok" if r != -1 else errname(ctypes.get_errno())
def done():
    print("VERDICT " + json.dumps(V, sort_keys=True), flush=True)
"""


def py(body: str, *args: object) -> str:
    """A shell command running ``PRELUDE + body`` with python3 (the script on stdin, ``args`` in argv)."""
    script = PRELUDE + body
    assert "\nPROBE\n" not in script
    argv = " ".join(str(a) for a in args)
    return f"python3 - {argv} <<'PROBE'\n{script}\nPROBE\n"


# -- host processes -------------------------------------------------------------------------------------


def host_processes() -> dict[int, tuple[int, str, str]]:
    """pid → (uid, cmdline, cgroup) of every host process (kernel threads included, with empty cmdline)."""
    found: dict[int, tuple[int, str, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry.name}/cgroup") as f:
                cgroup = f.read()
            uid = os.stat(f"/proc/{entry.name}").st_uid
        except OSError:  # exited meanwhile
            continue
        found[int(entry.name)] = (uid, cmdline, cgroup)
    return found


def processes_mentioning(token: str) -> dict[int, str]:
    """Host processes whose command line or cgroup names ``token`` (a container id, a marker)."""
    me = os.getpid()
    return {
        pid: cmdline
        for pid, (_, cmdline, cgroup) in host_processes().items()
        if pid != me and (token in cmdline or token in cgroup)
    }


def _shim_pod(pid: int) -> str | None:
    """The pod uid a containerd shim serves: the CRI annotation of the OCI spec in its bundle (its working
    directory); None when the bundle is gone (the shim is on its way out) or unreadable."""
    try:
        with open(os.path.join(os.readlink(f"/proc/{pid}/cwd"), "config.json")) as f:
            annotations = json.load(f).get("annotations") or {}
    except (OSError, ValueError):
        return None
    value = annotations.get(CRI_SANDBOX_UID)
    return value if isinstance(value, str) else None


def pod_processes(uid: str) -> dict[int, str]:
    """Host processes of pod ``uid``: in its cgroup (cgroupfs driver: .../kubepods/pod<uid>/...; runc: the
    pause process and the container's, gVisor: its sandbox and gofer), naming it on their command line
    (runsc's own commands: their log paths), or the containerd shims serving it (runc: one per pod, gVisor:
    one per container), whose command lines name neither."""
    me = os.getpid()
    found: dict[int, str] = {}
    for pid, (_, cmdline, cgroup) in host_processes().items():
        if pid == me:
            continue
        if f"pod{uid}" in cgroup or uid in cmdline or ("containerd-shim" in cmdline and _shim_pod(pid) == uid):
            found[pid] = cmdline
    return found


def in_other_sandbox(cgroup: str, sandbox_id: str) -> bool:
    """Whether a host process's cgroup is another container's or pod's (other runs may share the engine and
    the cluster): a container id or a pod uid in it, and not ``sandbox_id``."""
    if sandbox_id in cgroup:
        return False
    return bool(CONTAINER_ID.search(cgroup) or POD_CGROUP.search(cgroup))


# -- one execution ----------------------------------------------------------------------------------------


@dataclass
class Run:
    kind: str  # the backend: docker | kubernetes
    result: ExecutionResult
    out: dict[str, Any]  # ExecutionResult.to_json()
    records: list[EvidenceRecord]
    sandbox_id: str | None
    pool_id: str | None = None  # a pre-started sandbox's: its labels' execution id, its pod's name
    session_records: list[EvidenceRecord] = field(default_factory=list)  # a session's own (opened, input, closed)

    @property
    def execution_id(self) -> str:
        return str(self.result.authorization.execution_id)

    @property
    def sandbox_execution_id(self) -> str:
        """The execution id the sandbox itself carries (its labels, its pod's name)."""
        return self.pool_id or self.execution_id

    @property
    def verdict(self) -> dict[str, Any]:
        lines = [line for line in self.out["stdout"].splitlines() if line.startswith("VERDICT ")]
        assert len(lines) == 1, f"no verdict: exit {self.out['exit_code']}, {self.out['stderr'][-2000:]!r}"
        return json.loads(lines[0].removeprefix("VERDICT "))  # type: ignore[no-any-return]

    def finished(self) -> EvidenceRecord:
        (record,) = [r for r in self.records if r.event == "execution_finished"]
        return record

    def finished_data(self) -> dict[str, Any]:
        data = self.finished().data
        assert data is not None
        return dict(data)

    def events(self) -> list[str]:
        return [r.event for r in self.records]


@dataclass
class Harness:
    """One orchestrator built from a config file, as the CLI builds it, with its own evidence file, on the
    backend ``kind``. Docker: ``sandboxes`` is the session's registry (conftest.py); Kubernetes: ``space``
    the module's namespace, and every pod this harness ran is checked gone at ``close``."""

    kind: str
    tmp_path: Path
    sandboxes: Any = None
    space: SandboxSpace | None = None
    profiles: ProfileRegistry | None = None
    execution_ids: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.workspace = self.new_workspace("ws")
        self.config = self.tmp_path / "config.yaml"
        self.config.write_text(POLICY + (POOLED if self.pooled else ""))
        self.evidence_path = self.tmp_path / "evidence.jsonl"
        self.backend: DockerBackend | KubernetesBackend
        self.kube: KubeClient | None = None
        if self.space is not None:
            self.backend = KubernetesBackend(self.space.settings())
            self.kube = KubeClient.connect(str(self.space.cluster.kubeconfig), None)
        else:
            self.backend = DockerBackend()
        self.orch: Orchestrator = build_orchestrator(
            self.config,
            workspace=self.workspace,
            evidence_path=self.evidence_path,
            backend=self.backend,
            profiles=self.profiles if self.profiles is not None else ProfileRegistry(),
        )
        self.session_results = SessionResults()
        self.sessions = Sessions(self.orch, hooks=self.session_results)

    @property
    def k8s(self) -> bool:
        return self.engine == "kubernetes"

    @property
    def pooled(self) -> bool:
        return "-pooled" in self.kind

    @property
    def session(self) -> bool:
        """Every probe runs as a session's command (exec_command), not a one-shot run."""
        return self.kind.endswith("-session")

    def init_is_pid1(self, profile: str) -> bool:
        """Whether our init stays the sandbox's PID 1 to report the command's end: every pod's; a pre-started
        container's whose init this host sees (runc, not gVisor)."""
        return self.k8s or (self.pooled and not profile.startswith("untrusted"))

    @property
    def engine(self) -> str:
        """docker | kubernetes: what the backend-specific expectations are keyed by."""
        return self.kind.split("-")[0]

    async def _prestarted(self, raw: dict[str, Any], workspace: Path) -> None:
        """Pooled: a sandbox of exactly this run's key ready before it comes (its first run of a key would
        otherwise start cold)."""
        assert self.orch.pool is not None
        await self.orch.pool.drain()  # only this run's sandbox may be waiting: the battery counts sandboxes
        if not self.orch.prestart(raw, workspace=workspace):
            return  # a run that is refused (the run's own error says why)
        # as patient as a cold run's start: the node may be full for a while (the cluster's other tests' pods);
        # a fill that failed meanwhile (its pod never scheduled) drops its key: asked again, as a run would
        deadline = time.monotonic() + EXECUTION_MARGIN_S
        while time.monotonic() < deadline:
            pool = self.orch.pool.describe()
            if pool["ready"]:
                return
            if not pool["keys"] and not pool["filling"]:
                await asyncio.sleep(1.0)
                self.orch.prestart(raw, workspace=workspace)
            await asyncio.sleep(0.05)
        raise AssertionError(f"no pooled sandbox became ready: {self.orch.pool.describe()}")

    def lifecycle(self) -> tuple[str, ...]:
        return LIFECYCLE[self.engine]

    def new_workspace(self, name: str) -> Path:
        if self.space is not None:  # below the claim's root, which every test of the module shares
            return self.space.workspace(f"{name}-{os.urandom(6).hex()}")
        ws = self.tmp_path / name
        ws.mkdir()
        os.chown(ws, SANDBOX_UID, SANDBOX_UID)  # the sandbox user owns its workspace
        return ws

    def _started(self, execution_id: str) -> None:
        self.execution_ids.add(execution_id)
        if self.sandboxes is not None:
            self.sandboxes.add(execution_id)

    async def run(self, command: str, profile: str, *, workspace: Path | None = None, **request: Any) -> Run:
        raw = {"tool": "shell_command", "command": command, "profile": profile, **request}
        if self.session:
            raw = {"tool": "exec_command", "cmd": command, "profile": profile, **request}
        registry = self.profiles if self.profiles is not None else ProfileRegistry()
        wall_s = request.get("timeout_ms", 0) / 1000 or registry.resolve(profile).wall_timeout_s
        try:
            if self.pooled:
                await self._prestarted(raw, workspace or self.workspace)
            # an execution that never ends is a failure here, not a hung suite (the sandbox's own timeout, then
            # a generous margin for the kill and the teardown)
            async with asyncio.timeout(wall_s + EXECUTION_MARGIN_S):
                if self.session:
                    result = await self._in_session(raw, workspace or self.workspace)
                else:
                    result = await self.orch.execute(raw, workspace=workspace or self.workspace)
        except OrchestratorError as err:
            if "execution_id" in err.details:
                self._started(str(err.details["execution_id"]))
            raise
        except TimeoutError:
            raise AssertionError(f"the execution did not end within {wall_s + EXECUTION_MARGIN_S:g}s") from None
        execution_id = str(result.authorization.execution_id)
        self._started(execution_id)
        # a run answered from its init's report (Kubernetes) has the engine's end and its removal recorded
        # after its end record: the battery checks the whole lifecycle, and that nothing is left
        await self.orch.settle()
        records = list(iter_records(self.evidence_path, execution_id=execution_id))
        session_records = [r for r in records if r.event.startswith("session_")]
        if self.session:  # the battery's checks are the execution's: the session's own are checked here
            records = [r for r in records if not r.event.startswith("session_")]
            assert_session_records(session_records, result)
        if self.pooled:
            records = self._with_pooled_start(records)
            assert self.orch.pool is not None
            await self.orch.pool.drain()  # the refill after the run: not waiting beside the next test's
        created = [r for r in records if r.event == "container_created"]
        sandbox_id = str(created[0].data["sandbox_id"]) if created and created[0].data else None
        pooled = next((r.data or {} for r in records if r.event == "execution_started"), {}).get("pooled")
        if pooled:  # its pod or container carries the pool id: checked gone at close like the others
            self.execution_ids.add(str(pooled["pool_id"]))
        run = Run(
            self.engine,
            result,
            result.to_json(),
            records,
            sandbox_id,
            pooled["pool_id"] if pooled else None,
            session_records,
        )
        await self.assert_gone(run)
        return run

    async def _in_session(self, raw: dict[str, Any], workspace: Path) -> ExecutionResult:
        """``raw`` as a session: opened, its input ended at once (the probes bring their own), polled until its
        command ended, closed; its execution's result, as the sessions' hooks saw it end."""
        owner = {"tenant": "default", "subject": "anonymous"}
        opened = await self.sessions.open({**raw, "yield_time_ms": 0}, workspace=workspace)
        sid = opened.session_id
        reply = opened
        if opened.running:
            try:
                await self.sessions.end_input(sid, **owner)
            except OrchestratorError:  # the probe ended (its sandbox going) before its input could be ended
                reply = await self.sessions.poll(sid, **owner, yield_ms=10_000)
                assert not reply.running, "the session's input could not be ended while it ran"
        while reply.running:  # output taken as it comes (a session holds at most 4 MiB for its caller)
            reply = await self.sessions.poll(sid, **owner, yield_ms=2000)
        if self.sessions.owner(sid) is not None:  # output left untaken: closing takes it (else it is forgotten)
            await self.sessions.close(sid, **owner)
        result, error = self.session_results.ended.pop(sid)
        if result is None:
            assert error is not None, f"session {sid} ended with neither a result nor an error"
            raise error
        return result

    def _with_pooled_start(self, records: list[EvidenceRecord]) -> list[EvidenceRecord]:
        """The execution's records with its pooled sandbox's create and start (from the sandbox's own
        records) right after its begin record: the lifecycle a cold run's records hold."""
        begin = next(i for i, r in enumerate(records) if r.event == "execution_started")
        pooled = (records[begin].data or {}).get("pooled")
        assert pooled, "the run did not take its pre-started sandbox"
        own = list(iter_records(self.evidence_path, execution_id=str(pooled["pool_id"])))
        start = [r for r in own if r.event in ("container_created", "container_scheduled", "container_started")]
        claims = [r.data for r in own if r.event == "sandbox_claimed"]
        assert claims == [{"execution_id": records[begin].execution_id}], claims  # served once, to this run
        return [*records[: begin + 1], *start, *records[begin + 1 :]]

    async def assert_gone(self, run: Run) -> None:
        """Nothing of the execution left: not in the backend's listing, no host process of it.
        Docker: no container; its processes, its shim (runc), the sandbox, the gofer, the shim (runsc).
        Kubernetes: no pod object (the API server answers NotFound for its name); its processes by the pod
        cgroup (the container's, pause's; gVisor's sandbox and gofer), runsc's commands naming the pod,
        the containerd shims serving it."""
        managed = await self.backend.list_managed()
        assert run.sandbox_execution_id not in {m.execution_id for m in managed}
        assert run.sandbox_id, "no container_created record"
        if self.kube is not None:
            assert self.space is not None
            with pytest.raises(KubeError) as missing:
                name = sandbox_name(run.sandbox_execution_id)
                await asyncio.to_thread(self.kube.get_pod, self.space.namespace, name)
            assert missing.value.kind == "not_found", missing.value

        sandbox_id = run.sandbox_id
        deadline = time.monotonic() + GONE_WITHIN_S[self.engine]
        while (left := self.host_processes_of(sandbox_id)) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert not left, f"host processes of {run.sandbox_id[:12]} after teardown: {left}"

    def host_processes_of(self, sandbox_id: str) -> dict[int, str]:
        """pid → command line of the host processes of a sandbox (a container id, a pod uid)."""
        return pod_processes(sandbox_id) if self.k8s else processes_mentioning(sandbox_id)

    async def close(self) -> None:
        try:
            await self.sessions.aclose()
            await self.orch.aclose()
            if self.execution_ids:  # (a test skipped before its first execution has no evidence to verify)
                report = verify(self.evidence_path)
                assert report.ok, f"evidence chain: {report.location()}: {report.problem}"
                assert report.head_checked
            if self.space is not None:  # the session-end check of conftest.py covers the engine's containers
                backend = KubernetesBackend(self.space.settings())
                try:
                    left = [m for m in await backend.list_managed() if m.execution_id in self.execution_ids]
                finally:
                    await backend.close()
                assert not left, f"pods of this test left: {[(m.name, m.state) for m in left]}"
        finally:
            if self.kube is not None:
                self.kube.close()


def open_harness(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest, profiles: ProfileRegistry | None = None
) -> Harness:
    """A harness on backend ``kind``, with the fixtures that backend needs (skips as they skip)."""
    if kind.startswith("docker"):
        return Harness(kind, tmp_path, sandboxes=request.getfixturevalue("run_sandboxes"), profiles=profiles)
    return Harness(kind, tmp_path, space=request.getfixturevalue("sandbox_space"), profiles=profiles)


class SessionResults:
    """The sessions' hooks: each session's execution result (or the error that ended it), by session id."""

    def __init__(self) -> None:
        self.ended: dict[str, tuple[ExecutionResult | None, OrchestratorError | None]] = {}

    def session_opening(self, execution_id: str, request: ExecCommandRequest) -> Observer | None:
        return None

    def session_ended(
        self, execution_id: str, result: ExecutionResult | None, error: OrchestratorError | None, started: bool
    ) -> None:
        self.ended[execution_id] = (result, error)


def assert_session_records(records: list[EvidenceRecord], result: ExecutionResult) -> None:
    """A session's own records beside its execution's: opened once, its input's end, closed once with how
    its command ended (its exit, or the stop the execution's error names)."""
    events = [r.event for r in records]
    assert events[0] == "session_opened" and events.count("session_opened") == events.count("session_closed") == 1
    # its input: only its end (none when the command had ended before it); its output as each answer took it
    # (the close's answer, with what was left, after the end record)
    inputs = [r.data for r in records if r.event == "session_input"]
    assert inputs in ([], [{"bytes": 0, "end": True}]), inputs
    assert set(events) == {"session_opened", "session_closed"} | set(events) & {"session_input", "session_output"}
    (closed,) = [r.data or {} for r in records if r.event == "session_closed"]
    assert closed.get("exit_code") == result.outcome.exit_code, (closed, result.outcome)


# -- what every execution must have left in the evidence ------------------------------------------------------


def assert_evidence(
    run: Run,
    *,
    status: str,
    exit_code: int,
    error_code: str | None = None,
    extra: Iterable[str] = (),
) -> EvidenceRecord:
    """The execution's records: begin, lifecycle with engine timestamps in order, one end record.

    Each lifecycle event of the backend (LIFECYCLE) comes exactly once; an `extra` event comes at least once,
    as often as the engine reported it (the engine emits one `oom` per kill in the container's cgroup:
    gVisor's sandbox can have several processes killed), and always between start and destroy."""
    events = run.events()
    decided = next(r for r in run.records if r.event == "decision_made")
    if decided.decision == "ask":
        # what the gate could not see was asked, and the rule approver's answer recorded before the start
        assert events[:5] == [
            "request_received",
            "decision_made",
            "approval_requested",
            "approval_decided",
            "execution_started",
        ], events
        approved = next(r for r in run.records if r.event == "approval_decided")
        assert (approved.decision, approved.approver) == ("approved", "rule:default")
        assert "the gate cannot see what would run" in str(decided.reason)
    else:
        assert decided.decision == "allow"
        assert events[:3] == ["request_received", "decision_made", "execution_started"], events
    finished = run.finished()
    assert finished.data is not None
    if str(finished.data["lifecycle_stream"]).startswith("reported by the sandbox's init"):
        # the init reported the end (a pod's; a pre-started container's under runc, whose init this host
        # sees): the end record first, then the engine's account and the removal
        runsc = str(run.result.authorization.request.profile).startswith("untrusted")
        assert run.kind == "kubernetes" or (run.pool_id is not None and not runsc), (run.kind, run.pool_id)
        after = events[events.index("execution_finished") + 1 :]
        assert after and all(e.startswith("container_") for e in after), events
        assert after[-1] == "container_destroyed", events
    else:
        assert events[-1] == "execution_finished", events
    assert finished.status == status
    assert finished.error_code == error_code
    assert finished.data is not None
    assert finished.data["exit_code"] == exit_code
    assert finished.data["timed_out"] is (status == "timeout")
    assert finished.data["oom_killed"] is (status == "oom")
    assert finished.outputs_digest is not None
    profile = str(run.result.authorization.request.profile)
    assert finished.data["runtime"] == ("runsc" if profile.startswith("untrusted") else "runc")
    expected = LIFECYCLE[run.kind]
    lifecycle: dict[str, EvidenceRecord] = {}
    repeated: list[EvidenceRecord] = []
    for name in (*expected, *extra):
        found = [r for r in run.records if r.event == name]
        if name in expected:
            assert len(found) == 1, f"{name}: {len(found)} records ({events})"
            lifecycle[name] = found[0]
        else:
            assert found, f"{name}: no record ({events})"
            repeated.extend(found)
        for record in found:
            assert record.engine_ts, f"{name} without engine_ts"
            assert record.data is not None and record.data["sandbox_id"] == run.sandbox_id
            assert record.profile_hash == finished.profile_hash
    ordered = [lifecycle[name] for name in expected]
    assert [r.seq for r in ordered] == sorted(r.seq for r in ordered)
    stamps = [engine_time(r) for r in ordered]
    assert stamps == sorted(stamps)
    started, destroyed = lifecycle["container_started"], lifecycle["container_destroyed"]
    for record in repeated:
        assert started.seq < record.seq < destroyed.seq, record.event
        assert engine_time(started) <= engine_time(record) <= engine_time(destroyed), record.event
    died = lifecycle["container_died"]
    assert died.data is not None and died.data["exit_code"] == exit_code
    return finished


def engine_time(record: EvidenceRecord) -> float:
    assert record.engine_ts is not None
    return datetime.fromisoformat(record.engine_ts.replace("Z", "+00:00")).timestamp()


def assert_ok(run: Run) -> dict[str, Any]:
    """A probe that ran to its end: exit 0, evidence of a success; returns its verdict."""
    assert (run.out["exit_code"], run.out["error"]) == (0, None), (
        run.out["exit_code"],
        run.out["error"],
        run.out["stderr"][-2000:],
    )
    assert_evidence(run, status="succeeded", exit_code=0)
    return run.verdict
