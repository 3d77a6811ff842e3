"""Pools sized by demand (issue 24), shared by pool_launch.py (Docker) and pool_pods.py (pods on the test cluster):

* **burst** -- ``size`` runs of one key at once, once bursts of the same size grew the key's pool to that demand
  (its ready sandboxes: ``size``, or what the pool's bounds allow; untimed): each run's latency. Target: all
  answered within ``BURST_TARGET_S``.
* **sustained** -- ``runs`` runs by ``concurrency`` workers, each starting its next run as soon as its last one
  ended: the grown pool (refilling as it goes) against no pool, side by side. Target: throughput at least
  ``SUSTAINED_TARGET`` times the cold one.

Not a test: it prints figures and returns them for the caller's summary line.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from sandbox_overhead import pct

from orchestrator.pipeline.orchestrator import Orchestrator

BURST_TARGET_S = 1.5
SUSTAINED_TARGET = 2.0
#: bursts that grow the pool before the timed one (a burst's misses are its demand: one is enough when fills keep up)
GROWING_BURSTS = 3


def demand_pool(size: int) -> str:
    """The config's pool for these measurements: a key may grow to ``size`` ready (and as many running)."""
    return f"{{enabled: true, min_ready: 1, max_ready: {size}, max_total: {2 * size}, ttl_s: 600}}"


async def _run(o: Orchestrator, workspace: Path, request: dict[str, Any]) -> float:
    began = time.perf_counter()
    result = await o.execute(request, workspace=workspace)
    assert result.ok, result.to_json()
    return time.perf_counter() - began


async def _settled(o: Orchestrator, size: int, timeout_s: float) -> int:
    """Until ``size`` are ready or no fill is under way any more (or ``timeout_s``): how many are ready."""
    assert o.pool is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = o.pool.describe()
        if state["ready"] >= size or not state["filling"]:
            break
        await asyncio.sleep(0.05)
    return int(o.pool.describe()["ready"])


async def burst(o: Orchestrator, workspace: Path, request: dict[str, Any], size: int) -> tuple[list[float], int]:
    """``size`` runs at once: each one's latency, and how many took a pre-started sandbox."""
    served = len(o.pool.served) if o.pool is not None else 0
    latencies = await asyncio.gather(*(_run(o, workspace, request) for _ in range(size)))
    return list(latencies), (len(o.pool.served) if o.pool is not None else 0) - served


async def grow(o: Orchestrator, workspace: Path, request: dict[str, Any], size: int, fill_timeout_s: float) -> int:
    """Bursts of ``size`` (untimed) until the key's pool holds ``size`` ready: how many it holds."""
    ready = 0
    for _ in range(GROWING_BURSTS):
        await burst(o, workspace, request, size)
        ready = await _settled(o, size, fill_timeout_s)
        if ready >= size:
            break
    return ready


async def sustained(
    o: Orchestrator, workspace: Path, request: dict[str, Any], runs: int, concurrency: int
) -> tuple[float, int]:
    """``runs`` runs by ``concurrency`` workers back to back: (wall seconds, runs from the pool)."""
    served = len(o.pool.served) if o.pool is not None else 0
    left = iter(range(runs))

    async def worker() -> None:
        for _ in left:
            await _run(o, workspace, request)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - began, (len(o.pool.served) if o.pool is not None else 0) - served


async def measure_demand(
    pooled: Orchestrator,
    cold: Orchestrator,
    workspace: Path,
    request: dict[str, Any],
    *,
    size: int,
    runs: int,
    fill_timeout_s: float,
) -> dict[str, float]:
    """The burst on a grown pool, then the sustained runs pooled and cold (``pooled``'s config: ``demand_pool``)."""
    grown = await grow(pooled, workspace, request, size, fill_timeout_s)
    latencies, taken = await burst(pooled, workspace, request, size)
    slowest = max(latencies)
    met = "met" if slowest <= BURST_TARGET_S else "NOT met"
    print(f"  burst of {size} at once, the key's pool grown to {grown} ready: {taken} from the pool")
    print(f"    p50 {pct(latencies, 0.5) * 1000:.0f} ms, slowest {slowest * 1000:.0f} ms (target: all within"
          f" {BURST_TARGET_S} s: {met})")  # fmt: skip
    await _settled(pooled, size, fill_timeout_s)
    await _run(cold, workspace, request)  # untimed: its engine connection made
    wall, from_pool = await sustained(pooled, workspace, request, runs, size)
    cold_wall, _ = await sustained(cold, workspace, request, runs, size)
    rate, cold_rate = runs / wall, runs / cold_wall
    ratio = rate / cold_rate
    met = "met" if ratio >= SUSTAINED_TARGET else "NOT met"
    print(f"  {runs} runs, {size} at a time: pooled {rate:.2f}/s ({from_pool} from the pool) vs cold {cold_rate:.2f}/s:"
          f" {ratio:.2f}x (target >= {SUSTAINED_TARGET}x: {met})")  # fmt: skip
    return {
        "burst pool grown to": grown,
        "burst from pool": taken,
        "burst p50 ms": round(pct(latencies, 0.5) * 1000),
        "burst slowest ms": round(slowest * 1000),
        "sustained pooled per s": round(rate, 2),
        "sustained cold per s": round(cold_rate, 2),
        "sustained pooled/cold": round(ratio, 2),
        "sustained from pool": from_pool,
    }
