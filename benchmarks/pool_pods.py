"""Pre-started pods (issue 11) on the test cluster: a governed run from a ready pool against a cold one.

* **pooled vs exec vs cold** -- (A) ``execute()`` of ``true`` (profile workspace-write, runc) whose pod is
  taken from a ready pool (the pool refilled between rounds, untimed) against (E) the same ``true`` exec'd
  into an already-running pod of the same manifest through the API server (the official client's exec, what
  ``kubectl exec`` does: no gate, no evidence) and (B) the same ``execute()`` with the pool off: a pod
  created, started, its command launched through its init and its end reported by it. Rounds interleaved
  (the three sides' order rotates); p50/p95 of each side, the median of the pairwise ratios A/E and A/B.
  Targets (issue 24): A p50 <= 0.15 s, p95 <= 0.30 s; B p50 <= 1.1 s.
  Each timed run starts after an untimed pause drawn uniformly from 0-1 s: the kubelet learns of a
  container's end when it relists (every second: its PLEG), and a run started right after the previous
  one ended (or right after a refill was seen running) would start just after a relist every time, and
  always wait almost the whole second; requests arrive at any phase of it.
* **burst, sustained** (``pool_demand.py``) -- 20 runs at once of a key whose pool has grown to that demand
  (target: all 20 answered within 1.5 s), and 60 runs at 20 at a time, the grown pool against no pool (target:
  >= 2x the cold throughput). The namespace must hold 40 sandbox pods at once (20 ready, 20 running).
* **session open** -- opening a session of ``cat`` (its first answer, ``yield_time_ms: 0``) from the pool (a
  pre-started pod of the session's key, its command launched into it) against cold (a pod made for it), rounds
  interleaved; target from the pool: <= 0.25 s.
* **served twice, pods left** -- from the evidence's engine records: pods that ran more than one command (0);
  the bench's pods still listed once its orchestrators closed (0).

Both on the node as tests run it (the kubelet's generic PLEG: it relists every second) and on the same node
with the runtime's container events (``SANDBOX_K8S_PLEG=evented``: the EventedPLEG gate, containerd 1.7):
the cluster is restarted between the two (``--pleg`` picks one). Not a test: it prints figures and a last
lines ``pool pods summary: {...}`` (JSON, every figure) and ``k8s summary: {...}`` (the issue's keys, from the
generic PLEG's run). The cluster is left as it was found (up in generic mode, or down);
a namespace of its own, removed at the end.

The cluster is found and started as the tests do (``benchmarks/cluster.py``); since other sessions'
pods would end, the restart is refused while other sessions (test runs, benchmarks) use the cluster.
``--check`` finds the cluster and stops there.

    .venv/bin/python benchmarks/pool_pods.py [--runs 20] [--burst 20] [--sustained-runs 60] [--in-a-row 500]
        [--pleg generic|evented|both] [--check] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from cluster import check, cluster_session, other_sessions
from options import parse
from pool_demand import demand_pool, measure_demand
from sandbox_overhead import pct

from orchestrator.backends.base import LaunchSpec, PooledLaunch, Workspace
from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.backends.kubernetes.manifest import CONTAINER
from orchestrator.domain.ids import new_execution_id
from orchestrator.evidence import iter_records
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from orchestrator.profiles import ProfileRegistry
from orchestrator.service.sessions import Sessions
from scripts.testcluster.settings import PLEG_RELIST_S
from tests.support.kube import Cluster, SandboxSpace, close_space, cluster_script, open_space

TARGET_P50_S = 0.15
TARGET_P95_S = 0.30
COLD_TARGET_S = 1.1
SESSION_TARGET_S = 0.25
POLICY = "safety: {mode: allow, denylist: [], rules: []}\n"
#: the bench's profile: workspace-write at a share of a cpu (``--cpus``), so that the pods the phases hold at
#: once fit the node (a pod asks for its profile's cpu, requests = limits: the test node's 2 cpus hold two pods
#: of workspace-write's 1 cpu)
BENCH_PROFILE = "bench"
REQUEST = {"tool": "shell_exec", "argv": ["true"], "profile": BENCH_PROFILE}
SESSION_REQUEST = {"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0, "profile": BENCH_PROFILE}
PROFILES_DIR = Path(tempfile.mkdtemp(prefix="so-bench-profiles-"))


def write_bench_profile(cpus: float) -> None:
    """The bench profile, once per run (``--cpus``), where ``bench_profiles`` finds it."""
    (PROFILES_DIR / f"{BENCH_PROFILE}.yaml").write_text(
        f"description: workspace-write at {cpus} cpu (benchmarks/pool_pods.py)\n"
        f"extends: workspace-write\nlimits:\n  cpus: {cpus}\n"
    )


def bench_profiles() -> ProfileRegistry:
    return ProfileRegistry([PROFILES_DIR])


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
        profiles=bench_profiles(),
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


def served_twice(tmp: Path) -> int:
    starts: Counter[str] = Counter()
    for evidence in tmp.glob("**/*.jsonl"):
        for record in iter_records(evidence):
            if record.event == "container_started" and record.data:
                starts[str(record.data["sandbox_id"])] += 1
    return sum(1 for count in starts.values() if count > 1)


class ExecBaseline:
    """``true`` exec'd into an already-running pod of the same manifest (its init waiting: nothing else runs
    there) through the API server: what a caller without the gate, the evidence or a fresh pod pays."""

    def __init__(self, space: SandboxSpace, workspace: Path) -> None:
        self.backend = KubernetesBackend(space.settings())
        self.namespace = space.namespace
        profile = bench_profiles().resolve(BENCH_PROFILE)
        self.spec = LaunchSpec(
            execution_id=new_execution_id(),
            argv=("true",),
            profile=profile,
            workspace=Workspace(str(workspace)),
            workdir=profile.workspace.container_path,
            env={},
            owner="",
            deadline_unix=time.time() + 3600,
            kind=PooledLaunch(),
        )
        self.name = ""
        self.closed = False

    async def start(self) -> None:
        handle = await self.backend.create(self.spec)
        await self.backend.start(handle)
        self.name = handle.name
        self.handle = handle

    async def run(self) -> float:
        kube = await self.backend._client()  # its own client, as its relays use it
        began = time.perf_counter()
        code, _ = await asyncio.to_thread(kube.exec_in, self.namespace, self.name, CONTAINER, ["true"])
        elapsed = time.perf_counter() - began
        assert code == 0, code
        return elapsed

    async def close(self) -> None:
        """Its pod and its backend, once (called again: nothing)."""
        if self.closed:
            return
        self.closed = True
        if self.name:
            await self.backend.destroy(self.handle)
        await self.backend.close()


async def pooled_vs_cold(space: SandboxSpace, tmp: Path, runs: int) -> dict[str, float]:
    tmp.mkdir(parents=True, exist_ok=True)
    workspace = space.workspace("bench")
    pooled_o = orchestrator(space, tmp, workspace, "pooled", "{enabled: true, per_key: 1, ttl_s: 600}")
    cold_o = orchestrator(space, tmp, workspace, "cold", "{enabled: false}")
    baseline = ExecBaseline(space, workspace)
    sides: dict[str, list[float]] = {"pooled": [], "exec": [], "cold": []}
    to_exec: list[float] = []
    to_cold: list[float] = []
    phases = random.Random(11)  # the same pauses on every run of the benchmark
    try:
        await baseline.start()
        assert pooled_o.prestart(REQUEST, workspace=workspace)
        await timed_run(cold_o, workspace)  # warm: the watch, the lease
        await baseline.run()
        for index in range(runs):
            await until_ready(pooled_o)
            order = ["pooled", "exec", "cold"]
            order = order[index % 3 :] + order[: index % 3]
            figures: dict[str, float] = {}
            for side in order:
                await asyncio.sleep(phases.uniform(0.0, PLEG_RELIST_S))  # untimed: any phase of the relist
                if side == "exec":
                    figures[side] = await baseline.run()
                else:
                    figures[side], _ = await timed_run(pooled_o if side == "pooled" else cold_o, workspace)
            for side, value in figures.items():
                sides[side].append(value)
            to_exec.append(figures["pooled"] / figures["exec"])
            to_cold.append(figures["pooled"] / figures["cold"])
        assert pooled_o.pool is not None
        taken = len(pooled_o.pool.served)
        await baseline.close()  # its cpu, for the sessions' pods (the node holds 4 at 0.5 cpu)
        opens, cold_opens, opens_pooled = await session_opens(pooled_o, cold_o, workspace, min(runs, 10), phases)
        await pooled_o.settle()
        await cold_o.settle()
    finally:
        await baseline.close()
        await pooled_o.aclose()
        await cold_o.aclose()
    pooled, cold = sides["pooled"], sides["cold"]
    print(
        f"pooled pod vs exec into a running pod vs cold pod, `true`, {runs} interleaved rounds ({taken} from the pool)"
    )
    print(line("pooled execute() (A)", pooled))
    print(line("exec into a running pod (E)", sides["exec"]))
    print(line("cold execute() (B)", cold))
    print(line(f"open a session of cat from the pool ({opens_pooled} pooled)", opens))
    print(line("open a session of cat, cold", cold_opens))
    met = pct(pooled, 0.5) <= TARGET_P50_S and pct(pooled, 0.95) <= TARGET_P95_S
    print(
        f"    median ratio A/E {statistics.median(to_exec):.2f}, A/B {statistics.median(to_cold):.2f}; A p50/p95"
        f" {pct(pooled, 0.5):.3f}/{pct(pooled, 0.95):.3f} s (target <= {TARGET_P50_S}/{TARGET_P95_S} s:"
        f" {'met' if met else 'NOT met'}); B p50 {pct(cold, 0.5):.3f} s (target <= {COLD_TARGET_S} s:"
        f" {'met' if pct(cold, 0.5) <= COLD_TARGET_S else 'NOT met'}); session open p50 {pct(opens, 0.5):.3f} s"
        f" from the pool (target <= {SESSION_TARGET_S} s:"
        f" {'met' if pct(opens, 0.5) <= SESSION_TARGET_S else 'NOT met'}), cold {pct(cold_opens, 0.5):.3f} s"
    )
    return {
        "pooled pod p50 s": round(pct(pooled, 0.5), 3),
        "pooled pod p95 s": round(pct(pooled, 0.95), 3),
        "exec p50 s": round(pct(sides["exec"], 0.5), 3),
        "cold pod p50 s": round(pct(cold, 0.5), 3),
        "pooled/exec": round(statistics.median(to_exec), 3),
        "pooled/cold pod": round(statistics.median(to_cold), 3),
        "session open p50 s": round(pct(opens, 0.5), 3),
        "session open p95 s": round(pct(opens, 0.95), 3),
        "cold session open p50 s": round(pct(cold_opens, 0.5), 3),
        "sessions from the pool": opens_pooled,
        "pods from the pool": taken,
    }


async def session_opens(
    pooled_o: Orchestrator, cold_o: Orchestrator, workspace: Path, rounds: int, phases: random.Random
) -> tuple[list[float], list[float], int]:
    """Opening a session of cat from the pool and cold, interleaved: the seconds of each, and how many of the
    pool's opens did take a pre-started pod (its first open, a miss, fills the session's key: untimed)."""
    assert pooled_o.pool is not None
    pool = pooled_o.pool
    from_pool, cold = Sessions(pooled_o), Sessions(cold_o)
    times: dict[str, list[float]] = {"pooled": [], "cold": []}
    served = 0

    async def open_close(sessions: Sessions) -> float:
        began = time.perf_counter()
        reply = await sessions.open(SESSION_REQUEST, workspace=workspace)
        elapsed = time.perf_counter() - began
        assert reply.running, reply
        await sessions.close(reply.session_id, tenant="default", subject="anonymous")
        return elapsed

    try:
        await open_close(from_pool)  # a miss: the session's key is wanted from now on
        for index in range(rounds):
            for side in ("pooled", "cold") if index % 2 == 0 else ("cold", "pooled"):
                if side == "pooled":
                    deadline = time.monotonic() + 120
                    # every key full (a session's key is the one-shot's unless the profile gives sessions a
                    # lifetime of their own)
                    while (d := pool.describe())["ready"] < max(1, d["target"]):
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"the session's key did not fill: {pool.describe()}")
                        await asyncio.sleep(0.02)
                    before = len(pool.served)
                await asyncio.sleep(phases.uniform(0.0, PLEG_RELIST_S))
                times[side].append(await open_close(from_pool if side == "pooled" else cold))
                if side == "pooled":
                    served += len(pool.served) - before
    finally:
        await from_pool.aclose()
        await cold.aclose()
    return times["pooled"], times["cold"], served


async def in_a_row(space: SandboxSpace, tmp: Path, runs: int) -> dict[str, float]:
    """``runs`` pooled runs of `true` one after the other, each taking a pod of the key's pool (the next one
    waits until the refill is ready): what is left and what was served twice is counted once it closed."""
    tmp.mkdir(parents=True, exist_ok=True)
    workspace = space.workspace("bench-row")
    o = orchestrator(space, tmp, workspace, "row", "{enabled: true, min_ready: 1, max_ready: 2, ttl_s: 600}")
    times: list[float] = []
    try:
        assert o.prestart(REQUEST, workspace=workspace) and o.pool is not None
        for _ in range(runs):
            await until_ready(o)
            elapsed, _ = await timed_run(o, workspace)
            times.append(elapsed)
        taken = len(o.pool.served)
        await o.settle()
    finally:
        await o.aclose()
    print(f"{runs} pooled runs in a row ({taken} from the pool)")
    print(line("pooled execute()", times))
    return {"in a row": runs, "in a row from the pool": taken, "in a row p50 s": round(pct(times, 0.5), 3)}


async def pods_left(space: SandboxSpace) -> int:
    """The bench's pods still listed in its namespace (every orchestrator closed: none should be)."""
    backend = KubernetesBackend(space.settings())
    try:
        return len(await backend.list_managed())
    finally:
        await backend.close()


