"""What every usage answer (``usage_report``, ``recommend``, ``whatif``) shares: the output model's base,
nearest-rank percentiles, and bounded lists of runs.

The models here and in those modules are the CLI's ``--json`` and the HTTP API's body: frozen, no extra
field, every field described.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from orchestrator.domain.profile_usage import Number, Output, Percentiles, RunList

__all__ = ["Number", "Output", "Percentiles", "RunList", "nearest_rank", "percentiles", "rank", "run_list"]


#: The percentiles every summary gives (whole percents, so that the rank is exact integer arithmetic).
PERCENTS: Final = (50, 90, 95, 99)

#: How many execution ids a list of runs names at most (its ``total`` counts them all).
MAX_IDS: Final = 20


def nearest_rank(ordered: Sequence[Number], percent: int) -> Number:
    """The ``percent``-th percentile of the ascending ``ordered`` by the nearest-rank method: the value at
    rank ceil(percent/100 x n) (1-based), so always one of the values, never an interpolation between two
    (p50 of [1, 2, 3, 4] is 2; p99 of fewer than 100 values is the largest). ``ordered`` must not be empty."""
    return ordered[rank(len(ordered), percent) - 1]


def rank(count: int, percent: int) -> int:
    """The 1-based rank of the ``percent``-th percentile of ``count`` ascending values (nearest rank):
    ceil(percent/100 x count), at least 1 (the store ranks its samples in SQL with the same number)."""
    return max(1, (percent * count + 99) // 100)  # ceil(percent * count / 100) in integers: no float rounding


def percentiles(ordered: Sequence[Number]) -> Percentiles | None:
    """The summary of the ascending ``ordered``; None when it is empty (nothing known is not 0)."""
    if not ordered:
        return None
    p50, p90, p95, p99 = (nearest_rank(ordered, p) for p in PERCENTS)
    return Percentiles(count=len(ordered), p50=p50, p90=p90, p95=p95, p99=p99, max=ordered[-1])


def run_list(execution_ids: Iterable[str]) -> RunList:
    """A ``RunList`` of every id in ``execution_ids``, the first ``MAX_IDS`` named."""
    named: list[str] = []
    total = 0
    for execution_id in execution_ids:
        if total < MAX_IDS:
            named.append(execution_id)
        total += 1
    return RunList(total=total, execution_ids=tuple(named))
