"""Profile usage analysis: ``usage_report``, ``recommend`` and ``whatif`` over a synthetic history of a profile's
runs (the rows built once, before timing: reading them is the store's part), against the floor of the same
work: each measure read from every row and sorted once, nothing else.

Everything interleaved, round by round, in one run (the machine is noisy). The history: memory peaks, cores,
wall times, pids and output drawn from skewed distributions, about 1 % OOM kills and timeouts, 5 % of runs with
their measures unknown, three tenants. Target: usage_report and recommend <= 1 s each at 100,000 runs. Not a
test: it prints figures, and a last line ``profile usage summary: {...}`` (JSON).

    .venv/bin/python benchmarks/profile_usage.py [--runs N] [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import time
from collections.abc import Callable

from options import parse

from orchestrator.domain.usage import MEASURES, EndCause, RunLimits, RunUsage
from orchestrator.profiles.recommend import recommend
from orchestrator.profiles.usage_report import usage_report
from orchestrator.profiles.whatif import NodeSize, whatif

TARGET_S = 1.0
FLOOR = "floor: read + sort each measure"
MIB = 1024 * 1024
LIMITS = RunLimits(
    cpus=2.0,
    memory_bytes=2048 * MIB,
    pids=512,
    wall_timeout_s=1800.0,
    stdout_max_bytes=8 * MIB,
    stderr_max_bytes=8 * MIB,
    workspace_write_bytes=8192 * MIB,
    workspace_write_files=500_000,
)


def history(n: int, seed: int = 25) -> list[RunUsage]:
    rng = random.Random(seed)
    runs = []
    for i in range(n):
        known = rng.random() > 0.05
        wall = min(rng.lognormvariate(4.0, 1.0), 1800.0)
        memory = min(int(rng.lognormvariate(19.5, 0.8)), LIMITS.memory_bytes)
        roll = rng.random()
        cause = EndCause.OOM if roll < 0.01 else EndCause.WALL_TIMEOUT if roll < 0.02 else EndCause.OK
        runs.append(
            RunUsage(
                execution_id=f"ex-{i:06}",
                profile="ci",
                ended_at=1_700_000_000.0 + i,
                cause=cause,
                limits=LIMITS,
                cpu_seconds=wall * rng.uniform(0.05, 1.9) if known else None,
                memory_peak_bytes=memory if known else None,
                pids_peak=rng.randint(3, 200) if known else None,
                wall_seconds=1800.0 if cause is EndCause.WALL_TIMEOUT else wall,
                stdout_bytes=int(rng.expovariate(1 / 20_000)),
                stderr_bytes=int(rng.expovariate(1 / 2_000)),
                workspace_bytes_written=int(rng.expovariate(1 / 50e6)) if known else None,
                workspace_files_written=rng.randint(0, 5_000) if known else None,
                source="cgroup" if known else None,
                tenant=f"team-{i % 3}",
                tool="exec",
            )
        )
    return runs


def floor(runs: list[RunUsage]) -> None:
    """Each measure read from every row and sorted: what any answer over them does at least."""
    for measure in MEASURES:
        sorted(v for v in map(measure.value, runs) if v is not None)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(n: int, rounds: int) -> None:
    runs = history(n)
    node = NodeSize(cpus=16, memory_bytes=64 * 1024 * MIB)
    sides: dict[str, Callable[[], object]] = {
        "usage_report": lambda: usage_report(runs, profile="ci", limits=LIMITS, since=None, until=2e9, group_by=None),
        "usage_report by tenant": lambda: usage_report(
            runs, profile="ci", limits=LIMITS, since=None, until=2e9, group_by="tenant"
        ),
        "recommend": lambda: recommend(runs, profile="ci", current=LIMITS),
        "whatif (memory, cpus, wall)": lambda: whatif(
            runs,
            profile="ci",
            current=LIMITS,
            proposed={"memory": "1g", "cpus": "1", "wall_timeout_s": "900"},
            node=node,
        ),
        FLOOR: lambda: floor(runs),
    }
    wall: dict[str, list[float]] = {name: [] for name in sides}
    cpu: dict[str, list[float]] = {name: [] for name in sides}
    for call in sides.values():  # warm-up
        call()
    gc.collect()
    gc.disable()
    try:
        for _ in range(rounds):
            for name, call in sides.items():
                t0, c0 = time.perf_counter(), time.process_time()
                call()
                wall[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
    finally:
        gc.enable()

    load = os.getloadavg()[0]
    print(f"profile usage analysis over {n:,} runs, {rounds} rounds, interleaved")
    print(f"load average {load:.1f} on {os.cpu_count()} CPUs")
    print("wall: what a caller waits; CPU: this process's own time (what the work costs, whatever else runs)")
    print(f"{'side':<34} {'wall p50':>9} {'wall p95':>9} {'CPU p50':>9} {'CPU p95':>9} {'CPU x floor':>12}")
    floor_p50 = pct(cpu[FLOOR], 0.5)
    for name in sides:
        w, c = wall[name], cpu[name]
        print(
            f"{name:<34} {pct(w, 0.5):9.3f} {pct(w, 0.95):9.3f} {pct(c, 0.5):9.3f} {pct(c, 0.95):9.3f} "
            f"{pct(c, 0.5) / floor_p50:12.2f}"
        )
    met = {}
    for name in ("usage_report", "recommend"):
        for label, samples in (("wall", wall[name]), ("CPU", cpu[name])):
            p95 = pct(samples, 0.95)
            met[f"{name} {label}"] = p95 <= TARGET_S
            verdict = "met" if p95 <= TARGET_S else "NOT met"
            print(f"target {name} {label} p95 <= {TARGET_S:.1f} s: {verdict} ({p95:.3f} s)")
    rec = recommend(runs, profile="ci", current=LIMITS)
    print("recommended:", ", ".join(f"{r.key} {r.recommended} ({r.rule}, {r.confidence})" for r in rec.resources))
    summary: dict[str, object] = {
        f"{name} {label} {q} s": round(pct(samples, 0.5 if q == "p50" else 0.95), 4)
        for name in sides
        for label, samples in (("wall", wall[name]), ("CPU", cpu[name]))
        for q in ("p50", "p95")
    }
    summary |= {"runs": n, "rounds": rounds, "load": round(load, 1), "targets met": met}
    print(f"profile usage summary: {json.dumps(summary)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    options = parse(parser, {"runs": 2_000, "rounds": 2})
    main(options.runs, options.rounds)
