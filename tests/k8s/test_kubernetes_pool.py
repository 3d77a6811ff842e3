"""Pre-started pods on the real cluster: a pooled run is a cold run's equal (its command is the pod's
PID 1's replacement, its output, stdin, env, working directory and exit exactly as cold), each pod is
served once, a pod that ended in the pool is never handed out, and the pool leaves nothing behind."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends._support.labels import sandbox_name
from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.backends.kubernetes.kube import KubeClient
from orchestrator.backends.kubernetes.settings import WorkspaceDelivery
from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from orchestrator.profiles import ProfileRegistry
from tests.support.kube import SandboxSpace

pytestmark = pytest.mark.k8s

POLICY = "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"
POOL = "pool: {enabled: true, per_key: 1, ttl_s: 120}\n"


class PooledPipeline:
    def __init__(self, space: SandboxSpace, tmp_path: Path, pool: str = POOL, **settings: Any) -> None:
        self.space = space
        self.workspace = space.workspace()
        self.evidence = tmp_path / "evidence.jsonl"
        config = tmp_path / "config.yaml"
        config.write_text(POLICY + pool)
        self.backend = KubernetesBackend(space.settings(**settings))
        self.orch: Orchestrator = build_orchestrator(
            config,
            workspace=self.workspace,
            evidence_path=self.evidence,
            backend=self.backend,
            profiles=ProfileRegistry(),
        )

    def raw(self, command: str, **request: Any) -> dict[str, Any]:
        return {"tool": "shell_command", "command": command, "profile": "workspace-write", **request}

    async def ready(self, raw: dict[str, Any], count: int = 1) -> None:
        """A pod of ``raw``'s key pre-started and waiting."""
        assert self.orch.pool is not None
        assert self.orch.prestart(raw, workspace=self.workspace)
        for _ in range(1200):
            if self.orch.pool.describe()["ready"] >= count:
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"no pooled pod became ready: {self.orch.pool.describe()}")

    async def run(self, raw: dict[str, Any]) -> ExecutionResult:
        return await self.orch.execute(raw, workspace=self.workspace)

    def records(self, execution_id: str) -> list[Any]:
        return list(iter_records(self.evidence, execution_id=execution_id))

    def started(self, result: ExecutionResult) -> dict[str, Any]:
        begin = next(r for r in self.records(str(result.authorization.execution_id)) if r.event == "execution_started")
        return dict(begin.data or {})


@pytest.fixture
async def pipeline(sandbox_space: SandboxSpace, tmp_path: Path) -> AsyncIterator[PooledPipeline]:
    p = PooledPipeline(sandbox_space, tmp_path)
    try:
        yield p
    finally:
        await p.orch.aclose()
        report = verify(p.evidence)
        assert report.ok, report.problem
        ids = {r.execution_id for r in iter_records(p.evidence)}
        check = KubernetesBackend(sandbox_space.settings())
        try:  # the pool deleted what it held: no pod of this test is left
            assert [m.name for m in await check.list_managed() if m.execution_id in ids] == []
        finally:
            await check.close()


async def test_a_pooled_pod_run_is_a_cold_runs_equal(pipeline: PooledPipeline) -> None:
    # stdin: /dev/null (cat ends at once), as in a cold run
    command = (
        'printf "%s|%s|%s|" "$(pwd)" "$TZ" "${KUBERNETES_SERVICE_HOST-unset}"; cat; echo err >&2;'
        " mktemp -p . made.XXXXXX >/dev/null; exit 3"
    )
    raw = pipeline.raw(command, env={"TZ": "hi there"})
    await pipeline.ready(raw)
    pooled = await pipeline.run(raw)
    assert pipeline.orch.pool is not None
    await pipeline.orch.pool.drain()
    cold = await pipeline.run(raw)
    assert "pooled" in pipeline.started(pooled) and "pooled" not in pipeline.started(cold)
    for result in (pooled, cold):
        out = result.to_json()
        assert (out["exit_code"], out["stdout"], out["stderr"]) == (3, "/workspace|[REDACTED:literal]|unset|", "err\n")
        assert out["error"] is None
        # measured from the claim: what the command made, nothing else
        assert (out["side_effects"]["created"], out["side_effects"]["modified"]) == (1, 0), out["side_effects"]
    # the pod's own records hold its create, schedule and start (at fill); the run's its end
    info = pipeline.started(pooled)["pooled"]
    own = [r.event for r in pipeline.records(info["pool_id"])]
    assert own[:4] == ["container_created", "container_scheduled", "container_started", "sandbox_pooled"], own
    assert own[-1] == "sandbox_claimed"
    events = [r.event for r in pipeline.records(str(pooled.authorization.execution_id))]
    assert "container_died" in events and "container_destroyed" in events
    assert "container_created" not in events  # on the pod's own record, not repeated
    died = next(r for r in pipeline.records(str(pooled.authorization.execution_id)) if r.event == "container_died")
    assert died.data is not None and died.data["exit_code"] == 3


