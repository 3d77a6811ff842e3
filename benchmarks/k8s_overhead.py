"""Kubernetes overhead: a governed execution as a pod against the same pod driven straight through the client.

Phases, on the project's test cluster (``scripts/k8s-cluster.sh up``; a namespace of the benchmark's own,
made like the chart's, removed at the end):

* **pod vs pod** — (A) ``Orchestrator.execute({"tool": "shell_exec", "argv": ["true"]})`` with the
  Kubernetes backend (gate, evidence, the pod watch, the stdio relays, teardown) against (B) the *same*
  pod manifest created with the official client's ``CoreV1Api``, its output pipes read by exec in its
  sidecar (the client's ``stream``: the pod's command starts only once they are), awaited with its
  ``Watch`` until the container terminated, then deleted and awaited until gone. Pairs are interleaved
  (A B, then B A, ...); prints p50/p95 of each and the median of the pairwise ratios A/B. Target
  (issue 9): ≤ 1.15. Also B's phases as the API server reported them: create → running → succeeded →
  deleted. And (C) what the exact stdio costs: the same pod without its sidecar and pipes (the command
  alone, its output left to the kubelet's log), through the same client; the ratio A/C is printed for
  information.
* **concurrency** — N executions, C at a time, over one orchestrator: throughput, p50/p95, and the pods
  left with our labels afterwards (must be 0).

Not a test: it prints figures and a last line ``SUMMARY {...}`` (JSON), exit 1 only if pods leak. The
cluster is found and started as the tests do (``benchmarks/cluster.py``); ``--check`` stops there.

    .venv/bin/python benchmarks/k8s_overhead.py [--runs 15] [--concurrency 20] [--concurrent-runs 20] [--check]
        [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the checkout: tests.support
sys.path.insert(0, str(REPO / "benchmarks"))

from cluster import check, cluster_session  # noqa: E402
from kubernetes import client as k8s_client  # noqa: E402
from kubernetes import config as k8s_config  # noqa: E402
from kubernetes import stream as k8s_stream  # noqa: E402
from kubernetes import watch as k8s_watch  # noqa: E402
from options import parse  # noqa: E402

from orchestrator.backends.base import LaunchSpec, Workspace  # noqa: E402
from orchestrator.backends.kubernetes.backend import KubernetesBackend  # noqa: E402
from orchestrator.backends.kubernetes.manifest import CONTAINER, pod_manifest  # noqa: E402
from orchestrator.backends.kubernetes.start_barrier import (  # noqa: E402
    PIPES,
    SIDECAR,
    STDIO_VOLUME,
    reader_command,
)
from orchestrator.domain.ids import new_execution_id  # noqa: E402
from orchestrator.pipeline.factory import build_orchestrator  # noqa: E402
from orchestrator.profiles import ProfileRegistry  # noqa: E402
from tests.support.kube import Cluster, close_space, open_space  # noqa: E402

POLICY = "safety: {mode: allow, denylist: [], rules: []}\n"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def line(name: str, values: list[float]) -> str:
    return (
        f"{name:<34} p50 {pct(values, 0.5) * 1000:7.0f} ms   p95 {pct(values, 0.95) * 1000:7.0f} ms   n={len(values)}"
    )


class Direct:
    """The same pod through the official client, as a user of the client would run it."""

    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.kubeconfig = kubeconfig
        self.api = k8s_client.CoreV1Api(k8s_config.new_client_from_config(config_file=str(kubeconfig)))
        self.namespace = namespace
        self.phases: dict[str, list[float]] = {"running": [], "succeeded": [], "deleted": []}

    def run(self, manifest: dict[str, Any]) -> float:
        name = manifest["metadata"]["name"]
        start = time.monotonic()
        self.api.create_namespaced_pod(self.namespace, manifest)
        running = None
        relays: list[threading.Thread] = []
        stream = k8s_watch.Watch()
        for event in stream.stream(
            self.api.list_namespaced_pod, self.namespace, field_selector=f"metadata.name={name}", timeout_seconds=120
        ):
            statuses = {s.name: s.state for s in event["object"].status.container_statuses or []}
            state, sidecar = statuses.get(CONTAINER), statuses.get(SIDECAR)
            if state is not None and state.running is not None and running is None:
                running = time.monotonic()
            if not relays and sidecar is not None and sidecar.running is not None:
                # the same pod's own protocol: its command starts once its stdio pipes have readers
                relays = [threading.Thread(target=self.relay, args=(name, stream_)) for stream_ in PIPES]
                for relay in relays:
                    relay.start()
            if state is not None and state.terminated is not None:
                stream.stop()
        for relay in relays:
            relay.join(timeout=60)
        succeeded = time.monotonic()
        self.api.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        for _ in range(600):  # grace 0: normally gone at once; else a moment later
            try:
                self.api.read_namespaced_pod(name, self.namespace)
            except k8s_client.ApiException as exc:
                if exc.status == 404:
                    break
                raise
            time.sleep(0.01)
        deleted = time.monotonic()
        self.phases["running"].append((running or succeeded) - start)
        self.phases["succeeded"].append(succeeded - start)
        self.phases["deleted"].append(deleted - start)
        return deleted - start

    def relay(self, name: str, stream_name: str) -> None:
        """One output pipe read to its end by exec in the sidecar, with the client's own stream()."""
        api = k8s_client.CoreV1Api(k8s_config.new_client_from_config(config_file=str(self.kubeconfig)))
        ws = k8s_stream.stream(
            api.connect_get_namespaced_pod_exec,
            name,
            self.namespace,
            container=SIDECAR,
            command=reader_command(stream_name),
            stdin=False,
            stdout=True,
            stderr=True,
            tty=False,
            _preload_content=False,
        )
        ws.run_forever(timeout=60)
        ws.close()


