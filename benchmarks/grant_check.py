"""Grant bookkeeping: what covering a run with a grant costs — one reserve (match the conditions, reserve
within the budgets, one transaction) and one settle (charge, free, ledger row, one transaction) on the
service's state store — against the floor of the same path: a bare SQLite UPDATE on a store configured
alike (WAL, synchronous=NORMAL), sent twice through a one-thread executor as the store sends its calls.

Both sides interleaved, round by round, in one run (the machine is noisy). The tenant holds five grants:
three whose conditions do not match, one revoked, and the one that covers (all five are looked at).
Target: reserve + settle p95 <= 1 ms. Not a test: it prints figures, and a last line
``grant summary: {...}`` (JSON).

    .venv/bin/python benchmarks/grant_check.py [--rounds N] [--concurrent N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sqlite3
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from options import parse

from orchestrator.budgets.book import GrantBook, RunCaps
from orchestrator.domain.grants import GrantRequest, Usage
from orchestrator.domain.requests import parse_request
from orchestrator.gate.matching import RequestFacts
from orchestrator.gate.sanitize import sanitize
from orchestrator.state.store import StateStore

TARGET_P95_MS = 1.0
CAPS = RunCaps.of(timeout_s=300, cpus=1, stdout_max_bytes=1 << 20, stderr_max_bytes=1 << 20)


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def facts() -> RequestFacts:
    raw = {"tool": "shell_command", "command": "pytest -q tests/unit", "tenant": "team-a", "subject": "ci-7"}
    request = parse_request(raw)
    sanitized, analysis = sanitize(request)
    return RequestFacts(sanitized, analysis, "ci")


async def grants(book: GrantBook) -> None:
    def request(**fields: object) -> GrantRequest:
        return GrantRequest.model_validate({"tenant": "team-a", "reason": "bench", "ttl_s": 86400, **fields})

    for prefix in ("make", "npm test", "cargo test"):
        await book.create(request(conditions={"argv_prefix": prefix}, budgets={"executions": 10**9}), created_by="b")
    revoked = await book.create(request(budgets={"executions": 10**9}), created_by="b")
    await book.revoke(revoked.id, by="b", reason="bench")
    await book.create(
        request(
            conditions={"tool": ["exec"], "argv_prefix": "pytest", "subject": ["ci-*"], "profile": ["ci"]},
            budgets={"executions": 10**9, "cpu_seconds": 1e8, "output_bytes": 1 << 50, "wall_seconds": 1e8},
        ),
        created_by="b",
    )


class BareUpdate:
    """The floor: one autocommit UPDATE per call, on a one-thread executor, in a store file of its own."""

    def __init__(self, path: Path) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
        self.db.execute("INSERT INTO t VALUES (1, 0)")

    def _update(self) -> None:
        self.db.execute("UPDATE t SET n = n + 1 WHERE id = 1 AND n < 1000000000")

    async def round(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self.pool, self._update)
        await loop.run_in_executor(self.pool, self._update)

    def close(self) -> None:
        self.pool.shutdown()
        self.db.close()


async def main(rounds: int, concurrent: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = StateStore(Path(tmp) / "service.db")
        book = GrantBook(store)
        bare = BareUpdate(Path(tmp) / "bare.db")
        what = facts()
        await grants(book)
        used = Usage(executions=1, cpu_seconds=0.8, output_bytes=1234, wall_seconds=1.1)
        a: list[float] = []
        b: list[float] = []
        reserve_ms: list[float] = []
        for i in range(200):  # warm-up: the matcher cache, the executors, SQLite's page cache
            held = await book.reserve(tenant="team-a", facts=what, execution_id=f"warm-{i}", caps=CAPS)
            assert held is not None
            await book.settle(held, used)
            await bare.round()
        gc.collect()
        gc.disable()
        try:
            for i in range(rounds):
                t0 = time.perf_counter_ns()
                held = await book.reserve(tenant="team-a", facts=what, execution_id=f"ex-{i}", caps=CAPS)
                t1 = time.perf_counter_ns()
                assert held is not None
                await book.settle(held, used)
                t2 = time.perf_counter_ns()
                await bare.round()
                t3 = time.perf_counter_ns()
                a.append((t2 - t0) / 1e6)
                reserve_ms.append((t1 - t0) / 1e6)
                b.append((t3 - t2) / 1e6)
        finally:
            gc.enable()

        # many at once: `concurrent` runs reserve together, then settle together
        t0 = time.perf_counter()
        burst = await asyncio.gather(
            *(
                book.reserve(tenant="team-a", facts=what, execution_id=f"burst-{i}", caps=CAPS)
                for i in range(concurrent)
            )
        )
        await asyncio.gather(*(book.settle(h, used) for h in burst if h is not None))
        burst_ms = (time.perf_counter() - t0) * 1000
        view = (await book.list(["team-a"], "active"))[-1]
        bare.close()
        await store.close()

    print(f"grant bookkeeping per covered run (ms), {rounds} rounds, interleaved; the tenant holds 5 grants")
    print(f"{'side':<34} {'p50':>8} {'p95':>8} {'p99':>8}")
    for label, values in (
        ("(A) reserve + settle", a),
        ("    of which reserve", reserve_ms),
        ("(B) two bare UPDATEs (the floor)", b),
    ):
        print(f"{label:<34} {pct(values, 0.5):8.4f} {pct(values, 0.95):8.4f} {pct(values, 0.99):8.4f}")
    ratio50, ratio95 = pct(a, 0.5) / pct(b, 0.5), pct(a, 0.95) / pct(b, 0.95)
    print(f"ratio A/B: p50 {ratio50:.2f}  p95 {ratio95:.2f}")
    p95 = pct(a, 0.95)
    print(f"target p95 <= {TARGET_P95_MS:.3f} ms: {'met' if p95 <= TARGET_P95_MS else 'NOT met'} ({p95:.4f} ms)")
    print(f"{concurrent} runs reserving at once, then settling at once: {burst_ms:.1f} ms in all")
    print(f"the covering grant after: {view.used.executions} runs charged, {view.reserved.executions} reserved")
    summary = {
        "reserve+settle p50 ms": round(pct(a, 0.5), 4),
        "reserve+settle p95 ms": round(p95, 4),
        "reserve p95 ms": round(pct(reserve_ms, 0.95), 4),
        "bare 2x UPDATE p50 ms": round(pct(b, 0.5), 4),
        "bare 2x UPDATE p95 ms": round(pct(b, 0.95), 4),
        "ratio p50": round(ratio50, 2),
        "ratio p95": round(ratio95, 2),
        f"{concurrent} concurrent reserve+settle ms": round(burst_ms, 1),
        "rounds": rounds,
    }
    print(f"grant summary: {json.dumps(summary)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--concurrent", type=int, default=50)
    options = parse(parser, {"rounds": 20, "concurrent": 5})
    asyncio.run(main(options.rounds, options.concurrent))
