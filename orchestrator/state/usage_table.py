"""The store's ``run_usage`` table: one row per run that began, what it used and how it ended
(``domain.usage.RunUsage``), kept so that ``profiles usage | recommend | whatif`` answer over weeks of runs
without reading the evidence file. Plain columns, NULL for unknown (never 0), indexed by profile and end
time: 100,000 rows of a profile read back in a fraction of a second.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from orchestrator.domain.usage import EndCause, RunLimits, RunUsage

# RunUsage's fields in column order (limits flattened): the one table the SQL and the rows are built from
_MEASURE_COLUMNS = (
    "cpu_seconds",
    "memory_peak_bytes",
    "pids_peak",
    "wall_seconds",
    "stdout_bytes",
    "stderr_bytes",
    "workspace_bytes_written",
    "workspace_files_written",
)
_LIMIT_COLUMNS = (
    "cpus",
    "memory_bytes",
    "pids",
    "wall_timeout_s",
    "stdout_max_bytes",
    "stderr_max_bytes",
    "workspace_write_bytes",
    "workspace_write_files",
)
_CONTEXT_COLUMNS = ("execution_id", "profile", "ended_at", "cause", "source", "tenant", "tool", "ci_repository")
COLUMNS = (*_CONTEXT_COLUMNS, *_MEASURE_COLUMNS, *(f"limit_{c}" for c in _LIMIT_COLUMNS))

MIGRATION = """
    CREATE TABLE run_usage (
        execution_id            TEXT PRIMARY KEY,
        profile                 TEXT NOT NULL,
        ended_at                REAL NOT NULL,
        cause                   TEXT NOT NULL,
        source                  TEXT,
        tenant                  TEXT NOT NULL,
        tool                    TEXT NOT NULL,
        ci_repository           TEXT,
        cpu_seconds             REAL,
        memory_peak_bytes       INTEGER,
        pids_peak               INTEGER,
        wall_seconds            REAL,
        stdout_bytes            INTEGER,
        stderr_bytes            INTEGER,
        workspace_bytes_written INTEGER,
        workspace_files_written INTEGER,
        limit_cpus                  REAL NOT NULL,
        limit_memory_bytes          INTEGER NOT NULL,
        limit_pids                  INTEGER NOT NULL,
        limit_wall_timeout_s        REAL NOT NULL,
        limit_stdout_max_bytes      INTEGER NOT NULL,
        limit_stderr_max_bytes      INTEGER NOT NULL,
        limit_workspace_write_bytes INTEGER NOT NULL,
        limit_workspace_write_files INTEGER NOT NULL
    );
    CREATE INDEX run_usage_by_profile ON run_usage(profile, ended_at);
    CREATE INDEX run_usage_by_end ON run_usage(ended_at)
"""

#: the profiles page's figures (usage_distribution.py) read only these columns of a profile's window: an index
#: holding them all answers them without visiting the table (a quarter less time over 100,000 rows); it also
#: serves every lookup run_usage_by_profile served, which it replaces
FIGURES_INDEX = """
    DROP INDEX run_usage_by_profile;
    CREATE INDEX run_usage_figures ON run_usage(
        profile, ended_at, tenant, cause, cpu_seconds, memory_peak_bytes, wall_seconds,
        limit_memory_bytes, limit_wall_timeout_s
    )
"""

# built from the column names above, never from input: S608 does not apply
INSERT = f"INSERT OR REPLACE INTO run_usage ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"  # noqa: S608
SELECT = f"SELECT {', '.join(COLUMNS)} FROM run_usage"  # noqa: S608


def limit_column(field: str) -> str:
    """The column of a ``RunLimits`` field (``memory_bytes``: ``limit_memory_bytes``)."""
    if field not in _LIMIT_COLUMNS:
        raise ValueError(f"no limit column for {field!r}")
    return f"limit_{field}"


def row_of(usage: RunUsage) -> tuple[Any, ...]:
    return (
        *(getattr(usage, c) if c != "cause" else usage.cause.value for c in _CONTEXT_COLUMNS),
        *(getattr(usage, c) for c in _MEASURE_COLUMNS),
        *(getattr(usage.limits, c) for c in _LIMIT_COLUMNS),
    )


_CAUSES = {cause.value: cause for cause in EndCause}
_MEASURES_AT = len(_CONTEXT_COLUMNS)
_LIMITS_AT = _MEASURES_AT + len(_MEASURE_COLUMNS)


def usage_of(row: Sequence[Any], limits_seen: dict[tuple[Any, ...], RunLimits] | None = None) -> RunUsage:
    """The row as a RunUsage. ``limits_seen``: the RunLimits already built, by value (most runs of a profile share
    theirs: one object, not 100,000)."""
    execution_id, profile, ended_at, cause, source, tenant, tool, ci_repository = row[:_MEASURES_AT]
    key = tuple(row[_LIMITS_AT:])
    limits = None if limits_seen is None else limits_seen.get(key)
    if limits is None:
        limits = RunLimits(*key)
        if limits_seen is not None:
            limits_seen[key] = limits
    cpu, memory, pids, wall, stdout, stderr, ws_bytes, ws_files = row[_MEASURES_AT:_LIMITS_AT]
    return RunUsage(
        execution_id,
        profile,
        ended_at,
        _CAUSES[cause],
        limits,
        cpu,
        memory,
        pids,
        wall,
        stdout,
        stderr,
        ws_bytes,
        ws_files,
        source,
        tenant,
        tool,
        ci_repository,
    )


def select(db: sqlite3.Connection, *, profile: str | None, since: float | None, until: float | None) -> list[RunUsage]:
    """The rows of ``profile`` (every profile: None) that ended in [since, until], oldest first."""
    where, args = [], []
    for clause, value in (("profile = ?", profile), ("ended_at >= ?", since), ("ended_at <= ?", until)):
        if value is not None:
            where.append(clause)
            args.append(value)
    sql = SELECT + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY ended_at"
    limits_seen: dict[tuple[Any, ...], RunLimits] = {}
    return [usage_of(row, limits_seen) for row in db.execute(sql, args)]


def profiles(db: sqlite3.Connection, *, since: float | None) -> list[str]:
    """The profiles with a run that ended at or after ``since``."""
    rows = db.execute("SELECT DISTINCT profile FROM run_usage WHERE ended_at >= ?", (since or 0.0,))
    return sorted(row[0] for row in rows)


def forget_before(db: sqlite3.Connection, before: float) -> int:
    return db.execute("DELETE FROM run_usage WHERE ended_at < ?", (before,)).rowcount
