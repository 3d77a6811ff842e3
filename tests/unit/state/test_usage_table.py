"""The store's run_usage table: what goes in comes out (unknown stays NULL, never 0), by profile and window,
and a store of the version before gets the table on its next start."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from orchestrator.domain.usage import EndCause, RunLimits, RunUsage
from orchestrator.state.store import MIGRATIONS, StateStore, migrate

LIMITS = RunLimits(1.0, 512 * 2**20, 128, 300.0, 2**20, 2**20, 2**30, 100_000)


def run(execution_id: str, ended_at: float, profile: str = "ci", **measures: object) -> RunUsage:
    fields: dict[str, object] = {
        "cpu_seconds": 1.5,
        "memory_peak_bytes": 0,  # a known 0 ...
        "pids_peak": None,  # ... and an unknown, kept apart
        "wall_seconds": 3.0,
        "stdout_bytes": 10,
        "stderr_bytes": 0,
        "workspace_bytes_written": None,
        "workspace_files_written": None,
    }
    fields.update(measures)
    return RunUsage(
        execution_id=execution_id,
        profile=profile,
        ended_at=ended_at,
        cause=EndCause.OOM,
        limits=LIMITS,
        source="cgroup",
        tenant="acme",
        tool="shell_exec",
        ci_repository=None,
        **fields,  # type: ignore[arg-type]
    )


async def test_rows_come_back_as_they_went_in(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    try:
        runs = [run("ex-1", 100.0), run("ex-2", 200.0, pids_peak=7), run("ex-3", 150.0, profile="untrusted")]
        for r in runs:
            await store.put_usage(r)
        assert await store.usage(profile="ci") == [runs[0], runs[1]]  # oldest first, every field equal
        assert await store.usage(profile="ci", since=150.0) == [runs[1]]
        assert await store.usage(until=150.0) == [runs[0], runs[2]]
        assert await store.usage_profiles() == ["ci", "untrusted"]
        assert await store.usage_profiles(since=160.0) == ["ci"]
        await store.put_usage(run("ex-1", 100.0, cpu_seconds=None))  # the same run again: replaced, not doubled
        again = await store.usage(profile="ci")
        assert [r.execution_id for r in again] == ["ex-1", "ex-2"] and again[0].cpu_seconds is None
        assert await store.forget_usage(before=160.0) == 2
        assert [r.execution_id for r in await store.usage()] == ["ex-2"]
    finally:
        await store.close()


def test_a_store_of_the_version_before_gets_the_table(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    for number, migration in enumerate(MIGRATIONS[:-1]):
        for statement in migration.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {number + 1}")
    assert migrate(db) == len(MIGRATIONS)
    assert db.execute("SELECT COUNT(*) FROM run_usage").fetchone() == (0,)
