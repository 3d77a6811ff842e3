"""What recording a run's usage costs the run, and what the profiles' answers cost read from the store.

* **recording** — per run that ends, the work issue 25 added after its end record is built: the ``RunUsage``
  built from that record (``evidence.usage.usage_from_end``), its observation in the service's metrics
  (``ServiceMetrics.run_measured``) and its row in the store (``StateStore.put_usage``, on the store's own
  thread: the run does not wait for it, but the loop pays for the hand-off), against building the end record
  itself (whose end cause and limits are a few µs of it). Compare it with a run's own time (``make
  bench-sandbox``: ``execute()`` of ``true`` takes about 250 ms here).
* **from the store** — ``profiles usage`` and ``recommend`` as the service answers them: 100,000 rows of one
  profile read from SQLite (``StateStore.usage``), then the pure answer. Target (issue 25): ≤ 1 s each.

Not a test: it prints p50/p95 and ratios, and a last line ``usage recording summary: {...}`` (JSON).

    .venv/bin/python benchmarks/usage_recording.py [--runs N] [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from options import parse

from orchestrator.api.metrics import ServiceMetrics
from orchestrator.backends.base import ResourceUsage
from orchestrator.domain.usage import EndCause, RunUsage
from orchestrator.evidence.usage import RunContext, usage_from_end
from orchestrator.pipeline.end_record import finished_fields, run_limits
from orchestrator.pipeline.executor import KeptOutput, RunOutcome
from orchestrator.profiles import ProfileRegistry
from orchestrator.profiles.recommend import recommend
from orchestrator.profiles.usage_report import usage_report
from orchestrator.state import usage_table
from orchestrator.state.store import StateStore

TARGET_S = 1.0
MIB = 2**20


def outcome(rng: random.Random) -> RunOutcome:
    usage = ResourceUsage(rng.randint(4, 400) * MIB, rng.randint(10**7, 10**10), rng.randint(1, 40), 0, "cgroup")
    return RunOutcome(
        exit_code=0, stdout=b"ok\n", stderr=b"", stdout_kept=KeptOutput(b"ok\n", 3, False, 0),
        stderr_kept=KeptOutput(b"", 0, False, 0), timed_out=False, oom_killed=False, duration_ms=rng.randint(50, 5000),
        state=None, side_effects=None, side_effects_error=None, write_budget=None, usage=usage, lifecycle="complete",
        error=None,
    )  # fmt: skip


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def recording(rounds: int) -> dict[str, float]:
    """Per end: the end record without usage (as before issue 25) vs with it, then handed to metrics and store."""
    rng = random.Random(25)
    profile = ProfileRegistry().resolve("workspace-write")
    context = RunContext("workspace-write", "t", "shell_exec", None)
    metrics = ServiceMetrics()
    folder = Path(tempfile.mkdtemp(prefix="usage-bench-"))
    store = StateStore(folder / "state.db")
    before: list[float] = []
    after: list[float] = []
    try:
        for i in range(rounds):
            run = outcome(rng)
            t0 = time.perf_counter()
            finished_fields(run, profile, None)  # the end record (its end cause and limits: a few µs of it)
            t1 = time.perf_counter()
            fields = finished_fields(run, profile, None)
            usage = usage_from_end(f"ex-{i}", context, fields["data"], ended_at=time.time())
            assert usage is not None
            metrics.run_measured(usage)
            put = asyncio.ensure_future(store.put_usage(usage))  # the run goes on: the store's thread writes it
            t2 = time.perf_counter()
            await put
            before.append(t1 - t0)
            after.append(t2 - t1)
    finally:
        await store.close()
    added = [b - a for a, b in zip(before, after, strict=True)]
    return {
        "end record p50 us": round(pct(before, 0.5) * 1e6, 1),
        "end record + usage p50 us": round(pct(after, 0.5) * 1e6, 1),
        "added p50 us": round(statistics.median(added) * 1e6, 1),
        "added p95 us": round(pct(added, 0.95) * 1e6, 1),
    }


def history(n: int) -> list[RunUsage]:
    rng = random.Random(7)
    limits = run_limits(ProfileRegistry().resolve("ci"))
    return [
        RunUsage(
            f"ex-{i:06}",
            "ci",
            1_700_000_000.0 + i,
            EndCause.OOM if rng.random() < 0.01 else EndCause.OK,
            limits,
            rng.random() * 2,
            rng.randint(4, 900) * MIB,
            rng.randint(1, 60),
            rng.random() * 120,
            rng.randint(0, 10**6),
            0,
            rng.randint(0, 10**8),
            rng.randint(0, 1000),
            "cgroup",
            f"t{i % 3}",
            "shell_exec",
            None,
        )
        for i in range(n)
    ]


async def from_store(n: int, rounds: int) -> dict[str, list[float]]:
    folder = Path(tempfile.mkdtemp(prefix="usage-bench-"))
    store = StateStore(folder / "state.db")
    rows = [usage_table.row_of(run) for run in history(n)]
    db = store._db  # filled in one transaction on its thread: the benchmark's setup, not what is measured

    def fill() -> None:
        db.execute("BEGIN")
        db.executemany(usage_table.INSERT, rows)
        db.execute("COMMIT")

    await store._call(fill)
    limits = run_limits(ProfileRegistry().resolve("ci"))
    times: dict[str, list[float]] = {"read": [], "usage (read + report)": [], "recommend (read + rules)": []}
    try:
        for _ in range(rounds):
            t0 = time.perf_counter()
            runs = await store.usage(profile="ci")
            t1 = time.perf_counter()
            usage_report(runs, profile="ci", limits=limits, since=None, until=2e9, group_by=None)
            t2 = time.perf_counter()
            runs = await store.usage(profile="ci")
            recommend(runs, profile="ci", current=limits)
            t3 = time.perf_counter()
            times["read"].append(t1 - t0)
            times["usage (read + report)"].append(t2 - t0)
            times["recommend (read + rules)"].append(t3 - t2)
    finally:
        await store.close()
    return times


async def main(n: int, rounds: int, ends: int) -> None:
    load = os.getloadavg()[0]
    print(f"usage recording: {ends} run ends, interleaved (load average {load:.1f} on {os.cpu_count()} CPUs)")
    recorded = await recording(ends)
    for name, value in recorded.items():
        print(f"  {name:<28} {value:10.1f}")
    print(f"from the store: {n:,} rows of one profile, {rounds} rounds")
    times = await from_store(n, rounds)
    met = {}
    for name, samples in times.items():
        p50, p95 = pct(samples, 0.5), pct(samples, 0.95)
        print(f"  {name:<28} p50 {p50:6.3f} s  p95 {p95:6.3f} s  p95/target {p95 / TARGET_S:5.2f}")
        if name != "read":
            met[name] = p95 <= TARGET_S
    summary = {**recorded, **{f"{k} p95 s": round(pct(v, 0.95), 3) for k, v in times.items()}}
    summary |= {"rows": n, "load": round(load, 1), "targets met": met}
    print(f"usage recording summary: {json.dumps(summary)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000, help="rows in the store")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ends", type=int, default=2_000, help="run ends recorded")
    options = parse(parser, {"runs": 2_000, "rounds": 2, "ends": 50})
    asyncio.run(main(options.runs, options.rounds, options.ends))