def without_stdio(manifest: dict[str, Any]) -> dict[str, Any]:
    """The pod with its command alone: no sidecar, no pipes, the argv run as is."""
    spec = manifest["spec"]
    command = next(c for c in spec["containers"] if c["name"] == CONTAINER)
    command["command"] = command["command"][command["command"].index("sandbox-start") + 1 :]
    command["volumeMounts"] = [m for m in command["volumeMounts"] if m["name"] != STDIO_VOLUME]
    spec["containers"] = [command]
    spec["volumes"] = [v for v in spec["volumes"] if v["name"] != STDIO_VOLUME]
    return manifest


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--concurrent-runs", type=int, default=20)
    parser.add_argument("--check", action="store_true", help="find the cluster (started if down), measure nothing")
    args = parse(parser, {"runs": 1, "concurrency": 2, "concurrent_runs": 2})
    with cluster_session() as cl:  # as the tests find it: scripts/k8s-cluster.sh, started if down
        if args.check:
            check(cl)
            return 0
        return await measure(args, cl)


async def measure(args: argparse.Namespace, cl: Cluster) -> int:
    space = open_space(cl, "so-bench")
    namespace = space.namespace
    workspace = space.workspace("bench")
    tmp = Path(tempfile.mkdtemp(prefix="so-bench-"))
    (tmp / "config.yaml").write_text(POLICY)
    backend = KubernetesBackend(space.settings())
    orch = build_orchestrator(
        tmp / "config.yaml",
        workspace=workspace,
        evidence_path=tmp / "evidence.jsonl",
        backend=backend,
        profiles=ProfileRegistry(),
    )
    direct = Direct(cl.kubeconfig, namespace)
    profile = ProfileRegistry().resolve("workspace-write")
    leaked: list[str] = []
    summary: dict[str, float] = {}
    try:
        request = {"tool": "shell_exec", "argv": ["true"]}
        await orch.execute(request, workspace=workspace)  # warm: the watch, the lease, the client
        governed: list[float] = []
        bare: list[float] = []

        async def side_a() -> None:
            t = time.monotonic()
            result = await orch.execute(request, workspace=workspace)
            assert result.ok, result.to_json()
            governed.append(time.monotonic() - t)

        def manifest() -> dict[str, Any]:
            spec = LaunchSpec(
                execution_id=new_execution_id(),
                argv=("true",),
                profile=profile,
                workspace=Workspace(str(workspace)),
                workdir=profile.workspace.container_path,
                env=dict(profile.env),
                owner="",
                deadline_unix=time.time() + 600,
            )
            return pod_manifest(spec, space.settings())

        async def side_b() -> None:
            bare.append(await asyncio.to_thread(direct.run, manifest()))

        async def side_c() -> None:
            plain.append(await asyncio.to_thread(direct.run, without_stdio(manifest())))

        plain: list[float] = []
        orders = [(side_a, side_b, side_c), (side_b, side_c, side_a), (side_c, side_a, side_b)]
        for i in range(args.runs):
            for side in orders[i % 3]:
                await side()
        print(f"pod vs pod ({args.runs} interleaved rounds, profile workspace-write, runc)")
        print(line("A execute() as a pod", governed))
        print(line("B the same pod via CoreV1Api", bare))
        print(line("C B without its stdio sidecar", plain))
        ratios = [a / b for a, b in zip(governed, bare, strict=True)]
        print(f"{'median ratio A/B':<34} {statistics.median(ratios):.2f}   (target <= 1.15)")
        plain_ratios = [a / c for a, c in zip(governed, plain, strict=True)]
        print(f"{'median ratio A/C':<34} {statistics.median(plain_ratios):.2f}   (what exact stdio costs)")
        summary["pod A/B"] = round(statistics.median(ratios), 3)
        summary["pod A/C"] = round(statistics.median(plain_ratios), 3)
        for label, values in (("A", governed), ("B", bare), ("C", plain)):
            summary[f"{label} p50 ms"] = round(pct(values, 0.5) * 1000)
            summary[f"{label} p95 ms"] = round(pct(values, 0.95) * 1000)
        for phase, values in direct.phases.items():
            print(line(f"  B,C create -> {phase}", values))

        latencies: list[float] = []
        semaphore = asyncio.Semaphore(args.concurrency)

        async def one() -> None:
            async with semaphore:
                t = time.monotonic()
                result = await orch.execute(request, workspace=workspace)
                assert result.ok, result.to_json()
                latencies.append(time.monotonic() - t)

        t0 = time.monotonic()
        await asyncio.gather(*(one() for _ in range(args.concurrent_runs)))
        wall = time.monotonic() - t0
        print(f"concurrency ({args.concurrent_runs} executions, {args.concurrency} at a time)")
        print(f"{'throughput':<34} {args.concurrent_runs / wall:7.2f} executions/s  (wall {wall:.1f} s)")
        print(line("latency", latencies))
        leaked = [s.name for s in await backend.list_managed()]
        print(f"{'pods left with our labels':<34} {len(leaked)}")
        summary |= {
            "concurrent executions per s": round(args.concurrent_runs / wall, 2),
            "concurrent p50 ms": round(pct(latencies, 0.5) * 1000),
            "concurrent p95 ms": round(pct(latencies, 0.95) * 1000),
            "pods left": len(leaked),
            "rounds": args.runs,
        }
    finally:
        await orch.aclose()
        close_space(space)
        shutil.rmtree(tmp, ignore_errors=True)
    print("SUMMARY " + json.dumps(summary))
    return 1 if leaked else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
