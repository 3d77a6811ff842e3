"""``sandboxctl profiles usage``: what the runs of one profile used of each limit, and how they ended.

Per group of runs (all of them, or by tenant, tool or CI repository), for each measure of
``domain.usage.MEASURES``: how many runs had it known and how many not (an unknown is never a 0), its
nearest-rank percentiles, the profile's limit as it is now and the largest value as a fraction of it; and
how many runs ended with each ``EndCause`` (every cause listed, zeros included).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from orchestrator.domain.profile_usage import GroupBy, MeasureSummary, Percentiles, UsageGroup, UsageReport
from orchestrator.domain.usage import MEASURES, EndCause, Measure, RunLimits, RunUsage
from orchestrator.profiles.usage_stats import percentiles

__all__ = [
    "ALL_RUNS",
    "GroupBy",
    "MeasureSummary",
    "Percentiles",
    "UsageGroup",
    "UsageReport",
    "usage_report",
]

ALL_RUNS = "all"
"""The one group's name when the runs are not grouped."""

#: the most groups a report has: past it, the smallest ones are merged into one, OTHER_GROUPS (a tenant, tool or
#: repository is named by whoever asks to run: their number is theirs to grow, the answer's size is not)
MAX_GROUPS: Final = 50
OTHER_GROUPS: Final = "(other)"

# end causes that more than one measure leads to (output_cap: stdout or stderr; write_budget: bytes or
# files): a run is put at a measure's limit only when its value says it was that one
_SHARED_CAUSES = frozenset(cause for cause in EndCause if sum(1 for m in MEASURES if m.cause is cause) > 1)


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
    merged = 0
    if len(ordered) > MAX_GROUPS:  # a group key the callers chose (a CI repository): never an answer per key
        rest = ordered[MAX_GROUPS - 1 :]
        merged = len(rest)
        ordered = [*ordered[: MAX_GROUPS - 1], (OTHER_GROUPS, [run for _, rows in rest for run in rows])]
    return UsageReport(
        profile=profile,
        since=since,
        until=until,
        group_by=group_by,
        runs=sum(len(rows) for rows in groups.values()),
        ignored=ignored,
        groups=tuple(_group(name, rows, limits) for name, rows in ordered),
        groups_merged=merged,
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
