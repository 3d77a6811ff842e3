"""Pools sized by demand on the real engine: a burst of runs grows its key toward the demand (never past the
ceiling), the burst's return finds them ready, the surplus is retired once demand stops (never below the floor),
and the doctor says so when the service it is asked about does not answer (the service's pool in /metrics and
to ``sandboxctl doctor --url``: tests/api/test_api_pool.py)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from tests.support.evidence import records
from tests.support.orchestrators import docker_orchestrator

pytestmark = pytest.mark.integration
POLICY = "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"
SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]
REQUEST = {"tool": "shell_exec", "argv": ["true"]}
FLOOR, CEILING, SHRINK_AFTER_S, BURST = 1, 4, 5.0, 8


def pooled(tmp_path: Path, result: ExecutionResult) -> bool:
    execution = str(result.authorization.execution_id)
    begin = next(r for r in records(tmp_path / "evidence.jsonl", execution) if r.event == "execution_started")
    return "pooled" in (begin.data or {})


async def settled(o: Orchestrator, ready: int, timeout: float = 20.0) -> None:
    """Until ``ready`` wait and none is being filled."""
    assert o.pool is not None
    deadline = time.monotonic() + timeout
    while (o.pool.describe()["ready"], o.pool.describe()["filling"]) != (ready, 0):
        assert time.monotonic() < deadline, f"the pool never settled at {ready} ready: {o.pool.describe()}"
        await asyncio.sleep(0.05)


async def test_a_burst_grows_its_key_within_the_ceiling_and_the_surplus_goes_after_it(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    pool = f"{{enabled: true, min_ready: {FLOOR}, max_ready: {CEILING}, shrink_after_s: {SHRINK_AFTER_S}}}"
    config.write_text(POLICY + f"pool: {pool}\n")
    o = await docker_orchestrator(tmp_path, config)
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    try:
        assert o.pool is not None
        first = await o.execute(REQUEST, workspace=ws)  # the key's first run: cold, then its floor
        await settled(o, FLOOR)
        burst = await asyncio.gather(*(o.execute(REQUEST, workspace=ws) for _ in range(BURST)))
        hits = [pooled(tmp_path, r) for r in (first, *burst)].count(True)
        assert hits >= FLOOR  # the floor's one (a refill of it may meet a late claim); the others started cold
        # BURST at once: the key grows to its ceiling, never past it
        await settled(o, CEILING)
        assert o.pool.describe()["target"] == CEILING, "the burst was forgotten before the pool had grown"
        last_burst = time.monotonic()
        again = await asyncio.gather(*(o.execute(REQUEST, workspace=ws) for _ in range(CEILING)))
        assert all(pooled(tmp_path, r) for r in again), "the burst came back: every run found one ready"
        await settled(o, CEILING)  # refilled for the next burst, kept while it is remembered

        # no run since: once shrink_after_s passed the target falls to the floor, the surplus goes
        while o.pool.describe()["ready"] > FLOOR:
            assert time.monotonic() - last_burst < SHRINK_AFTER_S + 10, o.pool.describe()
            await asyncio.sleep(0.1)
        assert time.monotonic() - last_burst >= SHRINK_AFTER_S  # not before
        await asyncio.sleep(1.5)  # sweeps after it: the floor stays
        assert (o.pool.describe()["ready"], o.pool.describe()["target"]) == (FLOOR, FLOOR)
        [part] = o.pool.profiles()
        runs = 1 + BURST + CEILING
        assert (part.profile, part.counts.hits, part.counts.misses) == (
            "workspace-write",
            hits + CEILING,
            runs - hits - CEILING,
        )
        assert part.counts.discarded["surplus"] == CEILING - FLOOR
    finally:
        await o.aclose()
    await o.evidence.flush()
    surplus = [r for r in iter_records(tmp_path / "evidence.jsonl") if r.event == "sandbox_discarded"]
    assert [r.data["reason"] for r in surplus if r.data].count("surplus") == CEILING - FLOOR
    assert verify(tmp_path / "evidence.jsonl").ok


def test_the_doctor_fails_for_a_service_that_does_not_answer(tmp_path: Path) -> None:
    import subprocess

    config = tmp_path / "config.yaml"
    config.write_text("pool: {enabled: true}\n")
    closed = "http://127.0.0.1:9"  # discard: nothing listens
    args = ["doctor", "--config", str(config), "--no-probe", "--url", closed, "--evidence", str(tmp_path / "e.jsonl")]
    proc = subprocess.run([*SANDBOXCTL, *args], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
    line = next(line for line in proc.stdout.splitlines() if "pool now" in line)
    assert line.startswith(f"FAIL pool now: the service at {closed} did not answer: ") and "[DOCTOR.POOL]" in line
