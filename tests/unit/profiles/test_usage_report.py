"""usage_report: nearest-rank percentiles, unknown kept apart from 0, end causes, groups, the window."""

from __future__ import annotations

import pytest

from orchestrator.domain.usage import MEASURES, EndCause, RunUsage
from orchestrator.profiles.usage_report import GroupBy, MeasureSummary, UsageReport, usage_report
from orchestrator.profiles.usage_stats import MAX_IDS, Percentiles, nearest_rank, percentiles, run_list
from tests.unit.profiles.usage_runs import LIMITS, MIB, run


def report(runs: list[RunUsage], *, group_by: GroupBy | None = None, since: float | None = None) -> UsageReport:
    return usage_report(runs, profile="ci", limits=LIMITS, since=since, until=2_000.0, group_by=group_by)


def measure(summary: UsageReport, name: str, group: int = 0) -> MeasureSummary:
    return next(m for m in summary.groups[group].measures if m.measure == name)


@pytest.mark.parametrize(
    ("values", "percent", "expected"),
    [
        ([1, 2, 3, 4], 50, 2),  # rank ceil(0.5 * 4) = 2
        ([1, 2, 3, 4], 90, 4),  # rank ceil(3.6) = 4
        ([7], 50, 7),  # one value is every percentile
        (list(range(1, 101)), 99, 99),  # rank ceil(99) = 99
        (list(range(1, 101)), 95, 95),
        (list(range(1, 201)), 99, 198),  # rank ceil(198) = 198
        (list(range(1, 11)), 95, 10),  # rank ceil(9.5) = 10
    ],
)
def test_nearest_rank_takes_the_value_at_rank_ceil_p_n(values: list[int], percent: int, expected: int) -> None:
    assert nearest_rank(values, percent) == expected


def test_percentiles_of_nothing_is_none_not_zero() -> None:
    assert percentiles([]) is None
    assert percentiles([0, 0]) == Percentiles(count=2, p50=0, p90=0, p95=0, p99=0, max=0)


def test_a_run_list_counts_every_run_and_names_the_first_twenty() -> None:
    listed = run_list(f"ex-{i}" for i in range(25))
    assert listed.total == 25
    assert listed.execution_ids == tuple(f"ex-{i}" for i in range(MAX_IDS))


def test_memory_percentiles_of_a_known_list() -> None:
    # peaks 1, 2, …, 20 MiB (n = 20), nearest rank ceil(p/100 x 20):
    # p50 → rank 10 → 10 MiB; p90 → rank 18 → 18 MiB; p95 → rank 19 → 19 MiB; p99 → rank ceil(19.8) = 20 → 20 MiB
    runs = [run(f"r{i}", memory_peak_bytes=i * MIB) for i in range(1, 21)]
    memory = measure(report(runs), "memory_peak_bytes")
    expected = Percentiles(count=20, p50=10 * MIB, p90=18 * MIB, p95=19 * MIB, p99=20 * MIB, max=20 * MIB)
    assert memory.percentiles == expected
    assert (memory.known, memory.unknown) == (20, 0)
    assert memory.limit == 512 * MIB
    assert memory.max_of_limit == 20 / 512  # 0.0390625
    assert memory.limit_key == "memory"


def test_an_unknown_is_kept_apart_from_zero() -> None:
    # two runs that said 0 processes at their peak, one whose backend could not say
    runs = [run("zero-a", pids_peak=0), run("zero-b", pids_peak=0), run("unknown")]
    pids = measure(report(runs), "pids_peak")
    assert (pids.known, pids.unknown) == (2, 1)
    assert pids.percentiles is not None
    assert (pids.percentiles.p50, pids.percentiles.max) == (0, 0)
    assert pids.max_of_limit == 0.0
    # a measure nobody knew: no percentile, no fraction, and every run counted unknown
    wall = measure(report(runs), "wall_seconds")
    assert (wall.known, wall.unknown, wall.percentiles, wall.max_of_limit) == (0, 3, None, None)


def test_cores_are_cpu_seconds_over_wall_seconds_and_cpu_time_is_held_against_cpus_for_the_whole_timeout() -> None:
    runs = [run("a", cpu_seconds=3.0, wall_seconds=2.0), run("b", cpu_seconds=1.0, wall_seconds=4.0)]
    summary = report(runs)
    cores = measure(summary, "cores")
    assert cores.percentiles is not None
    assert (cores.percentiles.p50, cores.percentiles.max) == (0.25, 1.5)  # 1/4 and 3/2
    assert cores.max_of_limit == 1.5  # 1.5 cores of 1
    assert cores.ended_at_limit is None  # throttled, never ended
    cpu_time = measure(summary, "cpu_seconds")
    assert cpu_time.limit == 300.0  # 1 core x 300 s
    assert cpu_time.max_of_limit == 3.0 / 300.0


