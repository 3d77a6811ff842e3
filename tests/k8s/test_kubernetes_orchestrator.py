"""The whole pipeline on the real cluster: gate → evidence → KubernetesBackend → a pod → teardown.

Every built-in profile's pod is admitted under PodSecurity ``restricted`` and runs (or, for a runtime the
cluster lacks, is refused as SANDBOX.UNAVAILABLE, never run weaker); a weakened pod is refused by the API
server; OOM, deadline and huge output end as on Docker, from the pod's status; a killed controller's pod
is collected at the next start with an abandoned record; an init killed from the node and an evicted pod
end from the kubelet's account; ``sandboxctl doctor``'s cluster checks pass.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.base import ManagedSandbox
from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.backends.kubernetes.kube import KubeClient, KubeError
from orchestrator.backends.kubernetes.preflight import _weaken, probe_pod
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.usage import EndCause, RunUsage
from orchestrator.evidence import iter_records, verify
from orchestrator.evidence.usage import read_usage
from orchestrator.pipeline.doctor import run_doctor
from orchestrator.pipeline.factory import build_orchestrator, open_orchestrator
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.profiles import ProfileRegistry
from scripts.testcluster.settings import NODE_NAME
from tests.support.kube import SandboxSpace

pytestmark = pytest.mark.k8s

POLICY = "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"
LIFECYCLE = ["container_created", "container_scheduled", "container_started", "container_died", "container_destroyed"]


class Pipeline:
    def __init__(self, space: SandboxSpace, tmp_path: Path, policy: str = POLICY) -> None:
        self.space = space
        self.workspace = space.workspace()
        self.config = tmp_path / "config.yaml"
        self.config.write_text(policy)
        self.evidence = tmp_path / "evidence.jsonl"
        self.backend = KubernetesBackend(space.settings())
        self.orch: Orchestrator = build_orchestrator(
            self.config,
            workspace=self.workspace,
            evidence_path=self.evidence,
            backend=self.backend,
            profiles=ProfileRegistry(),
        )

    async def run(self, command: str, profile: str = "workspace-write", **request: Any) -> dict[str, Any]:
        raw = {"tool": "shell_command", "command": command, "profile": profile, **request}
        result = await self.orch.execute(raw, workspace=self.workspace)
        await self.orch.settle()  # a run answered from its init's report: the kubelet's end and the removal follow
        out = result.to_json()
        out["records"] = list(iter_records(self.evidence, execution_id=str(result.authorization.execution_id)))
        return out


@pytest.fixture
async def pipeline(sandbox_space: SandboxSpace, tmp_path: Path) -> AsyncIterator[Pipeline]:
    p = Pipeline(sandbox_space, tmp_path)
    try:
        yield p
    finally:
        await p.orch.aclose()
        report = verify(p.evidence)
        assert report.ok, report.problem


def lifecycle_of(out: dict[str, Any]) -> list[str]:
    return [r.event for r in out["records"] if r.event.startswith("container_")]


@pytest.mark.parametrize("profile", ProfileRegistry().names())
async def test_every_builtin_profile_runs_as_an_admitted_pod(pipeline: Pipeline, profile: str) -> None:
    try:
        out = await pipeline.run("id -u; cat /proc/self/status | grep -E '^(Seccomp|NoNewPrivs):'", profile)
    except Exception as exc:  # a runtime the cluster lacks: refused, never downgraded
        code = getattr(exc, "code", None)
        assert code == "SANDBOX.UNAVAILABLE" and ProfileRegistry().resolve(profile).runtime != "runc", exc
        pytest.skip(f"{profile}: {exc}")
    assert (out["exit_code"], out["error"]) == (0, None), out["stderr"]
    gvisor = ProfileRegistry().resolve(profile).runtime == "runsc"  # gVisor's /proc has no NoNewPrivs line
    assert out["stdout"].split() == ["1000", *([] if gvisor else ["NoNewPrivs:", "1"]), "Seccomp:", "2"]
    assert lifecycle_of(out) == LIFECYCLE
    died = next(r for r in out["records"] if r.event == "container_died")
    assert died.data is not None and died.data["exit_code"] == 0 and died.data["reason"] == "Completed"
    scheduled = next(r for r in out["records"] if r.event == "container_scheduled")
    assert scheduled.data is not None and scheduled.data["node"] == NODE_NAME


async def test_a_weakened_pod_is_refused_by_the_api_server(sandbox_space: SandboxSpace) -> None:
    """The doctor's probe pod is the backend's own sandbox pod: admitted (dry run) where sandboxes run; weakened
    (allowPrivilegeEscalation), refused by Pod Security restricted."""
    kube = KubeClient.connect(str(sandbox_space.cluster.kubeconfig), None)
    settings = sandbox_space.settings()
    try:
        with pytest.raises(KubeError) as refused:
            await asyncio.to_thread(kube.create_pod, sandbox_space.namespace, probe_pod(settings, change=_weaken))
        assert refused.value.kind == "forbidden" and "PodSecurity" in refused.value.message
        admitted = await asyncio.to_thread(kube.create_pod, sandbox_space.namespace, probe_pod(settings), dry_run=True)
        assert admitted["metadata"]["generateName"] == "so-preflight-"
    finally:
        kube.close()


async def test_oom_from_the_pod_status(sandbox_space: SandboxSpace, tmp_path: Path) -> None:
    pipeline = Pipeline(sandbox_space, tmp_path, POLICY + "caps: {max_memory: 64m}\n")
    try:
        out = await pipeline.run("python3 -c 'b = bytearray(400 * 1024 * 1024); print(len(b))'")
    finally:
        await pipeline.orch.aclose()
    assert out["oom_killed"] is True and out["error"]["code"] == "SANDBOX.OOM"
    assert out["exit_code"] == 137
    assert "container_oom" in lifecycle_of(out)
    assert usage_of(pipeline, out).cause is EndCause.OOM


async def test_deadline_kills_the_pod_and_says_timeout(pipeline: Pipeline) -> None:
    started = time.monotonic()
    out = await pipeline.run("sleep 300", timeout_ms=3000)
    assert out["timed_out"] is True and out["error"]["code"] == "SANDBOX.TIMEOUT"
    assert time.monotonic() - started < 30, "the kill took too long"
    kill = next(r for r in out["records"] if r.event == "container_killed")
    assert kill.data is not None and kill.data["reason"] == "DeadlineExceeded"
    usage = usage_of(pipeline, out)
    assert usage.cause is EndCause.WALL_TIMEOUT and usage.limits.wall_timeout_s == 3


async def test_huge_output_is_capped_and_counted(pipeline: Pipeline) -> None:
    out = await pipeline.run("head -c 20000000 /dev/zero | tr '\\0' x")
    assert out["exit_code"] == 0 and out["truncated"] is True
    assert len(out["stdout"]) == ProfileRegistry().resolve("workspace-write").stdout_max_bytes
    finished = next(r for r in out["records"] if r.event == "execution_finished")
    assert finished.data is not None and finished.data["stdout"]["bytes"] == 20_000_000
    usage = usage_of(pipeline, out)
    assert (usage.cause, usage.stdout_bytes) == (EndCause.OUTPUT_CAP, 20_000_000)


# 200 MiB, every page written, then one core spun until the process has used 1 s of CPU time in all
APPETITE = (
    "import os\nb = bytearray(200 * 2**20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"
    "while sum(os.times()[:2]) < 1.0:\n    pass\n"
)


async def test_a_known_appetite_is_measured_from_the_pods_own_cgroup(pipeline: Pipeline) -> None:
    """Issue 25: the pod's usage, read by its init at the command's end, within 10 % of what the program did."""
    out = await pipeline.run(f"python3 -c '{APPETITE}'")
    assert out["exit_code"] == 0, out["stderr"]
    usage = usage_of(pipeline, out)
    assert usage.cause is EndCause.OK and usage.source == "init"
    assert usage.memory_peak_bytes is not None and usage.cpu_seconds is not None
    assert 200 * 2**20 <= usage.memory_peak_bytes <= 220 * 2**20, usage.memory_peak_bytes / 2**20
    assert 1.0 <= usage.cpu_seconds <= 1.1, usage.cpu_seconds


def usage_of(pipeline: Pipeline, out: dict[str, Any]) -> RunUsage:
    (usage,) = (u for u in read_usage(pipeline.evidence) if u.execution_id == out["execution_id"])
    return usage


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, {tests!r})
    from orchestrator.backends.kubernetes.backend import KubernetesBackend
    from orchestrator.backends.kubernetes.settings import KubernetesSettings
    from orchestrator.profiles import ProfileRegistry
    from orchestrator.pipeline.factory import build_orchestrator
    from pathlib import Path

    async def main():
        backend = KubernetesBackend(KubernetesSettings.model_validate_json({settings!r}))
        orch = build_orchestrator(Path({config!r}), workspace={workspace!r}, evidence_path=Path({evidence!r}),
                                  backend=backend, profiles=ProfileRegistry())
        await orch.execute({{"tool": "shell_exec", "argv": ["sleep", "300"]}}, workspace={workspace!r})

    asyncio.run(main())
    """
)


