"""The profiles page's figures, computed where the rows are: histograms of a profile's measures, the ranked
samples a recommendation needs, and the newest runs that ended at a limit — in SQL over ``run_usage``
(``usage_table.py``), so that 100,000 runs of a profile answer within 300 ms. Reading them into Python objects
would take about half a second by itself: here only aggregates, one value per sample, a row per combination
of buckets met and at most ``newest`` rows come back.

Two passes in one read of the store. The first gives what the buckets depend on: each measure's largest value,
each sample's count and percentile (``ORDER BY … LIMIT 1 OFFSET k``, from the nearer end). A plan made from it
(``Plan``: the caller's pure function) gives the buckets, and the second pass counts them: one ``GROUP BY`` of
every measure's bucket index at once. The store's writes come through its one thread, so no row changes in
between. SQLite spends its time evaluating each expression row by row, so every figure is asked for once.

Every statement is built from constants only — the measures' expressions below, the end causes' names, ``?``
per tenant — never from input (S608 does not apply; its ``noqa`` marks say so).
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

    def select(self, columns: str, tail: str = "", before: Sequence[Any] = (), after: Sequence[Any] = ()) -> Any:
        """``SELECT columns FROM run_usage WHERE <scope> tail``; ``before``: the arguments of ``?`` in
        ``columns``, ``after``: those in ``tail``."""
        sql = f"SELECT {columns} FROM run_usage WHERE {self.where} {tail}"  # noqa: S608
        return self.db.execute(sql, [*before, *self.args, *after])


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


def _need(sample: Sample) -> str:
    """What a row that ended at the sample's cause needed at least, before the bump: its limit or its value,
    whichever is larger; for a sample that does not rank such rows, the limit it had."""
    if not sample.ranked_at_limit:
        return _limit(sample)
    return f"MAX({_limit(sample)}, COALESCE({MEASURE_SQL[sample.measure]}, 0))"


def _sample_sql(sample: Sample, bump_function: str | None) -> str:
    """The sample's value of a row (NULL: not a sample); ``bump_function``: the SQL function of the sample's
    bump (None: unbumped, which is NULL exactly where the bumped value is)."""
    value = MEASURE_SQL[sample.measure]
    branches = []
    if sample.cause is not None:
        need = _need(sample) if sample.ranked_at_limit else "NULL"
        if sample.ranked_at_limit and sample.bump is not None and bump_function is not None:
            need = f"{bump_function}({need})"
        branches.append(f"WHEN cause = {_cause(sample.cause)} THEN {need}")
    if sample.reached_percent is not None:  # whole numbers: the same comparison as recommend.reached_limit
        branches.append(f"WHEN {value} * 100 >= {_percent(sample.reached_percent)} * {_limit(sample)} THEN NULL")
    return f"(CASE {' '.join(branches)} ELSE {value} END)" if branches else value


def _percent(percent: int) -> str:
    """A percentage as an SQL literal (a constant of the rules, never input)."""
    if not isinstance(percent, int) or not 0 <= percent <= 100:
        raise ValueError(f"{percent!r} is not a whole percentage")
    return str(percent)


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
    """Pass 1: one scan for every count and largest value, a ranked query per sample, the runs per cause."""
    values = {name: MEASURE_SQL[name] for name in (*measures, *(s.measure for s in samples.values()))}
    columns = ["COUNT(*)", *(f"COUNT({v}), MAX({v})" for v in values.values())]
    params: list[Any] = []
    for sample in samples.values():
        if sample.cause is not None or sample.reached_percent is not None:
            columns.append(f"COUNT({_sample_sql(sample, None)})")  # not every known value is a sample
        if sample.cause is not None:
            at = f"cause = {_cause(sample.cause)}"
            columns.append(f"MAX(CASE WHEN {at} THEN {_need(sample)} END)")
            if not sample.ranked_at_limit and sample.current is not None:
                columns.append(f"COALESCE(SUM({at} AND {_limit(sample)} >= ?), 0)")
                params.append(sample.current)
    row = list(rows.select(", ".join(columns), before=params).fetchone())
    runs = row.pop(0)
    known, largest = {}, {}
    for name in values:
        known[name], largest[name] = row.pop(0), row.pop(0)
    stats = {}
    for i, (name, sample) in enumerate(samples.items()):
        count, top, at_current = known[sample.measure], None, 0
        if sample.cause is not None or sample.reached_percent is not None:
            count = row.pop(0)
        if sample.cause is not None:
            top = row.pop(0)
            if top is not None and sample.ranked_at_limit and sample.bump is not None:
                top = sample.bump(top)  # a bump never decreases: the largest need's bump is the largest bumped
            if not sample.ranked_at_limit and sample.current is not None:
                at_current = row.pop(0)
        function = f"usage_bump_{i}"
        if sample.bump is not None:  # the rule's own function, so that SQL ranks exactly what recommend() would
            rows.db.create_function(function, 1, sample.bump, deterministic=True)
        ranked = _ranked(rows, _sample_sql(sample, function), count, sample.percent)
        stats[name] = SampleStats(count, ranked, top, at_current)
    by_cause = dict.fromkeys(causes, 0)
    if causes:
        by_cause.update(
            (EndCause(c), n) for c, n in rows.select("cause, COUNT(*)", f"AND {_causes(causes)} GROUP BY cause")
        )
    return Summary(runs, {m: largest[m] for m in measures}, stats, by_cause)


def _ranked(rows: _Rows, value: str, count: int, percent: int) -> Number | None:
    """The ``percent``-th percentile (nearest rank) of the ``count`` non-NULL values of ``value``, sorted from
    whichever end is nearer: SQLite's sorter then keeps only the rows up to it (p95: 5 % of them)."""
    if count == 0:
        return None
    at = rank(count, percent)  # 1-based, ascending
    order, offset = ("ASC", at - 1) if at - 1 <= count - at else ("DESC", count - at)
    found = rows.select(f"{value} AS v", f"AND v IS NOT NULL ORDER BY v {order} LIMIT 1 OFFSET ?", after=[offset])
    hit = found.fetchone()
    return None if hit is None else hit[0]