async def demand(space: SandboxSpace, tmp: Path, size: int, runs: int) -> dict[str, float]:
    tmp.mkdir(parents=True, exist_ok=True)
    workspace = space.workspace("bench-demand")
    pooled = orchestrator(space, tmp, workspace, "demand-pooled", demand_pool(size))
    cold = orchestrator(space, tmp, workspace, "demand-cold", "{enabled: false}")
    print(f"sized by demand: bursts of {size} pods, {runs} runs at {size} at a time")
    try:
        return await measure_demand(pooled, cold, workspace, REQUEST, size=size, runs=runs, fill_timeout_s=300)
    finally:
        await pooled.aclose()
        await cold.aclose()


def with_pleg(pleg: str) -> None:
    """The test cluster up with the kubelet's PLEG ``pleg`` (restarted when it ran the other one)."""
    os.environ["SANDBOX_K8S_PLEG"] = pleg
    up = cluster_script("up")
    if up.returncode != 0:
        raise SystemExit(f"the test cluster did not start ({pleg}): {up.stderr[-2000:]}")


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument(
        "--cpus", type=float, default=0.5, help="the bench profile's cpu (the node must hold the phases' pods)"
    )
    parser.add_argument("--sustained-runs", type=int, default=60)
    parser.add_argument("--in-a-row", type=int, default=0, help="then this many pooled runs one after the other")
    parser.add_argument("--pleg", choices=["generic", "evented", "both"], default="both")
    parser.add_argument(
        "--check",
        action="store_true",
        help="find the cluster (started if down, never restarted) and who else uses it, measure nothing",
    )
    args = parse(parser, {"runs": 2, "burst": 2, "sustained_runs": 4})
    was_up = cluster_script("status").returncode == 0
    with cluster_session() as cl:  # as the tests find it: scripts/k8s-cluster.sh, started if down
        if args.check:
            figures = check(cl)
            if args.pleg != "generic" and figures["other sessions"]:
                print(f"--pleg {args.pleg} restarts the cluster: it would refuse while those sessions run")
            return 0
        if args.pleg != "generic" and (others := other_sessions(cl)):
            raise SystemExit(
                f"--pleg {args.pleg} restarts the test cluster, which other sessions use now (pids {others}: "
                "test runs, benchmarks): their pods would end. Run it when they are done, or with --pleg generic."
            )
        write_bench_profile(args.cpus)
        return await measure(args, cl, was_up)


