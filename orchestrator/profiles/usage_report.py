"""``sandboxctl profiles usage``: what the runs of one profile used of each limit, and how they ended.

Per group of runs (all of them, or by tenant, tool or CI repository), for each measure of
``domain.usage.MEASURES``: how many runs had it known and how many not (an unknown is never a 0), its
nearest-rank percentiles, the profile's limit as it is now and the largest value as a fraction of it; and
how many runs ended with each ``EndCause`` (every cause listed, zeros included).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import Field

from orchestrator.domain.usage import MEASURES, EndCause, Measure, RunLimits, RunUsage
from orchestrator.profiles.usage_stats import Number, Output, Percentiles, percentiles

__all__ = [
    "ALL_RUNS",
    "GroupBy",
    "MeasureSummary",
    "Percentiles",
    "UsageGroup",
    "UsageReport",
    "usage_report",
]

GroupBy = Literal["tenant", "tool", "ci_repository"]
ALL_RUNS = "all"
"""The one group's name when the runs are not grouped."""

# end causes that more than one measure leads to (output_cap: stdout or stderr; write_budget: bytes or
# files): a run is put at a measure's limit only when its value says it was that one
_SHARED_CAUSES = frozenset(cause for cause in EndCause if sum(1 for m in MEASURES if m.cause is cause) > 1)


class MeasureSummary(Output):
    """One measure over a group's runs."""

    measure: str = Field(description="The measure's name (domain.usage.MEASURES).")
    unit: str = Field(description="s, cores, bytes or count.")
    description: str = Field(description="What it is, in a few words.")
    limit_key: str = Field(description="The profile `limits:` key it is held against.")
    known: int = Field(description="Runs with this measure known.")
    unknown: int = Field(description="Runs without it (a backend that could not read it, a run that never ran).")
    percentiles: Percentiles | None = Field(description="Over the known values; null when none is known.")
    limit: Number | None = Field(description="The profile's limit as it is now; null when not given.")
    max_of_limit: float | None = Field(description="The largest known value ÷ the limit (1.0: at the limit).")
    ended_at_limit: int | None = Field(
        description="Runs that ended at this limit (its end cause; for stdout/stderr and the two write budgets, "
        "only runs whose value was at their limit or unknown); null for CPU, which is throttled, never ended."
    )


class UsageGroup(Output):
    """The runs of one tenant, tool or CI repository (or all of them)."""

    group: str = Field(description="The tenant, tool or CI repository ('' when the run had none), or 'all'.")
    runs: int = Field(description="How many runs.")
    measures: tuple[MeasureSummary, ...] = Field(description="One per measure, in domain.usage.MEASURES order.")
    ended: dict[str, int] = Field(description="Runs per end cause: every cause, zeros included.")


class UsageReport(Output):
    """What the runs of ``profile`` that ended in [since, until] used."""

    profile: str = Field(description="The profile.")
    since: float | None = Field(description="Start of the window (unix seconds); null: since the first run.")
    until: float = Field(description="End of the window (unix seconds).")
    group_by: GroupBy | None = Field(description="What the runs are grouped by; null: one group, 'all'.")
    runs: int = Field(description="Runs counted, in every group.")
    ignored: int = Field(description="Rows given that were of another profile or outside the window.")
    groups: tuple[UsageGroup, ...] = Field(description="Largest group first (then by name).")


def usage_report(
    runs: Iterable[RunUsage],
    *,
    profile: str,
    limits: RunLimits | None,
    since: float | None,
    until: float,
    group_by: GroupBy | None,
) -> UsageReport:
    """The usage report of ``profile``'s runs. ``limits``: the profile's as it is now (None: unknown), which
    every fraction is taken against. Rows of another profile or outside [since, until] are counted in
    ``ignored``, nothing else (the caller selects; this only makes sure)."""
    groups: dict[str, list[RunUsage]] = {}
    ignored = 0
    for run in runs:
        if run.profile != profile or run.ended_at > until or (since is not None and run.ended_at < since):
            ignored += 1
            continue
        name = ALL_RUNS if group_by is None else (getattr(run, group_by) or "")
        groups.setdefault(name, []).append(run)
    if group_by is None:
        groups.setdefault(ALL_RUNS, [])  # one group always, even an empty one: every count then reads 0
    ordered = sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))
    return UsageReport(
        profile=profile,
        since=since,
        until=until,
        group_by=group_by,
        runs=sum(len(rows) for rows in groups.values()),
        ignored=ignored,
        groups=tuple(_group(name, rows, limits) for name, rows in ordered),
    )


def _group(name: str, rows: Sequence[RunUsage], limits: RunLimits | None) -> UsageGroup:
    by_cause: dict[EndCause, list[RunUsage]] = {cause: [] for cause in EndCause}
    for run in rows:
        by_cause[run.cause].append(run)
    return UsageGroup(
        group=name,
        runs=len(rows),
        measures=tuple(_summary(measure, rows, by_cause, limits) for measure in MEASURES),
        ended={cause.value: len(ended) for cause, ended in by_cause.items()},
    )


def _summary(
    measure: Measure, rows: Sequence[RunUsage], by_cause: dict[EndCause, list[RunUsage]], limits: RunLimits | None
) -> MeasureSummary:
    values = [v for v in map(measure.value, rows) if v is not None]
    values.sort()  # once: every percentile is then an index
    summary = percentiles(values)
    limit = None if limits is None else measure.limit(limits)
    return MeasureSummary(
        measure=measure.name,
        unit=measure.unit,
        description=measure.description,
        limit_key=measure.limit_field,
        known=len(values),
        unknown=len(rows) - len(values),
        percentiles=summary,
        limit=limit,
        max_of_limit=None if summary is None or not limit else summary.max / limit,
        ended_at_limit=None if measure.cause is None else _ended_at(measure, by_cause[measure.cause]),
    )


def _ended_at(measure: Measure, ended: Sequence[RunUsage]) -> int:
    if measure.cause not in _SHARED_CAUSES:
        return len(ended)
    count = 0
    for run in ended:
        value = measure.value(run)
        count += value is None or value >= measure.limit(run.limits)
    return count