def _histograms(rows: _Rows, plan: Mapping[str, Buckets]) -> dict[str, Counts]:
    """Pass 2: every measure's bucket index in one scan, grouped by all of them at once (one sort of the rows
    instead of one per measure; one row per combination met comes back, a few thousand at most in practice),
    then summed per measure. A NULL index (the measure unknown) is counted nowhere."""
    measures = list(plan)
    if not measures:
        return {}
    indexes = ", ".join(f"CAST({MEASURE_SQL[m]} * ? / ? AS INTEGER)" for m in measures)
    groups = f"GROUP BY {', '.join(str(i + 1) for i in range(len(measures)))}"
    params = [x for m in measures for x in (plan[m].scale, plan[m].divisor)]
    counts = {m: [0] * plan[m].count for m in measures}
    for row in rows.select(f"{indexes}, COUNT(*)", groups, before=params):
        n = row[-1]
        for measure, index in zip(measures, row, strict=False):
            if index is not None:  # a value on the top edge (or a float's hair past it): the last bucket
                counts[measure][min(max(int(index), 0), plan[measure].count - 1)] += n
    return {m: Counts(tuple(c), sum(c)) for m, c in counts.items()}


def _newest(rows: _Rows, causes: Sequence[EndCause], limit: int) -> list[RunUsage]:
    """The newest ``limit`` runs that ended at one of ``causes``: the index walked from the window's end."""
    if not causes or limit <= 0:
        return []
    found = rows.select(
        ", ".join(usage_table.COLUMNS), f"AND {_causes(causes)} ORDER BY ended_at DESC LIMIT ?", after=[limit]
    )
    return [usage_table.usage_of(row) for row in found]
