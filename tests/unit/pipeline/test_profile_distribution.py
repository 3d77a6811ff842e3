"""The profiles page's answers (pipeline/profile_distribution.py) over a real store: round bucket widths, the
limit and recommended lines equal to what ``recommend`` and ``GET .../recommendation`` give from the same runs,
a run at a limit with what it reached, the profiles in force with their limits."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.domain.usage import EndCause, RunUsage
from orchestrator.domain.usage_figures import Buckets
from orchestrator.pipeline.profile_distribution import buckets_for, distribution, profile_list
from orchestrator.pipeline.profile_usage import recommendation
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.state.store import StateStore
from tests.unit.profiles.usage_runs import GIB, LIMITS, MIB, run, with_limits

PROFILE = "workspace-write"  # the built-in profile: LIMITS are its limits


@pytest.mark.parametrize(
    ("unit", "top", "expected", "last_edge"),
    [
        ("bytes", 2 * GIB, Buckets(32, 1, 64 * MIB), 2 * GIB),  # 2 GiB / 40 = 51.2 MiB: 64 MiB
        ("bytes", 512 * MIB, Buckets(32, 1, 16 * MIB), 512 * MIB),
        ("cores", 2.0, Buckets(40, 100, 5), 2.0),  # 0.05 cores
        ("s", 1800.0, Buckets(36, 1, 50), 1800),  # 45 s: 50 s
        ("s", 300.0, Buckets(30, 1, 10), 300),  # 7.5 s: 10 s
        ("s", 0.9, Buckets(18, 100, 5), 0.9),  # 0.0225 s: the next 1, 2 or 5 x 10^k is 0.05 s
    ],
)
def test_bucket_widths_read_well(unit: str, top: float, expected: Buckets, last_edge: float) -> None:
    got = buckets_for(unit, top)
    assert got == expected
    assert got.edges[-1] == pytest.approx(last_edge) and got.edges[-1] >= top
    assert len(got.edges) == got.count + 1 <= 41


def test_nothing_above_zero_is_one_bucket() -> None:
    assert buckets_for("cores", 0) == Buckets(1, 1, 1)


def history(n: int) -> list[RunUsage]:
    rng = random.Random(6)
    out = []
    for i in range(n):
        roll = rng.random()
        cause = EndCause.OOM if roll < 0.03 else EndCause.WALL_TIMEOUT if roll < 0.07 else EndCause.OK
        narrowed = cause is EndCause.WALL_TIMEOUT and roll >= 0.05  # a grant's 5 s bound: says nothing of 300 s
        wall = (5.0 if narrowed else 300.0) if cause is EndCause.WALL_TIMEOUT else rng.uniform(0.1, 200)
        known = rng.random() > 0.1
        # peaks up to 600 MiB of a 512 MiB limit: those at 95 % of it or more without an OOM (page cache) are
        # left out of the memory samples on both paths, as the two on each side of 95 % exactly
        peak = {0: 510_027_366, 1: 510_027_367}.get(i % 50, int(rng.uniform(1, 600) * MIB))
        out.append(
            run(
                f"ex-{i:04}",
                profile=PROFILE,
                cause=cause,
                limits=with_limits(wall_timeout_s=5.0) if narrowed else LIMITS,
                ended_at=1_000.0 + i,
                memory_peak_bytes=peak if known else None,
                cpu_seconds=wall * rng.uniform(0.01, 1.2) if known else None,
                wall_seconds=wall,
                tenant=rng.choice(("team-a", "team-b")),
            )
        )
    return out


@pytest.fixture
async def filled(tmp_path: Path) -> AsyncIterator[tuple[StateStore, list[RunUsage]]]:
    store, runs = StateStore(tmp_path / "state.db"), history(700)
    for r in runs:
        await store.put_usage(r)
    try:
        yield store, runs
    finally:
        await store.close()


async def test_the_lines_are_the_limit_and_the_recommendation(filled: tuple[StateStore, list[RunUsage]]) -> None:
    store, runs = filled
    profiles = Profiles.under(None)
    for tenants, seen in ((None, runs), (("team-a",), [r for r in runs if r.tenant == "team-a"])):
        answer = await distribution(store, profiles, PROFILE, since=0, until=1e9, tenants=tenants, min_runs=20)
        advice = {r.key: r for r in recommendation(seen, profiles, PROFILE, min_runs=20).resources}
        by = {h.measure: h for h in answer.histograms}
        assert answer.runs == len(seen)
        assert (by["memory_peak_bytes"].recommended, by["memory_peak_bytes"].recommended_rule) == (
            advice["memory"].recommended,
            advice["memory"].rule,
        )
        assert by["cores"].recommended == advice["cpus"].recommended
        assert by["wall_seconds"].recommended == advice["wall_timeout_s"].recommended
        cpus, wall = advice["cpus"].recommended, advice["wall_timeout_s"].recommended
        assert cpus is not None and wall is not None
        assert by["cpu_seconds"].recommended == cpus * wall
        assert by["cpu_seconds"].recommended_rule == f"{advice['cpus'].rule} x {advice['wall_timeout_s'].rule}"
        assert (by["memory_peak_bytes"].limit, by["cores"].limit, by["wall_seconds"].limit) == (512 * MIB, 1.0, 300.0)
        assert by["cpu_seconds"].limit == 300.0  # 1 cpu for the whole 300 s
        for h in answer.histograms:
            known = [v for v in (value_of(h.measure, r) for r in seen) if v is not None]
            assert h.known == len(known) == sum(h.counts) and h.unknown == len(seen) - len(known)
            assert h.max == max(known)
            # both lines and every value fall on the chart
            assert h.edges[-1] >= max(v for v in (h.limit, h.recommended, h.max) if v is not None)
        ended = [r for r in seen if r.cause in {EndCause.OOM, EndCause.WALL_TIMEOUT}]
        assert answer.ended_at_limit.total == len(ended)
        assert answer.ended_at_limit.by_cause["oom"] == sum(r.cause is EndCause.OOM for r in seen)
        newest = sorted(ended, key=lambda r: r.ended_at, reverse=True)[:50]
        assert [r.execution_id for r in answer.ended_at_limit.runs] == [r.execution_id for r in newest]


def _ok(n: int, wall: float, memory: int = 4 * MIB, name: str = "ok") -> list[RunUsage]:
    return [
        run(f"{name}-{i}", profile=PROFILE, wall_seconds=wall, cpu_seconds=wall / 4, memory_peak_bytes=memory)
        for i in range(n)
    ]


def _timeout(name: str, limit: float = 300.0) -> RunUsage:
    return run(
        name,
        profile=PROFILE,
        cause=EndCause.WALL_TIMEOUT,
        wall_seconds=limit,
        memory_peak_bytes=4 * MIB,
        limits=with_limits(wall_timeout_s=limit),
    )


# the review's cases, each with the value recommend() gives (test_recommend.py works them out by hand)
REVIEW_CASES = {
    # 19 x 10 s and a timeout at the profile's 300 s: 15 s from the 19, kept at 300
    "timeout at the profile's limit": ([*_ok(19, 10.0), _timeout("late")], "wall_timeout_s", 300.0),
    # a grant's 5 s timeout, the rest at 1 s: 2 s, not kept
    "timeout under a narrower limit": ([*_ok(20, 1.0), _timeout("granted", 5.0)], "wall_timeout_s", 2.0),
    # 19 of 1 s and the narrowed timeout: too few
    "narrowed timeout, too few": ([*_ok(19, 1.0), _timeout("granted", 5.0)], "wall_timeout_s", None),
    # every run timed out at 300 s, one under a wider grant: keep 300 with no sample
    "only timeouts": ([_timeout(f"t{i}") for i in range(19)] + [_timeout("wide", 600.0)], "wall_timeout_s", 300.0),
    # 20 runs at 4 MiB and 5 at 511 MiB of 512 MiB, ok (page cache): 6 MiB, from the 20
    "page cache at the limit": (_ok(20, 1.0) + _ok(5, 1.0, 511 * MIB, "cat"), "memory", 6 * MIB),
    # 19 at 4 MiB and one at its limit: too few memory samples
    "page cache, too few": (_ok(19, 1.0) + _ok(1, 1.0, 511 * MIB, "cat"), "memory", None),
}
_LINE_OF_KEY = {"wall_timeout_s": "wall_seconds", "memory": "memory_peak_bytes"}


@pytest.mark.parametrize("case", list(REVIEW_CASES))
async def test_the_reviews_cases_give_the_same_value_on_both_paths(tmp_path: Path, case: str) -> None:
    runs, key, expected = REVIEW_CASES[case]
    store, profiles = StateStore(tmp_path / "state.db"), Profiles.under(None)
    try:
        for r in runs:
            await store.put_usage(r)
        answer = await distribution(store, profiles, PROFILE, since=0, until=1e9, tenants=None, min_runs=20)
    finally:
        await store.close()
    advice = {r.key: r for r in recommendation(runs, profiles, PROFILE, min_runs=20).resources}
    by = {h.measure: h for h in answer.histograms}
    assert advice[key].recommended == expected
    for advised, measure in _LINE_OF_KEY.items():
        line = by[measure]
        rule = advice[advised].rule if advice[advised].recommended is not None else None
        assert (line.recommended, line.recommended_rule) == (advice[advised].recommended, rule), advised


def value_of(name: str, run: RunUsage) -> float | None:
    return run.cores if name == "cores" else getattr(run, name)


async def test_a_run_at_a_limit_says_what_it_reached(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    try:
        await store.put_usage(run("oom", profile=PROFILE, cause=EndCause.OOM, memory_peak_bytes=512 * MIB))
        await store.put_usage(run("cut", profile=PROFILE, cause=EndCause.OUTPUT_CAP, stdout_bytes=10,
                                  stderr_bytes=MIB, ended_at=1_001.0))  # fmt: skip
        answer = await distribution(store, Profiles.under(None), PROFILE, since=0, until=1e9, tenants=None, min_runs=20)
    finally:
        await store.close()
    cut, oom = answer.ended_at_limit.runs
    assert (cut.execution_id, cut.measure, cut.value, cut.limit) == ("cut", "stderr_bytes", MIB, MIB)
    assert (oom.execution_id, oom.measure, oom.value, oom.limit) == ("oom", "memory_peak_bytes", 512 * MIB, 512 * MIB)
    assert all(h.recommended is None for h in answer.histograms)  # 2 runs: fewer than min_runs
    assert answer.ended_at_limit.by_cause == {
        "wall_timeout": 0, "oom": 1, "pids_limit": 0, "write_budget": 0, "output_cap": 1,
    }  # fmt: skip


async def test_a_profile_gone_has_its_runs_and_no_lines(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.db")
    try:
        await store.put_usage(run("old", profile="gone", memory_peak_bytes=5 * MIB))
        answer = await distribution(store, Profiles.under(None), "gone", since=0, until=1e9, tenants=None, min_runs=1)
    finally:
        await store.close()
    memory = next(h for h in answer.histograms if h.measure == "memory_peak_bytes")
    assert (memory.known, memory.limit, memory.recommended, memory.max) == (1, None, None, 5 * MIB)
    assert sum(memory.counts) == 1


def test_the_profiles_in_force_with_their_limits() -> None:
    listed = {p.name: p for p in profile_list(Profiles.under(None)).profiles}
    assert {"workspace-write", "read-only", "untrusted", "ci"} <= set(listed)
    default = listed["workspace-write"]
    assert default.default and default.error is None and default.limits is not None
    assert default.limits["memory"] == LIMITS.memory_bytes and default.limits["wall_timeout_s"] == 300
    assert sum(p.default for p in listed.values()) == 1
