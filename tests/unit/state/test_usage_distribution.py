"""The profiles page's figures in SQL (state/usage_distribution.py), against counts worked out by hand: buckets
of a plan, unknown values counted apart, an approver's tenants only, the runs ended at a limit newest first,
the ranked samples as recommend() ranks them."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import pytest

from orchestrator.domain.usage import EndCause, RunUsage
from orchestrator.domain.usage_figures import Buckets, Figures, Sample, Scope, Summary
from orchestrator.state.store import StateStore
from tests.unit.profiles.usage_runs import GIB, LIMITS, MIB, run, with_limits

CAUSES = (EndCause.OOM, EndCause.WALL_TIMEOUT)
# memory in buckets of 128 MiB (4 of them, up to the 512 MiB limit), wall time in buckets of 0.5 s (scale 10,
# divisor 5: 0.5 x bucket) up to 2 s
PLAN = {"memory_peak_bytes": Buckets(4, 1, 128 * MIB), "wall_seconds": Buckets(4, 10, 5)}


def runs() -> list[RunUsage]:
    return [
        run("a", memory_peak_bytes=10 * MIB, wall_seconds=0.2, cpu_seconds=0.1, tenant="team-a", ended_at=100.0),
        run("b", memory_peak_bytes=130 * MIB, wall_seconds=0.5, cpu_seconds=0.5, tenant="team-a", ended_at=110.0),
        run("c", memory_peak_bytes=None, wall_seconds=1.4, cpu_seconds=None, tenant="team-b", ended_at=120.0),
        run(
            "d",
            memory_peak_bytes=512 * MIB,
            wall_seconds=2.0,
            cpu_seconds=0.3,
            tenant="team-b",
            ended_at=130.0,
            cause=EndCause.OOM,
        ),
        run(
            "e",
            memory_peak_bytes=None,
            wall_seconds=300.0,
            tenant="team-a",
            ended_at=140.0,
            cause=EndCause.WALL_TIMEOUT,
        ),
        run("f", memory_peak_bytes=200 * MIB, wall_seconds=0.1, tenant="team-a", ended_at=500.0),  # out of window
        run("g", memory_peak_bytes=200 * MIB, wall_seconds=0.1, tenant="team-a", profile="other", ended_at=120.0),
    ]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[StateStore]:
    store = StateStore(tmp_path / "state.db")
    for r in runs():
        await store.put_usage(r)
    try:
        yield store
    finally:
        await store.close()


async def figures(
    store: StateStore,
    *,
    tenants: tuple[str, ...] | None = None,
    samples: Mapping[str, Sample] | None = None,
    newest: int = 50,
    plan: Mapping[str, Buckets] = PLAN,
) -> tuple[Figures, list[Summary]]:
    seen: list[Summary] = []

    def planned(summary: Summary) -> Mapping[str, Buckets]:
        seen.append(summary)
        return plan

    found = await store.usage_figures(
        Scope("ci", 100.0, 200.0, tenants),
        measures=("memory_peak_bytes", "wall_seconds"),
        samples=samples or {},
        causes=CAUSES,
        plan=planned,
        newest=newest,
    )
    return found, seen


async def test_buckets_counted_as_worked_out_by_hand(store: StateStore) -> None:
    found, seen = await figures(store)
    assert seen == [found.summary]  # the plan was made from the first pass
    assert found.summary.runs == 5  # f: after the window; g: another profile
    assert found.summary.largest == {"memory_peak_bytes": 512 * MIB, "wall_seconds": 300.0}
    memory = found.histograms["memory_peak_bytes"]
    # 10 MiB in [0, 128); 130 MiB in [128, 256); 512 MiB on the top edge: the last bucket; c and e unknown
    assert memory.counts == (1, 1, 0, 1) and memory.known == 3
    wall = found.histograms["wall_seconds"]
    # 0.2 in [0, 0.5); 0.5 in [0.5, 1) (its left edge); 1.4 in [1, 1.5); 2.0 and 300 past the plan's top: the last
    assert wall.counts == (1, 1, 1, 2) and wall.known == 5
    assert found.summary.ended == {EndCause.OOM: 1, EndCause.WALL_TIMEOUT: 1}
    assert PLAN["wall_seconds"].edges == (0, 0.5, 1.0, 1.5, 2.0)
    assert PLAN["memory_peak_bytes"].edges == (0, 128 * MIB, 256 * MIB, 384 * MIB, 512 * MIB)


async def test_an_approver_counts_its_own_tenants_runs_only(store: StateStore) -> None:
    found, _ = await figures(store, tenants=("team-b",))
    assert found.summary.runs == 2
    assert found.histograms["memory_peak_bytes"].counts == (0, 0, 0, 1)  # d only; c unknown
    assert found.histograms["wall_seconds"].counts == (0, 0, 1, 1)
    assert [r.execution_id for r in found.newest_at_limit] == ["d"]
    assert found.summary.ended == {EndCause.OOM: 1, EndCause.WALL_TIMEOUT: 0}
    nobody, _ = await figures(store, tenants=())
    assert nobody.summary.runs == 0 and nobody.histograms["wall_seconds"].known == 0
    assert nobody.newest_at_limit == []


async def test_the_runs_ended_at_a_limit_newest_first_and_bounded(store: StateStore) -> None:
    found, _ = await figures(store)
    assert [(r.execution_id, r.cause) for r in found.newest_at_limit] == [
        ("e", EndCause.WALL_TIMEOUT),
        ("d", EndCause.OOM),
    ]
    assert found.newest_at_limit[1].memory_peak_bytes == 512 * MIB  # the whole row, as it went in
    one, _ = await figures(store, newest=1)
    assert [r.execution_id for r in one.newest_at_limit] == ["e"]
    assert one.summary.ended[EndCause.OOM] == 1  # the count is of them all


async def test_samples_ranked_as_recommend_ranks_them(store: StateStore) -> None:
    samples = {
        # memory: the OOM-killed d needed bump(max(512 MiB, 512 MiB)); c's and e's memory unknown
        "memory": Sample("memory_peak_bytes", 50, EndCause.OOM, "memory_bytes", lambda x: x * 2),
        # wall: e timed out, so its sample is max(its 300 s limit, 300 s); every wall known
        "wall": Sample("wall_seconds", 99, EndCause.WALL_TIMEOUT, "wall_timeout_s"),
        "cores": Sample("cores", 50),
    }
    found, _ = await figures(store, samples=samples)
    memory, wall, cores = (found.summary.samples[k] for k in ("memory", "wall", "cores"))
    # memory samples 10, 130 MiB and d's 1024 MiB: the median (rank 2 of 3) is 130 MiB
    assert (memory.count, memory.percentile, memory.largest_at_limit) == (3, 130 * MIB, 1024 * MIB)
    assert (wall.count, wall.percentile, wall.largest_at_limit) == (5, 300.0, LIMITS.wall_timeout_s)
    # cores: a 0.5, b 1.0, d 0.15 (c: no CPU time, e: none either): the median is 0.5
    assert (cores.count, cores.percentile, cores.largest_at_limit) == (3, 0.5, None)


async def test_samples_leave_out_a_peak_at_its_limit_and_unranked_timeouts(tmp_path: Path) -> None:
    # memory: a peak at or above 95 % of the run's own limit without an OOM is page cache, no sample; wall: a
    # timeout is no sample, its limit the largest at the limit, counted apart when at or above the current 300 s
    store = StateStore(tmp_path / "state.db")
    rows = [
        run("small", memory_peak_bytes=10 * MIB, wall_seconds=1.0),
        run("below", memory_peak_bytes=510_027_366, wall_seconds=2.0),  # 95 % of 512 MiB is 510027366.4
        run("at", memory_peak_bytes=510_027_367, wall_seconds=3.0),  # left out of memory
        run("granted", memory_peak_bytes=511 * MIB, limits=with_limits(memory_bytes=GIB)),  # < 95 % of its own
        run("late", cause=EndCause.WALL_TIMEOUT, memory_peak_bytes=512 * MIB, wall_seconds=300.2),  # not an OOM
        run("narrow", cause=EndCause.WALL_TIMEOUT, wall_seconds=5.0, limits=with_limits(wall_timeout_s=5.0)),
        run("oom", cause=EndCause.OOM, memory_peak_bytes=512 * MIB),
    ]
    for r in rows:
        await store.put_usage(r)
    samples = {
        "memory": Sample("memory_peak_bytes", 99, EndCause.OOM, "memory_bytes", lambda x: x * 2, reached_percent=95),
        "wall": Sample(
            "wall_seconds", 99, EndCause.WALL_TIMEOUT, "wall_timeout_s", ranked_at_limit=False, current=300.0
        ),
    }
    try:
        found = await store.usage_figures(
            Scope("ci", 0.0, 1e9, None), measures=(), samples=samples, causes=(), plan=lambda _: {}, newest=0
        )
    finally:
        await store.close()
    memory, wall = found.summary.samples["memory"], found.summary.samples["wall"]
    # memory samples: small, below, granted and the OOM's 2 x 512 MiB; p99 of 4 = the largest
    assert (memory.count, memory.percentile, memory.largest_at_limit, memory.at_current) == (4, GIB, GIB, 0)
    # wall samples: 1, 2, 3 s (granted and oom: no wall time); the timeouts' limits 300 and 5 s, one at 300
    assert (wall.count, wall.percentile, wall.largest_at_limit, wall.at_current) == (3, 3.0, 300.0, 1)