async def test_a_killed_controllers_pod_is_collected_at_the_next_start(
    sandbox_space: SandboxSpace, tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(POLICY)
    evidence = tmp_path / "evidence.jsonl"
    workspace = sandbox_space.workspace()
    settings = sandbox_space.settings()
    script = CHILD.format(
        tests=str(Path(__file__).parent.parent),
        settings=settings.model_dump_json(),
        config=str(config),
        workspace=str(workspace),
        evidence=str(evidence),
    )
    child = subprocess.Popen([sys.executable, "-c", script], env=os.environ.copy())
    backend = KubernetesBackend(settings)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            running = [s for s in await backend.list_managed() if s.state == "running"]
            if running:
                break
            assert child.poll() is None, "the controller exited early"
            await asyncio.sleep(0.3)
        else:
            raise AssertionError("the controller's pod never ran")
        (pod,) = running
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        orch = await open_orchestrator(config, evidence_path=evidence, backend=backend)
        try:
            async with asyncio.timeout(60):
                while pod.name in {s.name for s in await backend.list_managed()}:
                    await asyncio.sleep(0.3)
        finally:
            await orch.aclose()
    finally:
        if child.poll() is None:
            child.kill()
        await backend.close()
    records = list(iter_records(evidence, execution_id=pod.execution_id))
    abandoned = [r for r in records if r.event == "execution_abandoned"]
    assert len(abandoned) == 1 and "is gone" in str(abandoned[0].reason), [r.event for r in records]
    assert abandoned[0].data is not None and abandoned[0].data["sandbox_id"] == pod.sandbox_id
    assert verify(evidence).ok


async def test_doctor_checks_the_cluster(sandbox_space: SandboxSpace) -> None:
    backend = KubernetesBackend(sandbox_space.settings())
    try:
        profiles = Profiles.under(None)
        checks = await run_doctor(backend, profiles, sandbox_space.root / "no-evidence.jsonl", probes=True)
    finally:
        await backend.close()
    by_name = {c.name: c for c in checks}
    for name in (
        "engine",
        f"namespace {sandbox_space.namespace}",
        "PodSecurity restricted",
        "default-deny NetworkPolicy",
        "permissions",
    ):
        assert by_name[name].ok, json.dumps(by_name[name].detail)
    probe = next(c for c in checks if c.name.startswith("limits in force (workspace-write"))
    assert probe.ok, probe.detail


async def test_a_cancelled_execution_deletes_its_pod(pipeline: Pipeline) -> None:
    # an earlier test's pod may still be on its way out (removed after its end record): not this one
    before = {s.name for s in await pipeline.backend.list_managed()}
    task = asyncio.create_task(pipeline.run("sleep 300"))

    async def running() -> list[Any]:
        return [s for s in await pipeline.backend.list_managed() if s.state == "running" and s.name not in before]

    async with asyncio.timeout(60):
        while not await running():
            await asyncio.sleep(0.2)
    (pod,) = await running()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pod.name not in {s.name for s in await pipeline.backend.list_managed()}
    records = list(iter_records(pipeline.evidence, execution_id=pod.execution_id))
    failed = [r for r in records if r.event == "run_failed"]
    assert len(failed) == 1 and failed[0].status == "cancelled", [r.event for r in records]
    assert "container_destroyed" in [r.event for r in records]


# -- how a run ends when its init cannot say so: killed from the node, the pod evicted -----------------------
# Either way the run ends (never hangs), from the kubelet's account rather than a report, with one end record and
# the engine's lifecycle; the pod is gone. (A controller killed mid-run: above.)

INIT = "sandbox-init"
REPORTED = "reported by the sandbox's init"


async def running_pod(pipeline: Pipeline, run: Awaitable[Any], before: set[str]) -> tuple[asyncio.Task[Any], Any]:
    """``run`` started, and its pod once it runs (found among the pods not in ``before``)."""
    task = asyncio.ensure_future(run)

    async def running() -> list[ManagedSandbox]:
        return [s for s in await pipeline.backend.list_managed() if s.state == "running" and s.name not in before]

    async with asyncio.timeout(60):
        while not (found := await running()):
            assert not task.done(), task.result()
            await asyncio.sleep(0.2)
    (pod,) = found
    return task, pod


def host_pids(pod_uid: str, comm: str) -> list[int]:
    """Processes on this node (its PID namespace is the host's here) of the pod ``pod_uid`` named ``comm``."""
    marks = (pod_uid, pod_uid.replace("-", "_"))
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cgroup = Path(f"/proc/{entry}/cgroup").read_text()
            name = Path(f"/proc/{entry}/comm").read_text().strip()
        except OSError:
            continue
        if name == comm and any(mark in cgroup for mark in marks):
            found.append(int(entry))
    return found


def ended_once(out: dict[str, Any]) -> Any:
    """The run's one end record (the pipeline's run() settled it: the kubelet's account and the removal too)."""
    ends = [r for r in out["records"] if r.event in ("execution_finished", "run_failed", "execution_abandoned")]
    assert len(ends) == 1, [r.event for r in out["records"]]
    return ends[0]


async def test_a_killed_init_ends_the_run_from_the_kubelets_account(pipeline: Pipeline) -> None:
    """The init SIGKILLed from the node: no report (the status pipe ends empty), so the end is the kubelet's
    (137), never a success, never a hang; the pod's other processes die with its PID 1."""
    before = {s.name for s in await pipeline.backend.list_managed()}
    task, pod = await running_pod(pipeline, pipeline.run("sleep 300"), before)
    async with asyncio.timeout(30):
        # the command running (its launch taken: killed before that, the run is SANDBOX.UNAVAILABLE, the command
        # never ran, as a bare-clone run found), then its init
        while not host_pids(pod.sandbox_id, "sleep") or not (inits := host_pids(pod.sandbox_id, INIT)):
            await asyncio.sleep(0.1)
    (init,) = inits
    os.kill(init, signal.SIGKILL)
    async with asyncio.timeout(60):
        out = await task
    assert out["exit_code"] == 137 and not out["ok"], out
    end = ended_once(out)
    assert REPORTED not in str((end.data or {}).get("lifecycle_stream", "")), end.data
    lifecycle = [r.event for r in out["records"] if r.event.startswith("container_")]
    assert "container_died" in lifecycle and lifecycle[-1] == "container_destroyed", lifecycle
    assert not [r for r in out["records"] if r.event == "end_unconfirmed"]
    assert pod.name not in {s.name for s in await pipeline.backend.list_managed()}


async def test_an_evicted_pod_ends_its_run_from_the_kubelets_account(pipeline: Pipeline, k8s_api: Any) -> None:
    """An eviction (the API's, as a node drain does it) stops the pod from outside: the init forwards the
    SIGTERM and reports it as a stop (``stopped=``). The command traps it and exits 0, and still the run is
    SANDBOX.UNAVAILABLE, never a success: naming the signal from outside (or, when the init's line did not get
    out before the pod went, its deletion) and the exit after it when the kubelet reported one. Never the
    command's own answer to the SIGTERM taken for its end, never a hang."""
    from kubernetes import client

    before = {s.name for s in await pipeline.backend.list_managed()}
    command = "trap 'echo trapped; exit 0' TERM; sleep 300 & wait"
    task, pod = await running_pod(pipeline, pipeline.run(command), before)
    async with asyncio.timeout(30):  # its trap set: the command's `sleep` runs (the pod runs before the launch)
        while not host_pids(pod.sandbox_id, "sleep"):
            await asyncio.sleep(0.1)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.name, namespace=pipeline.space.namespace))
    await asyncio.to_thread(
        client.CoreV1Api(k8s_api).create_namespaced_pod_eviction, pod.name, pipeline.space.namespace, eviction
    )
    with pytest.raises(SandboxUnavailable) as lost:
        async with asyncio.timeout(90):
            await task
    said = str(lost.value)
    # the kubelet's exit (0: the trap's) when it reported one; else the pod was gone before it did
    assert "stopped from outside" in said or "deleted before the kubelet reported" in said, said
    if "exited" in said:
        assert "its command exited 0 after that" in said, said
    await pipeline.orch.settle()
    out = {"records": list(iter_records(pipeline.evidence, execution_id=pod.execution_id))}
    end = ended_once(out)
    assert REPORTED not in str((end.data or {}).get("lifecycle_stream", "")), end.data
    lifecycle = [r.event for r in out["records"] if r.event.startswith("container_")]
    # as the engine told it: the kubelet's kill (and its end, when it reported one before the removal)
    assert {"container_killed", "container_died"} & set(lifecycle), lifecycle
    assert lifecycle[-1] == "container_destroyed", lifecycle
    assert not [r for r in out["records"] if r.event == "end_unconfirmed"]
    assert pod.name not in {s.name for s in await pipeline.backend.list_managed()}
