"""Pre-started pods (issue 11) on the test cluster: a governed run from a ready pool against a cold one.

* **pooled vs cold** -- (A) ``execute()`` of ``true`` (profile workspace-write, runc) whose pod is taken
  from a ready pool (the pool refilled between rounds, untimed) against (B) the same ``execute()`` with
  the pool off: a pod created, scheduled, started and watched to its end. Rounds interleaved (A B, B A);
  p50/p95 of each side, the median of the pairwise ratios A/B. Target: A's p50 <= 0.3 s.
* **where a pooled run's time goes** -- from each pooled run's evidence: claim to launch sent, launch to the
  container's end as the kubelet reported it (its PLEG relists every second), end to the pod deleted.
* **served twice** -- from the evidence's engine records: pods that ran more than one command (0).

Not a test: it prints figures and a last line ``pool pods summary: {...}`` (JSON). Starts the test
cluster when it is down (and stops it again); a namespace of its own, removed at the end.

    .venv/bin/python benchmarks/pool_pods.py [--runs 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from kube_fixtures import Cluster, SandboxSpace, close_space, cluster_script, env_value, open_space
from sandbox_overhead import pct

from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.evidence import iter_records
from orchestrator.profiles import ProfileRegistry
from orchestrator.service.factory import build_orchestrator
from orchestrator.service.orchestrator import ExecutionResult, Orchestrator

TARGET_S = 0.3
POLICY = "safety: {mode: allow, denylist: [], rules: []}\n"
REQUEST = {"tool": "shell_exec", "argv": ["true"], "profile": "workspace-write"}


def line(name: str, samples: list[float]) -> str:
    return f"    {name:<28} p50 {pct(samples, 0.5) * 1000:8.1f} ms   p95 {pct(samples, 0.95) * 1000:8.1f} ms"


def orchestrator(space: SandboxSpace, tmp: Path, workspace: Path, name: str, pool: str) -> Orchestrator:
    config = tmp / f"{name}.yaml"
    config.write_text(POLICY + f"pool: {pool}\n")
    return build_orchestrator(
        config,
        workspace=workspace,
        evidence_path=tmp / f"{name}.jsonl",
        backend=KubernetesBackend(space.settings()),
        profiles=ProfileRegistry(),
    )


async def until_ready(o: Orchestrator, timeout: float = 120.0) -> None:
    assert o.pool is not None
    deadline = time.monotonic() + timeout
    while not o.pool.describe()["ready"]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pool did not fill: {o.pool.describe()}")
        await asyncio.sleep(0.02)


async def timed_run(o: Orchestrator, workspace: Path) -> tuple[float, ExecutionResult]:
    began = time.perf_counter()
    result = await o.execute(REQUEST, workspace=workspace)
    elapsed = time.perf_counter() - began
    assert result.ok, result.to_json()
    return elapsed, result


def stages(evidence: Path, result: ExecutionResult) -> tuple[float, float] | None:
    """(launch sent → the kubelet's end of the container, that end → the pod deleted) of one pooled run,
    from its records (the engine's timestamps)."""
    records = list(iter_records(evidence, execution_id=str(result.authorization.execution_id)))
    at = {r.event: r for r in records}
    died, destroyed, claimed = at.get("container_died"), at.get("container_destroyed"), at.get("execution_started")
    if died is None or destroyed is None or claimed is None or not died.engine_ts or not destroyed.engine_ts:
        return None
    start = datetime.fromisoformat(claimed.ts)
    end = datetime.fromisoformat(died.engine_ts)
    gone = datetime.fromisoformat(destroyed.engine_ts)
    return (end - start).total_seconds(), (gone - end).total_seconds()


def served_twice(tmp: Path) -> int:
    starts: Counter[str] = Counter()
    for evidence in tmp.glob("*.jsonl"):
        for record in iter_records(evidence):
            if record.event == "container_started" and record.data:
                starts[str(record.data["sandbox_id"])] += 1
    return sum(1 for count in starts.values() if count > 1)


async def pooled_vs_cold(space: SandboxSpace, tmp: Path, runs: int) -> dict[str, float]:
    workspace = space.workspace("bench")
    pooled_o = orchestrator(space, tmp, workspace, "pooled", "{enabled: true, per_key: 1, ttl_s: 600}")
    cold_o = orchestrator(space, tmp, workspace, "cold", "{enabled: false}")
    pooled: list[float] = []
    cold: list[float] = []
    ratios: list[float] = []
    spent: list[tuple[float, float]] = []
    try:
        assert pooled_o.prestart(REQUEST, workspace=workspace)
        await timed_run(cold_o, workspace)  # warm: the watch, the lease
        for index in range(runs):
            await until_ready(pooled_o)
            order = ("pooled", "cold") if index % 2 == 0 else ("cold", "pooled")
            figures: dict[str, float] = {}
            for side in order:
                elapsed, result = await timed_run(pooled_o if side == "pooled" else cold_o, workspace)
                figures[side] = elapsed
                if side == "pooled":
                    stage = stages(tmp / "pooled.jsonl", result)
                    if stage is not None:
                        spent.append(stage)
            pooled.append(figures["pooled"])
            cold.append(figures["cold"])
            ratios.append(figures["pooled"] / figures["cold"])
        assert pooled_o.pool is not None
        taken = len(pooled_o.pool.served)
    finally:
        await pooled_o.aclose()
        await cold_o.aclose()
    print(f"pooled pod vs cold pod, execute() of `true`, {runs} interleaved rounds ({taken} from the pool)")
    print(line("pooled (A)", pooled))
    print(line("cold (B)", cold))
    ratio = statistics.median(ratios)
    met = "met" if pct(pooled, 0.5) <= TARGET_S else "NOT met"
    print(f"    median ratio A/B {ratio:.2f}; A p50 {pct(pooled, 0.5):.3f} s (target <= {TARGET_S} s: {met})")
    if spent:
        to_end = [s[0] for s in spent]
        teardown = [s[1] for s in spent]
        print(line("claim → container's end", to_end))
        print(line("end → pod deleted", teardown))
    return {
        "pooled pod p50 s": round(pct(pooled, 0.5), 3),
        "pooled pod p95 s": round(pct(pooled, 0.95), 3),
        "cold pod p50 s": round(pct(cold, 0.5), 3),
        "pooled/cold pod": round(ratio, 3),
        "pods from the pool": taken,
    }


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    started_here = cluster_script("status").returncode != 0
    if started_here and cluster_script("up").returncode != 0:
        raise SystemExit("the test cluster did not start: make k8s-up")
    env = cluster_script("env").stdout
    cluster = Cluster(Path(env_value(env, "KUBECONFIG")), Path(env_value(env, "PATH").split(":", 1)[0]), "")
    space = open_space(cluster, "so-bench")
    tmp = Path(tempfile.mkdtemp(prefix="so-bench-pool-pods-"))
    try:
        summary = await pooled_vs_cold(space, tmp, args.runs)
        summary["pods served twice"] = served_twice(tmp)
        print(f"    pods served twice (engine records): {summary['pods served twice']}")
    finally:
        close_space(space)
        if started_here:
            cluster_script("down")
    print("pool pods summary: " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
