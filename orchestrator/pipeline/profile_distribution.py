"""The profiles page's answers: the profiles in force with their limits (``profile_list``), and how a profile's
runs spread against its limits (``distribution``: histograms, the limit and recommended lines, the runs that
ended at a limit).

The figures come from the store, computed in SQL (``state.usage_distribution``); this says what to compute —
the measures drawn, the recommendation rules' samples (``profiles.recommend.RULES``, as data), the buckets —
and makes the API's model of what comes back. A recommended value is ``recommend.rule_value`` of the same
percentile ``recommend`` would take, so the page's line and ``GET .../recommendation`` agree.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol

from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.profile_usage import (
    Histogram,
    ProfileDistribution,
    ProfileLimits,
    ProfileList,
    RunAtLimit,
    RunsAtLimit,
)
from orchestrator.domain.usage import MEASURE_BY_NAME, MEASURES, EndCause, RunLimits, RunUsage
from orchestrator.domain.usage_figures import Buckets, Figures, Number, Plan, Sample, Scope, Summary
from orchestrator.pipeline.end_record import run_limits
from orchestrator.pipeline.profile_usage import ProfileNow, profile_now
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.profiles.limit_keys import RUN_LIMITS_FIELD, USAGE_KEYS, limit_of
from orchestrator.profiles.recommend import RULES, Rule, rule_value

__all__ = ["MAX_BUCKETS", "NEWEST_AT_LIMIT", "FiguresSource", "buckets_for", "distribution", "profile_list"]

#: the most buckets a histogram has (its width is rounded up, so often fewer)
MAX_BUCKETS: Final = 40
#: the runs ended at a limit that an answer lists (its total counts them all)
NEWEST_AT_LIMIT: Final = 50
#: the measures drawn, and the profile keys each one's limit (and recommended value) is made of
DRAWN: Final[Mapping[str, tuple[str, ...]]] = {
    "memory_peak_bytes": ("memory",),
    "cores": ("cpus",),
    "cpu_seconds": ("cpus", "wall_timeout_s"),
    "wall_seconds": ("wall_timeout_s",),
}
#: the measure each recommendation rule ranks (its Rule.value as a measure of domain.usage.MEASURES)
_RULE_MEASURE: Final[Mapping[str, str]] = {
    "cpus": "cores",
    "memory": "memory_peak_bytes",
    "wall_timeout_s": "wall_seconds",
}
_RULES: Final[Mapping[str, Rule]] = {
    rule.key: rule for rule in RULES if rule.key in {k for ks in DRAWN.values() for k in ks}
}
#: the end causes of a limit (CPU has none: it is throttled), in MEASURES order
AT_LIMIT_CAUSES: Final[tuple[EndCause, ...]] = tuple(dict.fromkeys(m.cause for m in MEASURES if m.cause is not None))


class FiguresSource(Protocol):
    """Where the figures come from: the service's store (``StateStore.usage_figures``)."""

    async def usage_figures(
        self,
        scope: Scope,
        *,
        measures: Sequence[str],
        samples: Mapping[str, Sample],
        causes: Sequence[EndCause],
        plan: Plan,
        newest: int,
    ) -> Figures: ...


