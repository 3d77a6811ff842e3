"""``sandboxctl profiles whatif --set memory=512m``: each recorded run of a profile replayed under proposed
limits — which would have been OOM-killed, timed out, stopped at the pids limit, stopped at a write budget,
or had output cut at a cap, named; which cannot be known, counted apart, never guessed; how much room the
rest had; and, for a node size, how many runs a node holds at once before and after.

What a run's record can say: a value it reached (a memory peak, a wall time) it reaches again, so a limit
at or below it is met. A run that ended at a limit only says it needed more than that limit: under a lower
one it ends so again, under a higher one its outcome is unknown. A run cut short at a limit the proposal
raises would have gone on: whatever it had not reached yet is unknown. A memory peak counts page cache: a run
not OOM-killed whose peak reached its own limit (``recommend.RECLAIMED_PERCENT``) had cache reclaimed there,
so under a limit at or below that peak its outcome is unknown, not an OOM kill. CPU is throttled, never
killed: fewer cpus than a run used make it slower (its wall time estimated to grow by used ÷ new), not killed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, Literal

from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.profile_usage import (
    CpuReplay,
    LimitReplay,
    NodeCapacity,
    NodeSize,
    Number,
    Percentiles,
    RunList,
    WhatIfReport,
)
from orchestrator.domain.usage import MEASURES, EndCause, Measure, RunLimits, RunUsage
from orchestrator.profiles.limit_keys import USAGE_KEYS, limit_of, parse_limits
from orchestrator.profiles.recommend import RULES, reached_limit
from orchestrator.profiles.usage_stats import percentiles, run_list

__all__ = [
    "CpuReplay",
    "LimitReplay",
    "NodeCapacity",
    "NodeSize",
    "Percentiles",
    "RunList",
    "WhatIfReport",
    "runs_per_node",
    "whatif",
]

Outcome = Literal["meets", "within", "unknown"]


@dataclass(frozen=True, slots=True)
class _Effect:
    """What a limit does to a run that meets it."""

    passes: Callable[[Number, Number], bool]  # whether a value meets the limit
    kills: bool  # the run ends there (False: it goes on, only its output is cut)


def _reaches(value: Number, limit: Number) -> bool:
    return value >= limit


def _passes(value: Number, limit: Number) -> bool:
    return value > limit


# a memory peak, a pids count or a wall time at the limit is the limit met; a write budget kills, and an
# output cap cuts, only what goes past it
EFFECTS: Final[Mapping[EndCause, _Effect]] = {
    EndCause.OOM: _Effect(_reaches, kills=True),
    EndCause.PIDS_LIMIT: _Effect(_reaches, kills=True),
    EndCause.WALL_TIMEOUT: _Effect(_reaches, kills=True),
    EndCause.WRITE_BUDGET: _Effect(_passes, kills=True),
    EndCause.OUTPUT_CAP: _Effect(_passes, kills=False),
}
# the limits a run can be replayed against: every measure that ends (or cuts) a run, by its profile key
_REPLAYED: Final[Mapping[str, tuple[Measure, EndCause]]] = {
    m.limit_field: (m, m.cause) for m in MEASURES if m.cause is not None
}
# the recommendation rules that leave a run out whose value reached its own limit without ending there (memory:
# the kernel reclaims page cache at the limit), by profile key
_RECLAIMED: Final = {rule.key: rule for rule in RULES if rule.reached_percent is not None and rule.key in _REPLAYED}
# end causes more than one limit leads to: the value says which one it was
_SHARED: Final = frozenset(c for c in EndCause if sum(cause is c for _, cause in _REPLAYED.values()) > 1)


def whatif(
    runs: Iterable[RunUsage],
    *,
    profile: str,
    current: RunLimits,
    proposed: Mapping[str, str | float | int],
    node: NodeSize | None,
) -> WhatIfReport:
    """Replay ``profile``'s runs (rows of another profile are ignored) under ``current`` with ``proposed``
    (``limits:`` keys, values as typed: validated by the profile schema, ``INPUT.INVALID`` naming the keys
    otherwise). A run whose own limit was narrower than the profile's (a request's timeout, a policy cap, a
    grant) keeps that narrowing under the proposal."""
    if not proposed:
        raise InputInvalid("no limit proposed (KEY=VALUE, e.g. memory=512m)", details={"fields": ["limits"]})
    values = parse_limits(proposed)
    now = {key: limit_of(current, key) for key in values}
    rows = [run for run in runs if run.profile == profile]
    replayer = _Replayer(values, now)
    limits = tuple(replayer.limit(key, rows) for key in USAGE_KEYS if key in values and key in _REPLAYED)
    cpu = replayer.cpu(rows) if "cpus" in values else None
    notes = []
    if narrowed := sum(1 for run in rows if replayer.narrowed(run)):
        notes.append(
            f"{narrowed} runs had a limit narrower than the profile's (a request's timeout, a policy cap, a grant): "
            "they keep it under the proposal"
        )
    for key in _RECLAIMED.keys() & values.keys():
        if reclaimed := sum(1 for run in rows if replayer.reclaimed(run, key)):
            notes.append(
                f"{reclaimed} runs reached their {key} limit without an OOM kill: the kernel reclaimed page cache "
                "there, so their need is unknown under a limit at or below their peak and below their own"
            )
    return WhatIfReport(
        profile=profile,
        runs=len(rows),
        proposed=values,
        current=now,
        limits=limits,
        cpu=cpu,
        node=None if node is None else _capacity(node, current, values),
        notes=tuple(notes),
    )


class _Replayer:
    """The proposal, applied run by run."""

    def __init__(self, proposed: Mapping[str, Number], current: Mapping[str, Number]) -> None:
        self.proposed = proposed
        self.current = current

    def new_limit(self, run: RunUsage, key: str) -> Number:
        """``key``'s limit for ``run`` under the proposal: the proposed value, or the run's own where that was
        narrower than the profile's (a request, a cap or a grant narrowed it, and would again)."""
        own = limit_of(run.limits, key)
        if key not in self.proposed:
            return own
        return min(own, self.proposed[key]) if own < self.current[key] else self.proposed[key]

    def narrowed(self, run: RunUsage) -> bool:
        return any(limit_of(run.limits, key) < self.current[key] for key in self.proposed)

    def cut_short(self, run: RunUsage) -> bool:
        """Whether ``run`` ended at a limit the proposal raises for it: it would have gone on."""
        effect = EFFECTS.get(run.cause)
        if effect is None or not effect.kills:
            return False
        return any(
            self.new_limit(run, key) > limit_of(run.limits, key)
            for key, (_, cause) in _REPLAYED.items()
            if cause is run.cause and key in self.proposed
        )

    def outcome(self, run: RunUsage, key: str) -> tuple[Outcome, Number | None]:
        """What ``run`` meets at ``key``'s proposed limit, with its value ÷ that limit when within."""
        measure, cause = _REPLAYED[key]
        effect = EFFECTS[cause]
        value, own, new = measure.value(run), limit_of(run.limits, key), self.new_limit(run, key)
        if effect.kills and self.ended_here(run, key):
            if new <= own or (value is not None and effect.passes(value, new)):
                return "meets", None  # it needed more than it had, which is at least the new limit
            return "unknown", None  # what it needed past its old limit is not on the record
        if value is None:
            return "unknown", None
        if self.reclaimed(run, key) and value >= new and new < own:
            return "unknown", None  # its peak is page cache the kernel reclaimed at its limit: its need is unknown
        if effect.passes(value, new) and not (self.reclaimed(run, key) and new >= own):
            return "meets", None
        if self.cut_short(run):
            return "unknown", None
        return "within", value / new

    def reclaimed(self, run: RunUsage, key: str) -> bool:
        """Whether ``run`` reached its own ``key`` limit without ending there: the kernel reclaimed page cache
        at it (memory), so the value is no need."""
        rule = _RECLAIMED.get(key)
        if rule is None or rule.at_limit is None or run.cause is rule.at_limit:
            return False
        value = _REPLAYED[key][0].value(run)
        return value is not None and reached_limit(rule, run, value)

    def ended_here(self, run: RunUsage, key: str) -> bool:
        measure, cause = _REPLAYED[key]
        if run.cause is not cause:
            return False
        if run.cause not in _SHARED:
            return True
        value = measure.value(run)  # bytes or files, stdout or stderr: the one past its limit
        return value is not None and EFFECTS[run.cause].passes(value, limit_of(run.limits, key))

    def limit(self, key: str, rows: Sequence[RunUsage]) -> LimitReplay:
        meets: list[str] = []
        unknown: list[str] = []
        used: list[Number] = []
        already = 0
        for run in rows:
            outcome, fraction = self.outcome(run, key)
            if outcome == "meets":
                meets.append(run.execution_id)
                already += self.ended_here(run, key)
            elif outcome == "unknown":
                unknown.append(run.execution_id)
            elif fraction is not None:
                used.append(fraction)
        used.sort()
        _, cause = _REPLAYED[key]
        return LimitReplay(
            key=key,
            current=self.current[key],
            proposed=self.proposed[key],
            ends_as=cause,
            kills=EFFECTS[cause].kills,
            would_meet=run_list(meets),
            already=already,
            unknown=run_list(unknown),
            within=len(used),
            used_of_limit=percentiles(used),
        )

    def cpu(self, rows: Sequence[RunUsage]) -> CpuReplay:
        unknown: list[str] = []
        slower: list[str] = []
        timed_out: list[str] = []
        used: list[float] = []
        for run in rows:
            cores, wall = run.cores, run.command_wall_seconds
            if cores is None or wall is None:
                unknown.append(run.execution_id)
                continue
            cpus = self.new_limit(run, "cpus")
            used.append(cores / cpus)
            if cores > cpus:
                slower.append(run.execution_id)
                timeout = self.new_limit(run, "wall_timeout_s")
                if wall < timeout <= wall * cores / cpus:  # not one the wall replay already knows times out
                    timed_out.append(run.execution_id)
        used.sort()
        return CpuReplay(
            current=float(self.current["cpus"]),
            proposed=float(self.proposed["cpus"]),
            known=len(used),
            unknown=run_list(unknown),
            slower=run_list(slower),
            would_time_out_estimated=run_list(timed_out),
            used_of_limit=percentiles(used),
        )


def runs_per_node(node: NodeSize, cpus: float, memory_bytes: int) -> int:
    """How many runs requesting ``cpus`` and ``memory_bytes`` fit on ``node`` at once. Exact decimal ratios
    (4 ÷ 0.1 is 40, where floats say 39.99…): the cores as written, not their binary approximations."""
    by_cpu = Fraction(repr(node.cpus)) / Fraction(repr(cpus))
    return math.floor(min(by_cpu, Fraction(node.memory_bytes, memory_bytes)))


def _capacity(node: NodeSize, current: RunLimits, proposed: Mapping[str, Number]) -> NodeCapacity:
    before = runs_per_node(node, current.cpus, current.memory_bytes)
    after = runs_per_node(
        node, float(proposed.get("cpus", current.cpus)), int(proposed.get("memory", current.memory_bytes))
    )
    return NodeCapacity(node=node, current=before, proposed=after, gain=after - before)
