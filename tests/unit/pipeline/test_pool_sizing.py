"""The pool's sizing rule (pipeline/pool_sizing.py), each part given the time: what a key keeps ready follows
its busiest moment of late, between its floor and ceiling."""

from __future__ import annotations

import pytest

from orchestrator.pipeline.config import MAX_READY_LIMIT, KeyBounds
from orchestrator.pipeline.pool_sizing import (
    FILL_WEIGHT,
    MIN_WINDOW_S,
    Demand,
    FillTime,
    fills_wanted,
    surplus,
    target,
)

HOLD_S = 60.0


def test_a_burst_is_the_demand_at_once() -> None:
    demand = Demand()
    for i in range(20):  # 20 claims within 0.2 s
        demand.claimed(100.0 + i * 0.01, MIN_WINDOW_S)
    assert demand.level(100.2, HOLD_S) == 20


def test_claims_further_apart_than_the_window_are_not_at_once() -> None:
    demand = Demand()
    for i in range(10):  # one every 1.5 s, with a 1 s window: never two at once
        demand.claimed(i * 1.5, 1.0)
    assert demand.level(15.0, HOLD_S) == 1


def test_a_steady_stream_needs_its_rate_times_the_window() -> None:
    """Eight claims a second, a 2 s window: sixteen are taken within the time one is replaced."""
    demand = Demand()
    for i in range(80):
        demand.claimed(i * 0.125, 2.0)
    assert demand.level(10.0, HOLD_S) == 16


def test_the_busiest_moment_is_kept_for_the_hold_then_the_next_busiest() -> None:
    demand = Demand()
    for i in range(12):
        demand.claimed(0.0 + i * 0.01, 1.0)  # a burst of 12 at t=0
    for i in range(5):
        demand.claimed(30.0 + i * 0.01, 1.0)  # one of 5 at t=30
    assert demand.level(59.0, HOLD_S) == 12  # a burst that comes back within the hold finds its sandboxes
    assert demand.level(61.0, HOLD_S) == 5  # the burst of 12 is forgotten, the later one is not
    assert demand.level(91.0, HOLD_S) == 0  # no claim within the hold: no demand


def test_an_announced_run_is_one_wanted_for_the_hold() -> None:
    demand = Demand()
    demand.expect(0.0)
    assert demand.level(1.0, HOLD_S) == 1
    assert demand.level(61.0, HOLD_S) == 0
    for i in range(3):
        demand.claimed(70.0 + i * 0.1, 1.0)
    demand.expect(70.5)  # never lowers what claims showed
    assert demand.level(71.0, HOLD_S) == 3


def test_counting_stops_where_no_ceiling_could_use_more() -> None:
    demand = Demand()
    for i in range(MAX_READY_LIMIT + 50):
        demand.claimed(i * 1e-6, 1.0)
    assert demand.level(0.1, HOLD_S) == MAX_READY_LIMIT


def test_the_window_is_two_fills_and_at_least_its_minimum() -> None:
    fills = FillTime()
    assert fills.window_s() == MIN_WINDOW_S  # nothing measured yet
    fills.observe(0.2)
    assert fills.window_s() == MIN_WINDOW_S  # fast fills: the minimum
    fills.observe(2.2)  # a slow one weighs in, smoothed
    assert fills.seconds == pytest.approx(FILL_WEIGHT * 2.2 + (1 - FILL_WEIGHT) * 0.2)
    for _ in range(30):  # a cluster's pods: 2 s each
        fills.observe(2.0)
    assert fills.window_s() == pytest.approx(4.0, abs=0.01)


@pytest.mark.parametrize(
    ("demand", "bounds", "expected"),
    [
        (0, KeyBounds(1, 4), 1),  # no demand: the floor
        (0, KeyBounds(0, 4), 0),
        (3, KeyBounds(1, 4), 3),
        (20, KeyBounds(1, 4), 4),  # never above the ceiling
        (20, KeyBounds(2, 20), 20),
        (1, KeyBounds(5, 5), 5),  # a fixed size (per_key)
    ],
)
def test_the_target_is_the_demand_between_floor_and_ceiling(demand: int, bounds: KeyBounds, expected: int) -> None:
    assert target(demand, bounds) == expected


def test_fills_make_up_what_is_short_within_the_room_left() -> None:
    assert fills_wanted(target=5, ready=1, filling=1, room=10) == 3
    assert fills_wanted(target=5, ready=1, filling=1, room=2) == 2  # max_total leaves room for two
    assert fills_wanted(target=2, ready=2, filling=1, room=10) == 0
    assert fills_wanted(target=5, ready=0, filling=0, room=0) == 0


def test_only_ready_sandboxes_above_the_target_are_surplus() -> None:
    assert surplus(target=1, ready=4) == 3
    assert surplus(target=4, ready=4) == 0
    assert surplus(target=0, ready=2) == 2
