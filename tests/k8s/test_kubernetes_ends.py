"""How a pod's run ends when its init cannot say so, on the real cluster: the init killed from the node, the
pod evicted through the API. Either way the run ends (never hangs), from the kubelet's account rather than
a report, with one end record and the engine's lifecycle; the pod is gone. (A controller killed mid-run:
test_kubernetes_orchestrator.py; a report that disagrees with the kubelet: test_kubernetes_pool.py.)"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.base import ManagedSandbox
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.evidence import iter_records, verify
from tests.k8s.test_kubernetes_orchestrator import Pipeline
from tests.support.kube import SandboxSpace

pytestmark = pytest.mark.k8s

INIT = "sandbox-init"
REPORTED = "reported by the sandbox's init"


@pytest.fixture
async def pipeline(sandbox_space: SandboxSpace, tmp_path: Path) -> AsyncIterator[Pipeline]:
    p = Pipeline(sandbox_space, tmp_path)
    try:
        yield p
    finally:
        await p.orch.aclose()
        report = verify(p.evidence)
        assert report.ok, report.problem


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
        while not (inits := host_pids(pod.sandbox_id, INIT)):
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
    SIGTERM and reports it as a stop (``stopped=``), so the end is the kubelet's: its exit code when it
    reported one before the pod was removed, else SANDBOX.UNAVAILABLE saying the sandbox was stopped from
    outside. Never the command's own answer to the SIGTERM taken for its end, never a hang."""
    from kubernetes import client

    before = {s.name for s in await pipeline.backend.list_managed()}
    task, pod = await running_pod(pipeline, pipeline.run("sleep 300"), before)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.name, namespace=pipeline.space.namespace))
    await asyncio.to_thread(
        client.CoreV1Api(k8s_api).create_namespaced_pod_eviction, pod.name, pipeline.space.namespace, eviction
    )
    try:
        async with asyncio.timeout(90):
            out = await task
    except SandboxUnavailable as lost:  # the pod was gone before the kubelet's account of it arrived
        assert "signal 15 from outside the sandbox" in str(lost), lost
        await pipeline.orch.settle()
        out = {"records": list(iter_records(pipeline.evidence, execution_id=pod.execution_id))}
    else:
        assert not out["ok"] and out["exit_code"] in (143, 137), out  # SIGTERM, or SIGKILL past the grace
    end = ended_once(out)
    assert REPORTED not in str((end.data or {}).get("lifecycle_stream", "")), end.data
    lifecycle = [r.event for r in out["records"] if r.event.startswith("container_")]
    # as the engine told it: the kubelet's kill (and its end, when it reported one before the removal)
    assert {"container_killed", "container_died"} & set(lifecycle), lifecycle
    assert lifecycle[-1] == "container_destroyed", lifecycle
    assert not [r for r in out["records"] if r.event == "end_unconfirmed"]
    assert pod.name not in {s.name for s in await pipeline.backend.list_managed()}