async def test_the_init_stays_pid_1_and_reports_the_end_with_the_pods_usage(pipeline: PooledPipeline) -> None:
    """The init stays PID 1 to report the command's end (issue 24); the command is its child, under the
    profile's rlimits, its /proc/1 out of reach; the end is the init's report, the kubelet's follows it."""
    command = (
        "cat /proc/1/cmdline | tr '\\0' ' '; echo; ulimit -n; ulimit -f; id -u; echo $PPID;"
        " ls /proc/1/fd 2>/dev/null || echo unreadable; head -c 20000000 /dev/zero | tail -c 1 >/dev/null; exit 6"
    )
    raw = pipeline.raw(command)
    await pipeline.ready(raw)
    result = await pipeline.run(raw)
    out = result.to_json()
    profile = ProfileRegistry().resolve("workspace-write")
    lines = out["stdout"].splitlines()
    assert lines[0] == "/usr/lib/sandbox-orchestrator/sandbox-init ", lines
    # bash: 1 KiB blocks; the command's shell is the init's child; the init's descriptors are root's
    assert lines[1:] == [str(profile.nofile), str(profile.fsize_bytes // 1024), "1000", "1", "unreadable"], lines
    assert out["exit_code"] == 6
    execution = str(result.authorization.execution_id)
    (finished,) = [r for r in pipeline.records(execution) if r.event == "execution_finished"]
    assert finished.data is not None and finished.data["lifecycle_stream"].startswith("reported by the sandbox's init")
    usage = finished.data.get("usage") or {}
    assert usage.get("memory_peak_bytes", 0) > 1_000_000 and usage.get("cpu_total_ns", 0) > 0, finished.data
    await pipeline.orch.settle()  # the kubelet's account and the pod's removal, after the end record
    events = [r.event for r in pipeline.records(execution)]
    assert events.index("execution_finished") < events.index("container_destroyed"), events
    assert "end_unconfirmed" not in events, events
    died = next(r for r in pipeline.records(execution) if r.event == "container_died")
    assert died.data is not None and died.data["exit_code"] == 6


async def test_no_pod_is_ever_served_twice(pipeline: PooledPipeline) -> None:
    raw = pipeline.raw("true")
    await pipeline.ready(raw)
    results = []
    for _ in range(5):
        results.append(await pipeline.run(raw))
        await pipeline.ready(raw)  # the refill after each run
    pooled = [pipeline.started(r).get("pooled") for r in results]
    assert all(pooled), pooled
    ids = [p["sandbox_id"] for p in pooled if p]
    assert len(set(ids)) == len(ids), ids
    claims = Counter(r.execution_id for r in iter_records(pipeline.evidence) if r.event == "sandbox_claimed")
    assert set(claims.values()) == {1}
    # the engine's own records: each pod started once, and ended once
    starts = Counter(r.data["sandbox_id"] for r in iter_records(pipeline.evidence) if r.event == "container_started")
    assert all(starts[i] == 1 for i in ids), starts


async def test_a_pooled_pod_that_ended_is_never_handed_out(pipeline: PooledPipeline) -> None:
    raw = pipeline.raw("echo ran")
    await pipeline.ready(raw)
    assert pipeline.orch.pool is not None
    waiting = next(iter(pipeline.orch.pool._keys.values())).ready[0]
    await pipeline.backend.kill(waiting.handle)  # its deadline cut: the kubelet stops it
    deadline = time.monotonic() + 60
    while pipeline.backend.still_waiting(waiting.handle) is not False and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    result = await pipeline.run(raw)
    out = result.to_json()
    assert (out["exit_code"], out["stdout"]) == (0, "ran\n")
    assert "pooled" not in pipeline.started(result)  # it ran cold
    discarded = [r.data for r in iter_records(pipeline.evidence) if r.event == "sandbox_discarded"]
    assert {"sandbox_id": waiting.handle.sandbox_id, "reason": "ended"} in discarded


async def test_a_pooled_pods_deadline_covers_its_wait_in_the_pool(pipeline: PooledPipeline) -> None:
    raw = pipeline.raw("true")
    await pipeline.ready(raw)
    assert pipeline.orch.pool is not None
    waiting = next(iter(pipeline.orch.pool._keys.values())).ready[0]
    kube = KubeClient.connect(str(pipeline.space.cluster.kubeconfig), None)
    try:
        pod = await asyncio.to_thread(kube.get_pod, pipeline.space.namespace, waiting.handle.name)
    finally:
        kube.close()
    assert pod["metadata"]["name"] == sandbox_name(waiting.pool_id)
    wall = ProfileRegistry().resolve("workspace-write").wall_timeout_s
    assert pod["spec"]["activeDeadlineSeconds"] >= 120 + wall  # the TTL, then the command's wall time
    container = pod["spec"]["containers"][0]
    assert container.get("env", []) == []  # the request's variables come with the launch
    assert container["workingDir"] == "/workspace"


async def test_copy_mode_keeps_every_run_cold(sandbox_space: SandboxSpace, tmp_path: Path) -> None:
    p = PooledPipeline(sandbox_space, tmp_path, workspace=WorkspaceDelivery(mode="copy"))
    try:
        assert p.orch.pool is None  # the workspace would be the one copied in at fill
        out = (await p.orch.execute(p.raw("echo cold"), workspace=p.workspace)).to_json()
        assert (out["exit_code"], out["stdout"]) == (0, "cold\n")
    finally:
        await p.orch.aclose()
