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
from tests.unit.profiles.usage_runs import GIB, LIMITS, MIB, run

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
        cause = EndCause.OOM if roll < 0.03 else EndCause.WALL_TIMEOUT if roll < 0.05 else EndCause.OK
        wall = 300.0 if cause is EndCause.WALL_TIMEOUT else rng.uniform(0.1, 200)
        known = rng.random() > 0.1
        out.append(
            run(
                f"ex-{i:04}",
                profile=PROFILE,
                cause=cause,
                ended_at=1_000.0 + i,
                memory_peak_bytes=int(rng.uniform(1, 600) * MIB) if known else None,
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
