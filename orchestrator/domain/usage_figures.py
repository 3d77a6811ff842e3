"""What the profiles page asks of the store, and what the store answers, as data: which rows (``Scope``), what
a recommendation ranks (``Sample``), the buckets of a histogram (``Buckets``), and the figures themselves
(``Summary`` then ``Figures``). The store computes them in SQL (``state.usage_distribution``); the pipeline
says what to compute and makes the API's answer of them (``pipeline.profile_distribution``). No I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from orchestrator.domain.usage import EndCause, RunUsage

Number = int | float


@dataclass(frozen=True, slots=True)
class Scope:
    """The rows: ``profile``'s runs that ended in [since, until], of ``tenants`` (None: every tenant)."""

    profile: str
    since: float
    until: float
    tenants: tuple[str, ...] | None


@dataclass(frozen=True, slots=True)
class Sample:
    """What a recommendation rule ranks (``profiles.recommend.Rule``): ``measure``'s known value, or — for a
    run that ended at ``cause`` — what it needed at least: ``bump(max(its limit, its value or 0))``, its limit
    the ``RunLimits`` field ``limit_field``. ``bump`` never decreases (a larger need is bumped to no less).

    ``ranked_at_limit`` False: a run that ended at ``cause`` is no sample; its limit is its largest value at the
    limit, and those whose limit is at or above ``current`` (the profile's limit now) are counted apart
    (``SampleStats.at_current``). ``reached_percent``: a run not ended at ``cause`` whose value is at or above
    this percentage of its own limit is no sample (a memory peak the kernel held at the limit)."""

    measure: str
    percent: int
    cause: EndCause | None = None
    limit_field: str | None = None
    bump: Callable[[Number], Number] | None = None
    ranked_at_limit: bool = True
    current: Number | None = None
    reached_percent: int | None = None


@dataclass(frozen=True, slots=True)
class SampleStats:
    """A sample's count, its ``percent``-th percentile (nearest rank; None without samples), its largest
    value among the runs that ended at its cause (None: no run did) and, for a sample that does not rank those
    runs, how many of them had a limit at or above ``Sample.current``."""

    count: int
    percentile: Number | None
    largest_at_limit: Number | None
    at_current: int = 0


@dataclass(frozen=True, slots=True)
class Summary:
    """The first pass over the rows: what bucket widths and recommended values are made from."""

    runs: int
    largest: Mapping[str, Number | None]  # per measure: its largest known value
    samples: Mapping[str, SampleStats]  # per name the caller gave its Sample
    ended: Mapping[EndCause, int]  # runs per end cause asked for


@dataclass(frozen=True, slots=True)
class Buckets:
    """``count`` buckets of one width from 0, the width ``divisor / scale``: bucket i holds [edges[i],
    edges[i + 1]) (the last one also its right edge). Each edge is ``i x divisor / scale``, the nearest float to
    the decimal it reads as: a width of 0.05 is scale 100, divisor 5, and edge 3 is 0.15, where 3 x 0.05 would be
    0.15000000000000002 (and 0.15 would fall below it)."""

    count: int
    scale: int
    divisor: int

    @property
    def edges(self) -> tuple[Number, ...]:
        if self.scale == 1:
            return tuple(i * self.divisor for i in range(self.count + 1))
        return tuple(i * self.divisor / self.scale for i in range(self.count + 1))


@dataclass(frozen=True, slots=True)
class Counts:
    """A histogram's counts, one per bucket, and their sum: the runs with the measure known."""

    counts: tuple[int, ...]
    known: int


@dataclass(frozen=True, slots=True)
class Figures:
    summary: Summary
    histograms: Mapping[str, Counts]  # per measure the plan gave buckets
    newest_at_limit: list[RunUsage]  # the newest runs that ended at one of the causes asked for, newest first


#: the second pass's buckets per measure, from the first pass's summary (it runs on the store's thread, between
#: the two passes: a pure function, and quick)
Plan = Callable[[Summary], Mapping[str, Buckets]]