async def measure(args: argparse.Namespace, cl: Cluster, was_up: bool) -> int:
    summary: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="so-bench-pool-pods-"))
    try:
        for pleg in ("generic", "evented") if args.pleg == "both" else (args.pleg,):
            print(f"the kubelet's PLEG: {pleg}")
            with_pleg(pleg)
            space = open_space(cl, "so-bench")
            try:
                figures = await pooled_vs_cold(space, tmp / pleg, args.runs)
                figures.update(await demand(space, tmp / pleg, args.burst, args.sustained_runs))
                if args.in_a_row:
                    figures.update(await in_a_row(space, tmp / pleg, args.in_a_row))
                figures["pods left"] = await pods_left(space)
                print(f"    pods left once closed: {figures['pods left']}")
            finally:
                close_space(space)
            summary.update({f"{name} ({pleg} PLEG)": value for name, value in figures.items()})
        summary["pods served twice"] = served_twice(tmp)
        print(f"    pods served twice (engine records): {summary['pods served twice']}")
    finally:
        os.environ["SANDBOX_K8S_PLEG"] = "generic"
        if args.pleg != "generic":  # as it was found: the tests' mode, or down
            cluster_script("down")
            if was_up:
                cluster_script("up")
    print("pool pods summary: " + json.dumps(summary))
    pleg = "generic" if args.pleg != "evented" else "evented"
    print("k8s summary: " + json.dumps(issue_keys(summary, pleg, args.cpus)))
    return 0