def _sample(rule: Rule, now: ProfileNow | None) -> Sample:
    """What ``rule`` ranks, as the store's SQL ranks it: the runs ``recommend`` takes as samples, no other."""
    own_limit = rule.at_limit is not None or rule.reached_percent is not None
    return Sample(
        measure=_RULE_MEASURE[rule.key],
        percent=rule.percent,
        cause=rule.at_limit,
        limit_field=RUN_LIMITS_FIELD[rule.key] if own_limit else None,
        bump=rule.bump,
        ranked_at_limit=rule.at_limit_ranked,
        current=limit_of(now.limits, rule.key) if now is not None else None,
        reached_percent=rule.reached_percent,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class _Line:
    value: Number
    rule: str


def _recommended(summary: Summary, now: ProfileNow | None, min_runs: int) -> dict[str, _Line]:
    """Each drawn key's recommended value, as ``recommend`` gives it from the same runs (none with fewer
    samples than ``min_runs``, or for a profile gone)."""
    if now is None:
        return {}
    lines = {}
    for key, rule in _RULES.items():
        stats = summary.samples[key]
        # the runs the value rests on, as recommend() counts them: its samples and the runs that timed out at
        # the current limit (or a wider one of their own)
        if stats.count + stats.at_current < max(min_runs, 1) or (stats.percentile is None and not stats.at_current):
            continue
        chosen = rule_value(
            rule,
            percentile=stats.percentile,
            largest_at_limit=stats.largest_at_limit,
            current=limit_of(now.limits, key),
            min_pids=now.min_pids,
        )
        lines[key] = _Line(chosen.value, chosen.rule[0])
    return lines


def _line_of(measure: str, lines: Mapping[str, _Line], now: ProfileNow | None) -> _Line | None:
    """The measure's recommended line: its limit (``Measure.limit``) with every key it is made of recommended."""
    keys = DRAWN[measure]
    if now is None or not all(key in lines for key in keys):
        return None
    recommended: dict[str, Any] = {RUN_LIMITS_FIELD[key]: lines[key].value for key in keys}  # int or float fields
    proposed = dataclasses.replace(now.limits, **recommended)
    return _Line(MEASURE_BY_NAME[measure].limit(proposed), " x ".join(lines[key].rule for key in keys))


def buckets_for(unit: str, top: Number) -> Buckets:
    """At most MAX_BUCKETS buckets of a round width from 0 up to the first edge at or above ``top``: a power of
    two for bytes, else 1, 2 or 5 x a power of ten (0.05 cores, 50 s). Nothing above 0: one bucket of 1."""
    if top <= 0:
        return Buckets(1, 1, 1)
    need = top / MAX_BUCKETS
    if unit == "bytes":
        width = 1 << max(0, math.ceil(math.log2(need)))
        return Buckets(max(1, math.ceil(top / width)), 1, width)
    exponent = math.floor(math.log10(need))
    mantissa = next(m for m in (1, 2, 5, 10) if m * 10.0**exponent >= need)
    if mantissa == 10:
        mantissa, exponent = 1, exponent + 1
    scale, divisor = (10**-exponent, mantissa) if exponent < 0 else (1, mantissa * 10**exponent)
    # round(): top / width in floats can land a hair above a whole number it equals
    return Buckets(max(1, math.ceil(round(top * scale / divisor, 9))), scale, divisor)


def _top(summary: Summary, measure: str, now: ProfileNow | None, line: _Line | None) -> Number:
    candidates = [summary.largest[measure], line.value if line else None]
    if now is not None:
        candidates.append(MEASURE_BY_NAME[measure].limit(now.limits))
    return max((c for c in candidates if c is not None), default=0)


def _at_limit(run: RunUsage) -> RunAtLimit:
    """The run, with what it reached of the limit it ended at: of a cause held by two measures (stdout or
    stderr, workspace bytes or entries), the one at its limit, else the first."""
    held = [m for m in MEASURES if m.cause is run.cause]
    reached = next(
        (m for m in held if (v := m.value(run)) is not None and v >= m.limit(run.limits)),
        held[0],
    )
    return RunAtLimit(
        execution_id=run.execution_id,
        cause=run.cause,
        ended_at=run.ended_at,
        tenant=run.tenant,
        measure=reached.name,
        value=reached.value(run),
        limit=reached.limit(run.limits),
    )


async def distribution(
    store: FiguresSource,
    profiles: Profiles,
    name: str,
    *,
    since: float,
    until: float,
    tenants: tuple[str, ...] | None,
    min_runs: int,
) -> ProfileDistribution:
    """How ``name``'s runs that ended in [since, until] (of ``tenants``; None: every tenant's) spread against
    its limits now (none for a profile gone since: its runs are still its own)."""
    try:
        now: ProfileNow | None = profile_now(profiles, name)
    except OrchestratorError:
        now = None

    def plan(summary: Summary) -> dict[str, Buckets]:
        lines = _recommended(summary, now, min_runs)
        return {m: buckets_for(MEASURE_BY_NAME[m].unit, _top(summary, m, now, _line_of(m, lines, now))) for m in DRAWN}

    figures = await store.usage_figures(
        Scope(name, since, until, tenants),
        measures=tuple(DRAWN),
        samples={key: _sample(rule, now) for key, rule in _RULES.items()},
        causes=AT_LIMIT_CAUSES,
        plan=plan,
        newest=NEWEST_AT_LIMIT,
    )
    summary = figures.summary
    lines, planned = _recommended(summary, now, min_runs), plan(summary)
    histograms = []
    for measure, keys in DRAWN.items():
        info, counted, line = MEASURE_BY_NAME[measure], figures.histograms[measure], _line_of(measure, lines, now)
        histograms.append(
            Histogram(
                measure=measure,
                unit=info.unit,
                description=info.description,
                limit_key=keys[0],
                edges=planned[measure].edges,
                counts=counted.counts,
                known=counted.known,
                unknown=summary.runs - counted.known,
                max=summary.largest[measure],
                limit=info.limit(now.limits) if now is not None else None,
                recommended=line.value if line else None,
                recommended_rule=line.rule if line else None,
            )
        )
    ended = {cause.value: summary.ended[cause] for cause in AT_LIMIT_CAUSES}
    return ProfileDistribution(
        profile=name,
        since=since,
        until=until,
        runs=summary.runs,
        min_runs=min_runs,
        histograms=tuple(histograms),
        ended_at_limit=RunsAtLimit(
            total=sum(ended.values()), by_cause=ended, runs=tuple(map(_at_limit, figures.newest_at_limit))
        ),
    )


def _limits(limits: RunLimits) -> dict[str, Number]:
    return {key: limit_of(limits, key) for key in USAGE_KEYS}


def profile_list(profiles: Profiles) -> ProfileList:
    """The profiles in force, each with the limits a run of it gets now, or why it does not resolve."""
    entries = []
    for name in profiles.registry.names():
        try:
            limits: dict[str, Number] | None = _limits(run_limits(profiles.named(name)))
            error = None
        except OrchestratorError as err:
            limits, error = None, err.code
        entries.append(ProfileLimits(name=name, default=name == profiles.default, limits=limits, error=error))
    return ProfileList(profiles=tuple(entries))
