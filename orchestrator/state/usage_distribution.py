"""The profiles page's figures, computed where the rows are: histograms of a profile's measures, the ranked
samples a recommendation needs, and the newest runs that ended at a limit — in SQL over ``run_usage``
(``usage_table.py``), so that 100,000 runs of a profile answer within 300 ms. Reading them into Python objects
would take about half a second by itself: here only counts, a few values per sample and at most ``newest``
rows come back.

SQLite spends its time evaluating expressions row by row, and sorting. So each measure has an index in its
value's order (``MEASURE_INDEXES``: profile, value, then what the window and the samples look at), and the
figures walk it instead: a largest value is the index's last entry in the window, a bucket's count a range of
it, a percentile the k-th entry from the nearer end — no sort, no expression over every row. Only the runs that
ended at a sample's cause (an OOM kill: its need is bumped, out of the value's order) are read and merged in.

Two passes in one read of the store. The first gives what the buckets depend on: each measure's largest value,
each sample's count and percentile. A plan made from it (``Plan``: the caller's pure function) gives the
buckets, and the second pass counts them. The store's writes come through its one thread, so no row changes
in between.

Every statement is built from constants only — the measures' expressions below, the end causes' names, ``?``
per value — never from input (S608 does not apply; its ``noqa`` marks say so).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.domain.usage import SESSION_TOOLS, EndCause, RunUsage
from orchestrator.domain.usage_figures import (
    Buckets,
    Counts,
    Figures,
    Number,
    Plan,
    Sample,
    SampleStats,
    Scope,
    Summary,
)
from orchestrator.profiles.usage_stats import rank
from orchestrator.state import usage_table

#: each measure as an SQL expression of a row, NULL when unknown (cores: as ``RunUsage.cores`` computes it)
MEASURE_SQL: Final[Mapping[str, str]] = {
    "memory_peak_bytes": "memory_peak_bytes",
    "cores": "(CASE WHEN wall_seconds > 0 THEN cpu_seconds / wall_seconds END)",
    "cpu_seconds": "cpu_seconds",
    # a session's wall time is how long it stayed open, not a command's: unknown here (RunUsage.command_wall_seconds)
    "wall_seconds": f"(CASE WHEN tool IN ({', '.join(repr(t) for t in sorted(SESSION_TOOLS))}) THEN NULL "
    "ELSE wall_seconds END)",
}
#: the limit column a measure's samples compare with (a memory peak at its own limit is no sample)
_LIMIT_OF: Final[Mapping[str, str]] = {
    "memory_peak_bytes": "limit_memory_bytes",
    "wall_seconds": "limit_wall_timeout_s",
}


@dataclass(frozen=True, slots=True)
class _Ordered:
    """A measure as its index orders it: ``key`` (a column, or MEASURE_SQL's expression), known where ``known``
    holds. A plain column with a condition beats an expression: SQLite (3.40) reads an expression index's rows
    from the table to compare, a column's from the index alone."""

    key: str
    known: str


_ORDERED: Final[Mapping[str, _Ordered]] = {
    name: _Ordered(expr, f"{expr} IS NOT NULL") for name, expr in MEASURE_SQL.items()
} | {
    "wall_seconds": _Ordered(
        "wall_seconds",
        f"wall_seconds IS NOT NULL AND tool NOT IN ({', '.join(repr(t) for t in sorted(SESSION_TOOLS))})",
    )
}


def _index(measure: str) -> str:
    return f"run_usage_by_{measure}"


#: one index per measure in its value's order, holding what the window and the samples read (an expression
#: exactly as MEASURE_SQL writes it: SQLite uses an index on an expression only for that very expression)
MEASURE_INDEXES = ";\n".join(
    f"CREATE INDEX {_index(name)} ON run_usage(profile, {ordered.key}, ended_at, tenant, cause"
    + (f", {_LIMIT_OF[name]}" if name in _LIMIT_OF else "")
    + (", tool)" if ordered.key == "wall_seconds" else ")")
    for name, ordered in _ORDERED.items()
)


@dataclass(frozen=True, slots=True)
class _Rows:
    """The scope's rows as SQL: the connection, a WHERE clause and its arguments."""

    db: sqlite3.Connection
    where: str
    args: tuple[Any, ...]

    @classmethod
    def of(cls, db: sqlite3.Connection, scope: Scope) -> _Rows:
        where, args = "profile = ? AND ended_at >= ? AND ended_at <= ?", [scope.profile, scope.since, scope.until]
        if scope.tenants is not None:  # an approver of no tenant sees no run: IN () is false in SQLite
            where += f" AND tenant IN ({', '.join('?' * len(scope.tenants))})"
            args.extend(scope.tenants)
        return cls(db, where, tuple(args))

    def select(self, columns: str, tail: str = "", after: Sequence[Any] = (), *, measure: str | None = None) -> Any:
        """``SELECT columns FROM run_usage WHERE <scope> tail`` (``after``: the arguments of ``?`` in ``tail``),
        through ``measure``'s index when given (the planner would take the window's, and sort)."""
        source = f"run_usage INDEXED BY {_index(measure)}" if measure else "run_usage"
        sql = f"SELECT {columns} FROM {source} WHERE {self.where} {tail}"  # noqa: S608
        return self.db.execute(sql, [*self.args, *after])


def _cause(cause: EndCause) -> str:
    """An end cause as an SQL literal (a constant of the enum, never input)."""
    if re.fullmatch("[a-z_]+", cause.value) is None:  # the enum's values are identifiers: a bug otherwise
        raise ValueError(f"end cause {cause.value!r} cannot be an SQL literal")
    return f"'{cause.value}'"


def _causes(causes: Sequence[EndCause]) -> str:
    return f"cause IN ({', '.join(map(_cause, causes))})"


def _limit(sample: Sample) -> str:
    if sample.limit_field is None:
        raise ValueError(f"a sample ended at {sample.cause} needs its limit's field")
    return usage_table.limit_column(sample.limit_field)


def _percent(percent: int) -> str:
    """A percentage as an SQL literal (a constant of the rules, never input)."""
    if not isinstance(percent, int) or not 0 <= percent <= 100:
        raise ValueError(f"{percent!r} is not a whole percentage")
    return str(percent)


def _in_order(sample: Sample) -> str:
    """The rows whose sample is the measure's own value, in the index's order: known, not ended at the
    sample's cause, and (``reached_percent``) below that share of their own limit — whole numbers, the same
    comparison as ``recommend.reached_limit``."""
    ordered = _ORDERED[sample.measure]
    value, conditions = ordered.key, [ordered.known]
    if sample.cause is not None:
        conditions.append(f"cause != {_cause(sample.cause)}")
    if sample.reached_percent is not None:
        conditions.append(f"{value} * 100 < {_percent(sample.reached_percent)} * {_limit(sample)}")
    return " AND ".join(conditions)


def figures(
    db: sqlite3.Connection,
    scope: Scope,
    *,
    measures: Sequence[str],
    samples: Mapping[str, Sample],
    causes: Sequence[EndCause],
    plan: Plan,
    newest: int,
) -> Figures:
    """The figures of ``scope``'s rows: each of ``measures``' largest value and histogram (buckets from
    ``plan``), each sample's count, percentile and largest value at its limit, runs per cause of ``causes`` and
    the ``newest`` runs that ended at one of them. Call it inside one read of the store (its thread), so that
    both passes see the same rows."""
    rows = _Rows.of(db, scope)
    summary = _summary(rows, measures, samples, causes)
    return Figures(summary, _histograms(rows, plan(summary)), _newest(rows, causes, newest))


def _summary(
    rows: _Rows, measures: Sequence[str], samples: Mapping[str, Sample], causes: Sequence[EndCause]
) -> Summary:
    """Pass 1: the runs, each measure's largest value (its index's last entry in the window), each sample's
    figures, the runs per cause."""
    runs = rows.select("COUNT(*)").fetchone()[0]
    largest = {
        m: rows.select(f"MAX({_ORDERED[m].key})", f"AND {_ORDERED[m].known}", measure=m).fetchone()[0] for m in measures
    }
    stats = {name: _sample_stats(rows, sample) for name, sample in samples.items()}
    by_cause = dict.fromkeys(causes, 0)
    if causes:
        by_cause.update(
            (EndCause(c), n) for c, n in rows.select("cause, COUNT(*)", f"AND {_causes(causes)} GROUP BY cause")
        )
    return Summary(runs, largest, stats, by_cause)


def _sample_stats(rows: _Rows, sample: Sample) -> SampleStats:
    """A sample as ``recommend`` takes it: the measure's values in the index's order (``_in_order``), and the
    runs that ended at its cause read apart — each one's need (its limit or its value, whichever is larger),
    bumped, when they are ranked; else only counted (those at a limit of their own at or above the current
    one). The percentile is then the k-th of both, from the nearer end."""
    in_order = _in_order(sample)
    count = rows.select("COUNT(*)", f"AND {in_order}", measure=sample.measure).fetchone()[0]
    extra: list[Number] = []  # the ranked needs of the runs that ended at the cause
    largest_at_limit, at_current = None, 0
    if sample.cause is not None:
        value, limit = MEASURE_SQL[sample.measure], _limit(sample)
        ended = rows.select(f"{value}, {limit}", f"AND cause = {_cause(sample.cause)}").fetchall()
        if sample.ranked_at_limit:
            needs = [max(own, reached or 0) for reached, own in ended]  # it needed more than it had
            extra = sorted(sample.bump(n) if sample.bump else n for n in needs)
            largest_at_limit = extra[-1] if extra else None
        else:  # no sample: its limit was too short, by how much nobody knows
            largest_at_limit = max((own for _, own in ended), default=None)
            if sample.current is not None:
                at_current = sum(own >= sample.current for _, own in ended)
    total = count + len(extra)
    return SampleStats(total, _ranked(rows, sample, in_order, extra, total), largest_at_limit, at_current)


def _ranked(rows: _Rows, sample: Sample, in_order: str, extra: list[Number], total: int) -> Number | None:
    """The ``sample.percent``-th percentile (nearest rank) of the ``total`` samples: the values in the index's
    order walked from the nearer end, as far as the rank (p95 of 100,000: 5,000 entries), merged with the
    ascending ``extra``. The k-th of two sets is among the k first of each."""
    if total == 0:
        return None
    at = rank(total, sample.percent)  # 1-based, ascending
    ascending = at - 1 <= total - at
    take = at if ascending else total - at + 1
    value = _ORDERED[sample.measure].key
    walked = rows.select(
        f"{value} AS v", f"AND {in_order} ORDER BY v {'ASC' if ascending else 'DESC'} LIMIT ?", [take],
        measure=sample.measure,
    )  # fmt: skip
    first: list[Number] = [v for (v,) in walked] + (extra[:take] if ascending else extra[-take:])
    merged = sorted(first, reverse=not ascending)
    return merged[take - 1]


def _histograms(rows: _Rows, plan: Mapping[str, Buckets]) -> dict[str, Counts]:
    """Pass 2: each bucket's runs, a range of the measure's index (the first bucket also takes what lies below
    0, the last what lies past its right edge: every known value is counted once, an unknown one nowhere)."""
    out = {}
    for measure, buckets in plan.items():
        ordered, edges = _ORDERED[measure], buckets.edges
        value, counts = ordered.key, []
        for i in range(buckets.count):
            bounds, args = [ordered.known], []
            if i > 0:
                bounds.append(f"{value} >= ?")
                args.append(edges[i])
            if i < buckets.count - 1:
                bounds.append(f"{value} < ?")
                args.append(edges[i + 1])
            counts.append(rows.select("COUNT(*)", f"AND {' AND '.join(bounds)}", args, measure=measure).fetchone()[0])
        out[measure] = Counts(tuple(counts), sum(counts))
    return out


def _newest(rows: _Rows, causes: Sequence[EndCause], limit: int) -> list[RunUsage]:
    """The newest ``limit`` runs that ended at one of ``causes``: the index walked from the window's end."""
    if not causes or limit <= 0:
        return []
    found = rows.select(
        ", ".join(usage_table.COLUMNS), f"AND {_causes(causes)} ORDER BY ended_at DESC LIMIT ?", [limit]
    )
    return [usage_table.usage_of(row) for row in found]