#: the issue's summary keys, from this run's figures (the PLEG given: the stock kubelet's generic one)
ISSUE_KEYS = {
    "pooled_p50_s": "pooled pod p50 s",
    "pooled_p95_s": "pooled pod p95 s",
    "exec_p50_s": "exec p50 s",
    "cold_p50_s": "cold pod p50 s",
    "session_open_p50_s": "session open p50 s",
    "pods_left": "pods left",
}


def issue_keys(summary: dict[str, float], pleg: str, cpus: float) -> dict[str, float | None]:
    keys: dict[str, float | None] = {key: summary.get(f"{name} ({pleg} PLEG)") for key, name in ISSUE_KEYS.items()}
    slowest_ms = summary.get(f"burst slowest ms ({pleg} PLEG)")
    keys["burst20_all_s"] = None if slowest_ms is None else round(slowest_ms / 1000, 3)
    keys["sustained_vs_cold"] = summary.get(f"sustained pooled/cold ({pleg} PLEG)")
    keys["cold_concurrent_per_s"] = summary.get(f"sustained cold per s ({pleg} PLEG)")
    keys["served_twice"] = summary.get("pods served twice")
    # what the node could hold: burst20_all_s is the slowest of a burst of this many (--burst), at --cpus each
    keys["burst_size"] = summary.get(f"burst pool grown to ({pleg} PLEG)")
    keys["bench_profile_cpus"] = cpus
    return keys


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
