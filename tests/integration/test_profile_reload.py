"""A profile changed while the orchestrator runs (issue 25, item 5), on the real engine: a run in flight keeps what it
started with (its memory limit as seen from inside, and its wall timeout: it outlives the new one), the next run gets
the changed profile, the pre-started sandbox of the old one is destroyed and none is filled again, and the change is
on the record before the first run that has it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.docker import DockerBackend
from orchestrator.evidence import EvidenceRecord, iter_records, verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles.paths import builtin_dir
from orchestrator.profiles.source import ProfileSource
from tests.support.engine import answering_or_skip

pytestmark = pytest.mark.integration
POLICY = "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"
POOL = "pool: {enabled: true, min_ready: 1, max_ready: 1, ttl_s: 60}\n"
OLD = "description: live\nextends: workspace-write\nlimits: {memory: 256m, wall_timeout_s: 30}\n"
NEW = "description: live, smaller\nextends: workspace-write\nlimits: {memory: 128m, wall_timeout_s: 1}\n"
MEMORY = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
MIB = 1024 * 1024


def workspace(root: Path, name: str) -> Path:
    ws = root / name
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    return ws


def request(command: str) -> dict[str, Any]:
    return {"tool": "shell_command", "command": command, "profile": "live"}


async def until(what: str, predicate: Any, timeout: float = 30.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)
    assert predicate(), what


def evidence(tmp_path: Path, event: str | None = None) -> list[EvidenceRecord]:
    return list(iter_records(tmp_path / "evidence.jsonl", event=event))


def begin(tmp_path: Path, execution_id: str) -> EvidenceRecord:
    return next(r for r in evidence(tmp_path, "execution_started") if r.execution_id == execution_id)


async def test_a_run_in_flight_keeps_its_profile_and_the_next_run_gets_the_changed_one(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    live = profiles / "live.yaml"
    live.write_text(OLD)
    config = tmp_path / "config.yaml"
    config.write_text(POLICY + POOL)
    backend = DockerBackend()
    await answering_or_skip(backend, "container engine")
    orch: Orchestrator = build_orchestrator(
        config,
        evidence_path=tmp_path / "evidence.jsonl",
        backend=backend,
        profiles=ProfileSource([builtin_dir(), profiles], check_every_s=0),
    )
    try:
        pool = orch.pool
        assert pool is not None
        running, pooled = workspace(tmp_path, "running"), workspace(tmp_path, "pooled")
        assert orch.prestart(request("true"), workspace=pooled)
        await until("a sandbox of the old profile ready", lambda: pool.describe()["ready"] == 1)

        in_flight = asyncio.create_task(orch.execute(request(f"{MEMORY}; sleep 3; {MEMORY}"), workspace=running))
        await until("the run in flight began", lambda: evidence(tmp_path, "execution_started") != [])
        live.write_text(NEW)
        after = await orch.execute(request(f"{MEMORY}; sleep 3"), workspace=pooled)
        before = await in_flight
        await orch.settle()

        # the run in flight: its memory limit from start to end, and its 30 s timeout (not the new 1 s)
        out = before.to_json()
        assert (out["exit_code"], out["timed_out"], out["stdout"]) == (0, False, f"{256 * MIB}\n{256 * MIB}\n"), out
        assert out["duration_ms"] >= 3000
        # the next run: the changed profile (killed at its new 1 s deadline)
        out = after.to_json()
        assert (out["timed_out"], out["error"]["code"], out["stdout"]) == (True, "SANDBOX.TIMEOUT", f"{128 * MIB}\n")
        old_hash = begin(tmp_path, str(before.authorization.execution_id)).profile_hash
        new_hash = begin(tmp_path, str(after.authorization.execution_id)).profile_hash
        assert old_hash != new_hash

        # the change on the record, before the first run that has it
        [changed] = evidence(tmp_path, "profile_changed")
        assert changed.data is not None
        assert (changed.data["profile"], changed.data["old_profile_hash"], changed.data["new_profile_hash"]) == (
            "live",
            old_hash,
            new_hash,
        )
        assert changed.data["files"] == [{"path": str(live), "owner_uid": os.getuid()}]
        assert changed.seq < begin(tmp_path, str(after.authorization.execution_id)).seq

        # the pool: the old profile's ready sandbox destroyed, its key never filled again (the run in flight ended
        # after the change and asked for its key), the new profile's key filled after its run
        await until("the new key filled", lambda: pool.describe()["ready"] == 1 and pool.describe()["filling"] == 0)
        discarded = evidence(tmp_path, "sandbox_discarded")
        assert [(r.profile_hash, (r.data or {}).get("reason")) for r in discarded] == [(old_hash, "profile_changed")]
        filled = [r.profile_hash for r in evidence(tmp_path, "sandbox_pooled")]
        assert filled == [old_hash, new_hash]
    finally:
        await orch.aclose()
    assert verify(tmp_path / "evidence.jsonl").ok
