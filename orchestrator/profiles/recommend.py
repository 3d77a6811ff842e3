"""``sandboxctl profiles recommend``: limits for a profile from what its runs used (docs/profiles.md,
"Recommendations", gives each rule and its source).

One rule per resource, as data (``RULES``): the measure it reads, the percentile and margin it takes, and
what a run that ended at the limit says — only that it needed more than the limit it had, so its sample is
that limit, bumped for memory and pids the way the VPA recommender bumps an OOM kill; a run that timed out is
no sample (a hung command looks the same as a long one), it only keeps the current timeout. A memory peak is
the cgroup's high-water mark, page cache included: a run not OOM-killed whose peak reached its own limit only
says that the kernel reclaimed there, so it is left out (``RECLAIMED_PERCENT``). Every value is rounded up to
the resource's step and kept within the profile schema's bounds, and the changed ones are also given as a
``limits:`` patch in the profile files' own form.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from orchestrator.domain.profile_usage import (
    Change,
    Confidence,
    Number,
    Percentiles,
    Recommendation,
    ResourceRecommendation,
    RuleInputs,
)
from orchestrator.domain.usage import EndCause, RunLimits, RunUsage
from orchestrator.profiles.limit_keys import limit_of, profile_value
from orchestrator.profiles.models import MIB, TIB, Limits
from orchestrator.profiles.usage_stats import nearest_rank, percentiles

__all__ = [
    "CONFIDENCE_FROM",
    "RECLAIMED_PERCENT",
    "RULES",
    "Change",
    "Confidence",
    "Percentiles",
    "Recommendation",
    "ResourceRecommendation",
    "Rule",
    "RuleInputs",
    "RuleValue",
    "confidence",
    "reached_limit",
    "recommend",
    "rule_value",
]


#: The VPA recommender's OOM bump (``--oom-bump-up-ratio``, ``--oom-min-bump-up-bytes``): an OOM-killed
#: container needed at least max(used x 1.2, used + 100 MiB).
OOM_BUMP_RATIO: Final = 1.2
OOM_MIN_BUMP_BYTES: Final = 100 * MIB
#: The same for a run stopped at its pids limit; the smallest bump is the schema's smallest pids limit.
PIDS_MIN_BUMP: Final = 8
#: The VPA recommender's ``--recommendation-margin-fraction``.
VPA_MARGIN: Final = 0.15
#: A run at or above this share of its cpus was throttled: it may have wanted more.
THROTTLED_SHARE: Final = 0.95
#: A run not OOM-killed whose memory peak is at or above this percentage of its own memory limit reached that
#: limit: the peak (cgroup v1 ``memory.max_usage_in_bytes``, v2 ``memory.peak``) counts page cache, which the
#: kernel reclaims at the limit instead of killing, so such a peak says only that the run's need is at most its
#: limit, not what it is (a shell reading a 900 MB file peaks at its 512 MiB limit, needing 4 MiB). 95: the
#: limit less the kernel's reclaim slack, as a whole percentage so that SQL compares exactly what Python does.
RECLAIMED_PERCENT: Final = 95
#: Confidence by how many runs a rule's samples come from, first match (below ``min_runs``: none, no value).
CONFIDENCE_FROM: Final[tuple[tuple[Confidence, int], ...]] = (("high", 500), ("medium", 100), ("low", 0))


def _vpa_oom_bump(used: Number) -> Number:
    return math.ceil(max(used * OOM_BUMP_RATIO, used + OOM_MIN_BUMP_BYTES))


def _pids_bump(used: Number) -> Number:
    return math.ceil(max(used * OOM_BUMP_RATIO, used + PIDS_MIN_BUMP))


def _vpa_target(samples: Sequence[Number]) -> dict[str, Number]:
    return {"vpa_target": nearest_rank(samples, 90) * (1 + VPA_MARGIN)}


def _memory_checks(samples: Sequence[Number]) -> dict[str, Number]:
    return {**_vpa_target(samples), "krr_max_plus_15pct": samples[-1] * (1 + VPA_MARGIN)}


def _throttled(run: RunUsage, cores: Number) -> bool:
    return cores >= THROTTLED_SHARE * run.limits.cpus


def _no_checks(samples: Sequence[Number]) -> dict[str, Number]:
    return {}


@dataclass(frozen=True, slots=True)
class Rule:
    """How one resource is recommended."""

    key: str
    unit: str
    known_as: str  # the measure in a sentence: "12 runs with {known_as}, 20 needed"
    value: Callable[[RunUsage], Number | None]
    own_limit: Callable[[RunLimits], Number]
    percent: int
    margin: float
    step: Number  # rounded up to a multiple of it
    minimum: Number  # the profile schema's bounds
    maximum: Number
    rule: tuple[str, str]  # (id, text)
    at_limit: EndCause | None = None  # the end a run meets at this limit: its sample is then a lower bound
    at_limit_ranked: bool = True  # False: such a run is no sample (its need is unbounded), see keep_current
    bump: Callable[[Number], Number] | None = None  # what such a run needed at least (None: its limit)
    # (id, text) when a run ended at a limit of its own at or above the current one: never below the current
    keep_current: tuple[str, str] | None = None
    # a run not ended at the limit whose value is at or above this percentage of its own limit: no sample
    reached_percent: int | None = None
    floor_rule: tuple[str, str] | None = None  # (id, text) when a bumped sample of such a run sets the value
    near_limit: Callable[[RunUsage, Number], bool] | None = None  # (run, its value): at the limit, not ended there
    cross_checks: Callable[[Sequence[Number]], dict[str, Number]] = _no_checks


# fmt: off
RULES: Final[tuple[Rule, ...]] = (
    Rule("cpus", "cores", "known CPU use", lambda u: u.cores, lambda lim: lim.cpus,
         percent=95, margin=0.0, step=0.05, minimum=0.05, maximum=256,
         rule=("cpus.krr_p95", "p95 of the cores used (CPU s ÷ wall s), KRR's CPU request; up to 0.05 cores"),
         near_limit=_throttled, cross_checks=_vpa_target),
    Rule("memory", "bytes", "a known memory peak below its limit or an OOM kill", lambda u: u.memory_peak_bytes,
         lambda lim: lim.memory_bytes, percent=95, margin=VPA_MARGIN, step=MIB, minimum=6 * MIB, maximum=TIB,
         rule=("memory.vpa_upper_bound", "p95 of the memory peaks + 15 % (the VPA recommender's upper bound); "
               "a run not OOM-killed that reached its limit is left out (page cache: its need is unknown)"),
         at_limit=EndCause.OOM, bump=_vpa_oom_bump, reached_percent=RECLAIMED_PERCENT,
         floor_rule=("memory.vpa_oom_bump",
                     "the largest OOM-killed run's need (its limit x 1.2, at least +100 MiB: the VPA's OOM bump) "
                     "+ 15 %"),
         cross_checks=_memory_checks),
    Rule("pids", "count", "a known pids peak", lambda u: u.pids_peak, lambda lim: lim.pids,
         percent=99, margin=0.5, step=1, minimum=8, maximum=1_000_000,
         rule=("pids.p99_margin", "p99 of the pids peaks + 50 %"),
         at_limit=EndCause.PIDS_LIMIT, bump=_pids_bump,
         floor_rule=("pids.limit_bump", "the largest run stopped at its pids limit: that limit x 1.2 (at least +8), "
                     "+ 50 %")),
    Rule("wall_timeout_s", "s", "a known wall time or a timeout at the current limit", lambda u: u.command_wall_seconds,
         lambda lim: lim.wall_timeout_s, percent=99, margin=0.5, step=1.0, minimum=1.0, maximum=86_400.0,
         rule=("wall.p99_margin", "p99 of the wall times of the runs that did not time out + 50 %, in whole seconds"),
         at_limit=EndCause.WALL_TIMEOUT, at_limit_ranked=False,
         keep_current=("wall.timeouts_keep_current",
                       "runs timed out at the current limit (or a wider one of their own): how long they needed is "
                       "unknown (a hung command looks the same), so the p99 rule's value, never below the current "
                       "limit and not raised for them")),
)
# fmt: on


def recommend(
    runs: Iterable[RunUsage], *, profile: str, current: RunLimits, min_runs: int = 20, min_pids: int = 8
) -> Recommendation:
    """Limits for ``profile`` from its runs (rows of another profile are ignored). ``current``: the profile's
    limits now, which a change is measured from. ``min_pids``: the profile's smallest pids limit (64 under
    runsc: ``models.RUNSC_MIN_PIDS``)."""
    rows = [run for run in runs if run.profile == profile]
    resources = tuple(_recommend(rule, rows, current, min_runs, min_pids) for rule in RULES)
    patch = {
        r.key: profile_value(r.key, r.recommended)
        for r in resources
        if r.recommended is not None and r.change != "keep"
    }
    Limits.model_validate(patch)  # what the rules give is within the schema by construction: a bug otherwise
    throttled = next(r.inputs.at_limit for r in resources if r.key == "cpus")
    return Recommendation(
        profile=profile,
        runs=len(rows),
        min_runs=min_runs,
        resources=resources,
        patch=patch,
        notes=_notes(rows, throttled, current),
    )


def reached_limit(rule: Rule, run: RunUsage, value: Number) -> bool:
    """Whether ``value`` of ``run`` (which did not end at ``rule``'s limit) is at its own limit in the sense of
    ``rule.reached_percent``: a memory peak the kernel held there by reclaiming page cache. Whole numbers, so
    that the store's SQL compares exactly the same."""
    percent = rule.reached_percent
    return percent is not None and value * 100 >= percent * rule.own_limit(run.limits)


def _recommend(
    rule: Rule, rows: Sequence[RunUsage], current: RunLimits, min_runs: int, min_pids: int
) -> ResourceRecommendation:
    now = limit_of(current, rule.key)
    samples: list[Number] = []
    ended_at_limit: list[Number] = []  # ranked: their samples; else the limits they had
    at_current = 0  # runs ended at an unranked limit (a timeout) of their own at or above the current one
    near_limit = 0  # runs at the limit that did not end there (throttled CPU)
    for run in rows:
        value = rule.value(run)
        if rule.at_limit is not None and run.cause is rule.at_limit:
            own = rule.own_limit(run.limits)
            if not rule.at_limit_ranked:  # no sample: its limit was too short, by how much nobody knows
                ended_at_limit.append(own)
                at_current += own >= now  # a narrower one (a request's, a grant's) says nothing of the profile's
                continue
            need = max(own, value or 0)  # it needed more than it had
            need = rule.bump(need) if rule.bump else need
            samples.append(need)
            ended_at_limit.append(need)
        elif value is not None and not reached_limit(rule, run, value):
            samples.append(value)
            if rule.near_limit is not None and rule.near_limit(run, value):
                near_limit += 1
    samples.sort()
    at_limit = near_limit if rule.near_limit else len(ended_at_limit)
    counted = len(samples) + at_current  # the runs the value rests on

    def inputs(floor: Number | None) -> RuleInputs:
        return RuleInputs(
            known=len(samples),
            unknown=len(rows) - len(samples),
            at_limit=at_limit,
            percentiles=percentiles(samples),
            margin=rule.margin,
            floor=floor,
            cross_checks=_integral(rule, rule.cross_checks(samples)) if samples else {},
        )

    if counted < max(min_runs, 1):  # a percentile of nothing is no value
        reason = f"{counted} runs with {rule.known_as}, {min_runs} needed"
        if ended_at_limit:
            reason += (
                f" ({len(ended_at_limit)} of them ended at the limit)"
                if rule.at_limit_ranked
                else (f" ({len(ended_at_limit)} runs timed out, {at_current} of them at the current limit)")
            )
        return ResourceRecommendation(
            key=rule.key, unit=rule.unit, current=now, recommended=None, change=None, confidence="none",
            rule="too_few_runs", rule_text="no value from fewer than min_runs samples", reason=reason,
            inputs=inputs(None),
        )  # fmt: skip
    chosen = rule_value(
        rule,
        percentile=nearest_rank(samples, rule.percent) if samples else None,
        largest_at_limit=max(ended_at_limit) if ended_at_limit else None,
        current=now,
        min_pids=min_pids,
    )
    (rule_id, text), value = chosen.rule, chosen.value
    return ResourceRecommendation(
        key=rule.key, unit=rule.unit, current=now, recommended=value, change=_change(value, now),
        confidence=confidence(counted), rule=rule_id, rule_text=text, reason=None,
        inputs=inputs(chosen.floor),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class RuleValue:
    """What a rule gives from its samples' percentile: the value, the rule (id, text) that set it, and the
    floor it was held to (None: none)."""

    value: Number
    rule: tuple[str, str]
    floor: Number | None


def rule_value(
    rule: Rule, *, percentile: Number | None, largest_at_limit: Number | None, current: Number, min_pids: int
) -> RuleValue:
    """The value ``rule`` gives from the ``rule.percent``-th percentile of its samples (None: no sample, which
    gives a value only when the current limit is kept). ``largest_at_limit``: of the runs that ended at this
    limit (None: no run did), the largest sample — or, for a rule that does not rank them
    (``at_limit_ranked`` False), the largest limit such a run had: the current one is kept when that is at or
    above it. Shared by ``recommend`` (samples in memory) and the service's distribution (samples ranked in
    SQL), so that both give the same value from the same runs."""
    keep = rule.keep_current is not None and largest_at_limit is not None and largest_at_limit >= current
    if percentile is None:
        if not keep or rule.keep_current is None:
            raise ValueError(f"{rule.key}: no sample and no current limit to keep")
        return RuleValue(current, rule.keep_current, current)
    chosen, floor, base = rule.rule, None, percentile
    if rule.floor_rule and largest_at_limit is not None and largest_at_limit >= base:
        chosen, floor, base = rule.floor_rule, largest_at_limit, largest_at_limit
    value = _within(rule, _round_up(base * (1 + rule.margin), rule.step), min_pids)
    if keep and rule.keep_current is not None and value < current:
        chosen, floor, value = rule.keep_current, current, current
    return RuleValue(value, chosen, floor)


def _round_up(value: Number, step: Number) -> Number:
    """``value`` up to a multiple of ``step``; float steps (0.05 cores) tolerant of binary fractions: 0.35 is 7
    steps although 0.35 / 0.05 is 7.000000000000001 in floats."""
    steps = math.ceil(round(value / step, 9))
    return steps * step if isinstance(step, int) else round(steps * step, 9)


def _within(rule: Rule, value: Number, min_pids: int) -> Number:
    minimum = max(rule.minimum, min_pids) if rule.key == "pids" else rule.minimum
    return min(max(value, minimum), rule.maximum)


def _integral(rule: Rule, values: dict[str, Number]) -> dict[str, Number]:
    """Bytes and counts as whole numbers (rounded up); cores and seconds as they are."""
    if rule.unit in ("bytes", "count"):
        return {name: math.ceil(value) for name, value in values.items()}
    return values


def _change(value: Number, now: Number) -> Change:
    return "raise" if value > now else "lower" if value < now else "keep"


def confidence(samples: int) -> Confidence:
    """How far a value from ``samples`` samples can be trusted (``CONFIDENCE_FROM``)."""
    return next(level for level, least in CONFIDENCE_FROM if samples >= least)


# what the recorded runs cannot size, said rather than guessed
_CAUSE_NOTES: Final = {
    EndCause.OUTPUT_CAP: "{n} runs had output cut at stdout_max_bytes or stderr_max_bytes: output caps guard "
    "rather than size a node, so they are not recommended; raise them by hand if that output mattered",
    EndCause.WRITE_BUDGET: "{n} runs were stopped at a workspace write budget: write budgets guard rather than "
    "size a node, so they are not recommended; raise them by hand if those writes were real work",
}


def _notes(rows: Sequence[RunUsage], throttled: int, current: RunLimits) -> tuple[str, ...]:
    notes = []
    if throttled:
        notes.append(
            f"{throttled} runs used at least 95 % of their cpus: CPU is throttled, never killed, so what they "
            "would have used is unknown and a cpus recommendation cannot go above what they had"
        )
    memory = next(rule for rule in RULES if rule.key == "memory")
    reclaimed = sum(
        1
        for run in rows
        if run.cause is not EndCause.OOM
        and run.memory_peak_bytes is not None
        and reached_limit(memory, run, run.memory_peak_bytes)
    )
    if reclaimed:
        notes.append(
            f"{reclaimed} runs reached their memory limit without an OOM kill: the kernel reclaimed page cache "
            "there, so their need is unknown and they are left out"
        )
    narrower = sum(
        1 for run in rows if run.cause is EndCause.WALL_TIMEOUT and run.limits.wall_timeout_s < current.wall_timeout_s
    )
    if narrower:
        notes.append(
            f"{narrower} runs timed out under a timeout of their own narrower than the profile's (a request's "
            "--timeout, a grant's bound): that says nothing of the profile's, so they are left out"
        )
    ended = Counter(run.cause for run in rows)
    notes.extend(text.format(n=ended[cause]) for cause, text in _CAUSE_NOTES.items() if ended[cause])
    return tuple(notes)
