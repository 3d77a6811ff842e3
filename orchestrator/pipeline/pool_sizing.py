"""How many sandboxes one pool key keeps: the knowledge, as small parts that are given the time (no clock, no
engine), so that each is tested alone.

The rule, per key (docs/pool.md, "Sized by demand"):

* claims that come within one **window** count as at once: a sandbox taken is replaced no sooner than a fill
  later, so that many are needed ready to meet them. The window is ``WINDOW_FILLS`` times the key's measured
  fill time (``FillTime``), at least ``MIN_WINDOW_S``. Every claim counts, a miss as much as a hit: a miss is
  demand the pool did not meet.
* the key's **demand** is its busiest window within the last ``shrink_after_s`` (``Demand``): a burst raises it
  at once, and it falls only that long after the burst (a burst that comes back within it finds its sandboxes).
* its **target** is the demand between the key's floor and ceiling (``target``); ready and filling sandboxes
  are kept at it: a fill for each one short (``fills_wanted``, within the room max_total leaves), and the ready
  ones above it retired (``surplus``).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

from orchestrator.pipeline.config import MAX_READY_LIMIT, KeyBounds

#: the shortest window: claims within it count as at once, however fast fills are (a fill time is measured
#: only once a fill ended, and a run's own time comes before its sandbox's replacement is even begun)
MIN_WINDOW_S = 1.0
#: the window in fill times: a taken sandbox is replaced once its run is over and a fill later
WINDOW_FILLS = 2.0
#: the weight of the latest fill in the smoothed fill time
FILL_WEIGHT = 0.3


@dataclass
class FillTime:
    """How long one fill of the key takes (create and start, until it waits), exponentially smoothed."""

    seconds: float | None = None

    def observe(self, seconds: float) -> None:
        self.seconds = seconds if self.seconds is None else FILL_WEIGHT * seconds + (1 - FILL_WEIGHT) * self.seconds

    def window_s(self) -> float:
        """Claims within this long of each other count as at once."""
        return max(MIN_WINDOW_S, WINDOW_FILLS * (self.seconds or 0.0))


@dataclass
class Demand:
    """A key's claims: the most that came within one window, at their busiest within the last ``hold_s``."""

    # claim times within the latest window (never more than any ceiling could use)
    _recent: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=MAX_READY_LIMIT))
    # (when, claims within the window then), the counts decreasing from the front: a sliding maximum, whose
    # front is the busiest moment still remembered
    _peaks: collections.deque[tuple[float, int]] = field(default_factory=collections.deque)

    def claimed(self, now: float, window_s: float) -> None:
        """A claim of the key at ``now``, ready or not."""
        while self._recent and self._recent[0] <= now - window_s:
            self._recent.popleft()
        self._recent.append(now)
        self._peak(now, len(self._recent))

    def expect(self, now: float) -> None:
        """A run of the key is announced (``Orchestrator.prestart``): at least one is wanted, for as long as a
        claim would be remembered."""
        self._peak(now, 1)

    def _peak(self, now: float, count: int) -> None:
        while self._peaks and self._peaks[-1][1] <= count:  # a later moment at least as busy outlasts it
            self._peaks.pop()
        self._peaks.append((now, count))

    def level(self, now: float, hold_s: float) -> int:
        """The busiest window within the last ``hold_s`` (0: no claim in that time)."""
        while self._peaks and self._peaks[0][0] <= now - hold_s:
            self._peaks.popleft()
        return self._peaks[0][1] if self._peaks else 0


def target(demand: int, bounds: KeyBounds) -> int:
    """What a key keeps ready or filling: its demand, never below its floor nor above its ceiling."""
    return max(bounds.floor, min(demand, bounds.ceiling))


def fills_wanted(target: int, ready: int, filling: int, room: int) -> int:
    """How many fills to begin: those short of ``target``, within the ``room`` left in the whole pool."""
    return max(0, min(target - ready - filling, room))


def surplus(target: int, ready: int) -> int:
    """How many ready sandboxes to retire: those above ``target`` (fills under way are not counted against the
    ready ones: when they end above it, they are retired then, never a ready one in their stead)."""
    return max(0, ready - target)
