"""``sandboxctl profiles recommend``: limits for a profile from what its runs used (docs/profiles.md,
"Recommendations", gives each rule and its source).

One rule per resource, as data (``RULES``): the measure it reads, the percentile and margin it takes, and
what a run that ended at the limit says — only that it needed more than the limit it had, so its sample is
that limit, bumped for memory and pids the way the VPA recommender bumps an OOM kill. Every value is
rounded up to the resource's step and kept within the profile schema's bounds, and the changed ones are
also given as a ``limits:`` patch in the profile files' own form.
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
    bump: Callable[[Number], Number] | None = None  # what such a run needed at least (None: its limit)
    keep_current: tuple[str, str] | None = None  # (id, text) when runs ended at the limit: never below it
    floor_rule: tuple[str, str] | None = None  # (id, text) when a bumped sample of such a run sets the value
    near_limit: Callable[[RunUsage, Number], bool] | None = None  # (run, its value): at the limit, not ended there
    cross_checks: Callable[[Sequence[Number]], dict[str, Number]] = _no_checks


# fmt: off
RULES: Final[tuple[Rule, ...]] = (
    Rule("cpus", "cores", "known CPU use", lambda u: u.cores, lambda lim: lim.cpus,
         percent=95, margin=0.0, step=0.05, minimum=0.05, maximum=256,
         rule=("cpus.krr_p95", "p95 of the cores used (CPU s ÷ wall s), KRR's CPU request; up to 0.05 cores"),
         near_limit=_throttled, cross_checks=_vpa_target),
    Rule("memory", "bytes", "a known memory peak", lambda u: u.memory_peak_bytes, lambda lim: lim.memory_bytes,
         percent=95, margin=VPA_MARGIN, step=MIB, minimum=6 * MIB, maximum=TIB,
         rule=("memory.vpa_upper_bound", "p95 of the memory peaks + 15 % (the VPA recommender's upper bound)"),
         at_limit=EndCause.OOM, bump=_vpa_oom_bump,
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
    Rule("wall_timeout_s", "s", "a known wall time", lambda u: u.wall_seconds, lambda lim: lim.wall_timeout_s,
         percent=99, margin=0.5, step=1.0, minimum=1.0, maximum=86_400.0,
         rule=("wall.p99_margin", "p99 of the wall times + 50 %, in whole seconds"),
         at_limit=EndCause.WALL_TIMEOUT,
         keep_current=("wall.timeouts_keep_current",
                       "runs timed out: how long they needed is unknown (a hung command looks the same), so never "
                       "below the current limit")),
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
        notes=_notes(rows, throttled),
    )


def _recommend(
    rule: Rule, rows: Sequence[RunUsage], current: RunLimits, min_runs: int, min_pids: int
) -> ResourceRecommendation:
    samples: list[Number] = []
    ended_at_limit: list[Number] = []  # the samples of the runs that ended at the limit
    near_limit = 0  # runs at the limit that did not end there (throttled CPU)
    for run in rows:
        value = rule.value(run)
        if rule.at_limit is not None and run.cause is rule.at_limit:
            need = max(rule.own_limit(run.limits), value or 0)  # it needed more than it had
            need = rule.bump(need) if rule.bump else need
            samples.append(need)
            ended_at_limit.append(need)
        elif value is not None:
            samples.append(value)
            if rule.near_limit is not None and rule.near_limit(run, value):
                near_limit += 1
    samples.sort()
    at_limit = near_limit if rule.near_limit else len(ended_at_limit)
    now = limit_of(current, rule.key)

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

    if len(samples) < max(min_runs, 1):  # a percentile of nothing is no value
        reason = f"{len(samples)} runs with {rule.known_as}, {min_runs} needed"
        if ended_at_limit:
            reason += f" ({len(ended_at_limit)} of them ended at the limit)"
        return ResourceRecommendation(
            key=rule.key, unit=rule.unit, current=now, recommended=None, change=None, confidence="none",
            rule="too_few_runs", rule_text="no value from fewer than min_runs samples", reason=reason,
            inputs=inputs(None),
        )  # fmt: skip
    chosen = rule_value(
        rule,
        percentile=nearest_rank(samples, rule.percent),
        largest_at_limit=max(ended_at_limit) if ended_at_limit else None,
        current=now,
        min_pids=min_pids,
    )
    (rule_id, text), value = chosen.rule, chosen.value
    return ResourceRecommendation(
        key=rule.key, unit=rule.unit, current=now, recommended=value, change=_change(value, now),
        confidence=confidence(len(samples)), rule=rule_id, rule_text=text, reason=None,
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
    rule: Rule, *, percentile: Number, largest_at_limit: Number | None, current: Number, min_pids: int
) -> RuleValue:
    """The value ``rule`` gives from the ``rule.percent``-th percentile of its samples (at least ``min_runs``
    of them). ``largest_at_limit``: the largest sample of a run that ended at this limit (None: no run did).
    Shared by ``recommend`` (samples in memory) and the service's distribution (samples ranked in SQL), so that
    both give the same value from the same runs."""
    chosen, floor, base = rule.rule, None, percentile
    if rule.floor_rule and largest_at_limit is not None and largest_at_limit >= base:
        chosen, floor, base = rule.floor_rule, largest_at_limit, largest_at_limit
    value = _within(rule, _round_up(base * (1 + rule.margin), rule.step), min_pids)
    if rule.keep_current and largest_at_limit is not None and value < current:
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


def _notes(rows: Sequence[RunUsage], throttled: int) -> tuple[str, ...]:
    notes = []
    if throttled:
        notes.append(
            f"{throttled} runs used at least 95 % of their cpus: CPU is throttled, never killed, so what they "
            "would have used is unknown and a cpus recommendation cannot go above what they had"
        )
    ended = Counter(run.cause for run in rows)
    notes.extend(text.format(n=ended[cause]) for cause, text in _CAUSE_NOTES.items() if ended[cause])
    return tuple(notes)
