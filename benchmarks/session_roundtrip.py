"""Interactive sessions: the round trip of one byte, and the cost of opening one (issue 10).

* **round trip** -- (A) ``Sessions.write`` of one byte to a session running ``cat`` and its answer with
  that byte (``max_output_bytes: 1``: the answer goes as soon as it is there), against (B) ``docker exec
  -i`` of ``cat`` in a running container of the same image: one byte written to its stdin, read back from
  its stdout. A goes through everything a write_stdin is: the gate, its evidence records (the decision
  durable), the session's writer thread, the engine's attach stream both ways, redaction. Rounds
  interleaved (A B, B A); p50/p95 of each, the median of the pairwise ratios A/B. Target: <= 1.5.
* **open vs one-shot** -- opening a session of ``cat`` (first answer with ``yield_time_ms: 0``) and
  closing it, against ``execute()`` of ``true``, interleaved.
* ``--kubernetes``: the same on the test cluster (``make k8s-up``; a namespace of its own, removed at
  the end): (A) through the Kubernetes backend (a cold session: its input on the init's launch writer, its
  output on the sidecar's relays, both streams through the API server) against
  (B) the official client's own exec stream of ``cat`` (what ``kubectl exec -i`` does) into a pod of the
  same manifest.

Not a test: it prints figures and a last line ``session summary: {...}`` (JSON).

    .venv/bin/python benchmarks/session_roundtrip.py [--rounds 200] [--opens 10] [--kubernetes [--check]] [--quick]

The engine is the one ``DockerBackend()`` finds (``benchmarks/engine.py``; the ``docker`` CLI of the
baseline gets it as DOCKER_HOST); the cluster is found and started as the tests do (``benchmarks/cluster.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cluster import check, cluster_session
from engine import docker_cli, docker_env
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config
from kubernetes import stream as k8s_stream
from kubernetes import watch as k8s_watch
from options import parse

from orchestrator.backends.base import LaunchSpec, SandboxBackend, SessionLaunch, Workspace
from orchestrator.backends.docker import DockerBackend
from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.backends.kubernetes.manifest import pod_manifest
from orchestrator.domain.ids import new_execution_id
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.profiles import ProfileRegistry
from orchestrator.service.sessions import Sessions
from tests.support.kube import Cluster, close_space, open_space

TARGET = 1.5
CONFIG = "safety:\n  mode: allow\n  rules: []\napprovals:\n  provider: rules\n  default: approved\n"
SANDBOX_UID = 1000


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def line(name: str, samples: list[float]) -> str:
    p50, p95 = pct(samples, 0.5) * 1000, pct(samples, 0.95) * 1000
    return f"{name:<40} p50 {p50:8.2f} ms   p95 {p95:8.2f} ms   n={len(samples)}"


class Baseline(Protocol):
    def round_trip(self) -> float: ...

    def close(self) -> None: ...


class DockerExecCat:
    """`docker exec -i <container> cat`: one byte in, the same byte out."""

    def __init__(self, image: str) -> None:
        self.name = f"so-bench-exec-{uuid.uuid4().hex[:8]}"
        self.docker, self.env = docker_cli(), docker_env()  # the engine DockerBackend() finds
        subprocess.run(
            [self.docker, "run", "-d", "--rm", "--name", self.name, "--network", "none", "--user", "1000:1000",
             "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", image, "sleep", "3600"],
            check=True, capture_output=True, env=self.env,
        )  # fmt: skip
        self.proc = subprocess.Popen(
            [self.docker, "exec", "-i", self.name, "cat"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=self.env,
        )  # fmt: skip

    def round_trip(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        start = time.perf_counter()
        self.proc.stdin.write(b"x")
        got = self.proc.stdout.read(1)
        elapsed = time.perf_counter() - start
        assert got == b"x", got
        return elapsed

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        subprocess.run([self.docker, "rm", "-f", self.name], capture_output=True, check=False, env=self.env)


class KubeExecCat:
    """The official client's exec stream of ``cat`` (as ``kubectl exec -i``) into a pod of the sandbox
    manifest: one byte in, the same byte out."""

    def __init__(self, kubeconfig: Path, namespace: str, manifest: dict[str, Any]) -> None:
        self.api = k8s_client.CoreV1Api(k8s_config.new_client_from_config(config_file=str(kubeconfig)))
        self.namespace, self.name = namespace, manifest["metadata"]["name"]
        self.api.create_namespaced_pod(namespace, manifest)
        events = k8s_watch.Watch()
        for event in events.stream(
            self.api.list_namespaced_pod, namespace, field_selector=f"metadata.name={self.name}", timeout_seconds=120
        ):
            if event["object"].status.phase == "Running":
                events.stop()
        self.ws = k8s_stream.stream(
            self.api.connect_get_namespaced_pod_exec, self.name, namespace, command=["cat"], container="sandbox",
            stdin=True, stdout=True, stderr=True, tty=False, _preload_content=False, binary=True,
        )  # fmt: skip

    def round_trip(self) -> float:
        start = time.perf_counter()
        self.ws.write_stdin(b"x")
        got = b""
        while not got:
            self.ws.update(timeout=5)
            got = self.ws.read_stdout(timeout=0) if self.ws.peek_stdout() else b""
        elapsed = time.perf_counter() - start
        assert got == b"x", got
        return elapsed

    def close(self) -> None:
        self.ws.close()
        self.api.delete_namespaced_pod(self.name, self.namespace, grace_period_seconds=0)


def kubernetes_sides(cluster: Cluster) -> tuple[SandboxBackend, Path, Callable[[], Baseline], Callable[[], None]]:
    """A namespace of the test cluster's (the tests' own setup), the backend, a workspace on its claim,
    the baseline's maker and the cleanup."""
    space = open_space(cluster, "so-bench")
    namespace = space.namespace
    workspace = space.workspace("bench")

    def baseline() -> Baseline:
        profile = ProfileRegistry().resolve("workspace-write", session=True)
        spec = LaunchSpec(
            execution_id=new_execution_id(), argv=("true",), profile=profile, workspace=Workspace(str(workspace)),
            workdir=profile.workspace.container_path, env={}, owner="", deadline_unix=time.time() + 3600,
            kind=SessionLaunch(),
        )  # fmt: skip
        return KubeExecCat(cluster.kubeconfig, namespace, pod_manifest(spec, space.settings()))

    def cleanup() -> None:
        close_space(space)

    return KubernetesBackend(space.settings()), workspace, baseline, cleanup


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--opens", type=int, default=10)
    parser.add_argument("--kubernetes", action="store_true", help="on the test cluster instead of Docker")
    parser.add_argument(
        "--check", action="store_true", help="with --kubernetes: find the cluster (started if down), measure nothing"
    )
    args = parse(parser, {"rounds": 4, "opens": 2})
    if not args.kubernetes:
        return await measure(args, None)
    with cluster_session() as cluster:  # as the tests find it: scripts/k8s-cluster.sh, started if down
        if args.check:
            check(cluster)
            return 0
        return await measure(args, cluster)