def test_every_end_cause_is_listed_zeros_included_and_ended_at_a_limit_per_measure() -> None:
    runs = [
        run("ok-1"),
        run("ok-2"),
        run("oom", cause=EndCause.OOM, memory_peak_bytes=512 * MIB),
        # output cut: stdout past its 1 MiB cap, stderr well within: the stdout cap it was
        run("cut", cause=EndCause.OUTPUT_CAP, stdout_bytes=2 * MIB, stderr_bytes=10),
        # write budget: bytes within, files unknown → put at the files budget (it may have been), not bytes
        run("budget", cause=EndCause.WRITE_BUDGET, workspace_bytes_written=5 * MIB),
        run("late", cause=EndCause.WALL_TIMEOUT, wall_seconds=300.4),
    ]
    summary = report(runs)
    ended = summary.groups[0].ended
    assert list(ended) == [cause.value for cause in EndCause]
    assert ended == {
        "wall_timeout": 1,
        "oom": 1,
        "pids_limit": 0,
        "write_budget": 1,
        "output_cap": 1,
        "idle_timeout": 0,
        "cancelled": 0,
        "failed": 0,
        "exit_nonzero": 0,
        "ok": 2,
    }
    at_limit = {m.measure: m.ended_at_limit for m in summary.groups[0].measures}
    assert at_limit == {
        "cores": None,
        "memory_peak_bytes": 1,
        "pids_peak": 0,
        "wall_seconds": 1,
        "cpu_seconds": None,
        "stdout_bytes": 1,
        "stderr_bytes": 0,
        "workspace_bytes_written": 0,
        "workspace_files_written": 1,
    }
    assert [m.measure for m in summary.groups[0].measures] == [m.name for m in MEASURES]


def test_groups_by_tenant_largest_first_and_a_missing_repository_is_an_empty_name() -> None:
    runs = [
        run("a1", tenant="team-a", ci_repository="org/app"),
        run("b1", tenant="team-b"),
        run("b2", tenant="team-b", ci_repository="org/app"),
        run("c1", tenant="team-c"),
    ]
    by_tenant = report(runs, group_by="tenant")
    assert [(g.group, g.runs) for g in by_tenant.groups] == [("team-b", 2), ("team-a", 1), ("team-c", 1)]
    by_repository = report(runs, group_by="ci_repository")
    assert [(g.group, g.runs) for g in by_repository.groups] == [("", 2), ("org/app", 2)]
    assert by_tenant.runs == 4


def test_rows_of_another_profile_or_outside_the_window_are_ignored() -> None:
    runs = [
        run("in", ended_at=1_500.0, memory_peak_bytes=MIB),
        run("other", profile="untrusted", ended_at=1_500.0, memory_peak_bytes=999 * MIB),
        run("early", ended_at=500.0, memory_peak_bytes=999 * MIB),
        run("late", ended_at=2_500.0, memory_peak_bytes=999 * MIB),
    ]
    summary = report(runs, since=1_000.0)
    assert (summary.runs, summary.ignored) == (1, 3)
    memory = measure(summary, "memory_peak_bytes")
    assert memory.percentiles is not None
    assert memory.percentiles.max == MIB


def test_no_runs_is_one_empty_group_and_no_limits_is_no_fraction() -> None:
    empty = report([])
    assert [(g.group, g.runs) for g in empty.groups] == [("all", 0)]
    assert all(m.known == 0 and m.unknown == 0 for m in empty.groups[0].measures)
    unlimited = usage_report(
        [run("a", memory_peak_bytes=MIB)], profile="ci", limits=None, since=None, until=2_000.0, group_by=None
    )
    memory = measure(unlimited, "memory_peak_bytes")
    assert (memory.limit, memory.max_of_limit) == (None, None)


def test_the_report_is_its_own_json() -> None:
    summary = report([run("a", memory_peak_bytes=MIB, cpu_seconds=0.5, wall_seconds=1.0)], group_by="tool")
    assert UsageReport.model_validate_json(summary.model_dump_json()) == summary


def test_past_fifty_groups_the_smallest_are_merged_into_one() -> None:
    """60 CI repositories (named by whoever runs): 49 kept by size, the other 11 merged into '(other)'."""
    from orchestrator.profiles.usage_report import MAX_GROUPS, OTHER_GROUPS

    runs = [
        run(f"ex-{i}-{k}", ci_repository=f"org/repo-{i:02d}")
        for i in range(60)
        for k in range(1 + (i < 10))  # the first ten repositories have two runs each
    ]
    report = usage_report(runs, profile="ci", limits=None, since=None, until=2_000.0, group_by="ci_repository")
    assert len(report.groups) == MAX_GROUPS and report.groups_merged == 11
    assert [g.runs for g in report.groups[:10]] == [2] * 10
    assert report.groups[-1].group == OTHER_GROUPS and report.groups[-1].runs == 11
    assert report.runs == 70 and sum(g.runs for g in report.groups) == 70