async def measure(args: argparse.Namespace, cluster: Cluster | None) -> int:
    """Both comparisons, on the test cluster when ``cluster`` is given, else on the engine."""
    tmp = Path(tempfile.mkdtemp(prefix="so-bench-session-"))
    (tmp / "config.yaml").write_text(CONFIG)
    cleanup: Callable[[], None] = lambda: None  # noqa: E731
    backend: SandboxBackend
    if cluster is not None:
        backend, workspace, make_baseline, cleanup = kubernetes_sides(cluster)
        names = ("through the Kubernetes backend", "the client's exec stream of cat", "kubectl exec")
    else:
        workspace = tmp / "ws"
        workspace.mkdir()
        os.chown(workspace, SANDBOX_UID, SANDBOX_UID)
        image = ProfileRegistry().resolve("workspace-write").image
        backend = DockerBackend()
        names = ("to a session of cat", "docker exec -i cat", "docker exec")

        def make_baseline() -> Baseline:
            return DockerExecCat(image)

    orch = build_orchestrator(
        tmp / "config.yaml",
        workspace=workspace,
        evidence_path=tmp / "evidence.jsonl",
        backend=backend,
        profiles=ProfileRegistry(),
    )
    sessions = Sessions(orch)
    baseline: Baseline | None = None
    summary: dict[str, float] = {}
    try:
        baseline = make_baseline()
        opened = await sessions.open({"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0}, workspace=workspace)
        sid = opened.session_id

        async def governed() -> float:
            start = time.perf_counter()
            reply = await sessions.write(
                {"tool": "write_stdin", "session_id": sid, "chars": ".", "yield_time_ms": 5000, "max_output_bytes": 1}
            )
            elapsed = time.perf_counter() - start
            assert reply.stdout == b".", reply
            return elapsed

        for _ in range(10):  # warm both
            await governed()
            baseline.round_trip()
        a: list[float] = []
        b: list[float] = []
        for i in range(args.rounds):
            if i % 2 == 0:
                a.append(await governed())
                b.append(baseline.round_trip())
            else:
                b.append(baseline.round_trip())
                a.append(await governed())
        ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
        print(f"round trip of one byte ({args.rounds} interleaved rounds, runc)")
        print(line(f"A write_stdin {names[0]}", a))
        print(line(f"B {names[1]}", b))
        print(f"{'median ratio A/B':<40} {ratio:.2f}   (target <= {TARGET})")
        summary[f"roundtrip/{names[2]}"] = round(ratio, 2)
        summary["roundtrip p50 ms"] = round(pct(a, 0.5) * 1000, 2)
        await sessions.close(sid, tenant="default", subject="anonymous")

        opens: list[float] = []
        one_shots: list[float] = []
        for i in range(args.opens):
            for side in ("open", "true") if i % 2 == 0 else ("true", "open"):
                start = time.perf_counter()
                if side == "open":
                    reply = await sessions.open(
                        {"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0}, workspace=workspace
                    )
                    opens.append(time.perf_counter() - start)
                    await sessions.close(reply.session_id, tenant="default", subject="anonymous")
                else:
                    result = await orch.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=workspace)
                    assert result.ok
                    one_shots.append(time.perf_counter() - start)
        print(f"opening a session vs a one-shot run ({args.opens} each, interleaved)")
        print(line("open a session of cat (first answer)", opens))
        print(line("execute() of true", one_shots))
        open_ratio = statistics.median(opens) / statistics.median(one_shots)
        print(f"{'median open / one-shot':<40} {open_ratio:.2f}")
        summary["open/one-shot"] = round(open_ratio, 2)
    finally:
        if baseline is not None:
            baseline.close()
        await sessions.aclose()
        await orch.aclose()
        cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print("session summary: " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
