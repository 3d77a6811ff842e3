"""whatif: recorded runs replayed under proposed limits — the runs named per limit, unknowns kept apart,
headroom, CPU as slower (not killed), node capacity, and input validated by the profile schema."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.usage import EndCause, RunUsage
from orchestrator.profiles.usage_stats import Percentiles
from orchestrator.profiles.whatif import LimitReplay, NodeSize, WhatIfReport, runs_per_node, whatif
from tests.unit.profiles.usage_runs import GIB, LIMITS, MIB, run, with_limits


def replay(runs: list[RunUsage], node: NodeSize | None = None, **proposed: str | float | int) -> WhatIfReport:
    return whatif(runs, profile="ci", current=LIMITS, proposed=proposed, node=node)


def limit(report: WhatIfReport, key: str) -> LimitReplay:
    return next(r for r in report.limits if r.key == key)


def memory_history() -> list[RunUsage]:
    return [
        run("m100", memory_peak_bytes=100 * MIB),
        run("m200", memory_peak_bytes=200 * MIB),
        run("m300", memory_peak_bytes=300 * MIB),
        run("oom", cause=EndCause.OOM),  # killed at 512 MiB: needed more, how much unknown
        run("blind"),  # its backend could not read the peak
    ]


def test_a_lower_memory_limit_names_the_runs_it_would_kill() -> None:
    memory = limit(replay(memory_history(), memory="256m"), "memory")
    assert (memory.current, memory.proposed) == (512 * MIB, 256 * MIB)
    assert (memory.ends_as, memory.kills) == (EndCause.OOM, True)
    # 300 MiB >= 256 MiB; the OOM needed more than 512 MiB, so more than 256 MiB
    assert memory.would_meet.execution_ids == ("m300", "oom")
    assert memory.would_meet.total == 2
    assert memory.already == 1  # the OOM
    assert memory.unknown.execution_ids == ("blind",)
    # within: 100/256 = 0.390625 and 200/256 = 0.78125
    assert memory.within == 2
    expected = Percentiles(count=2, p50=0.390625, p90=0.78125, p95=0.78125, p99=0.78125, max=0.78125)
    assert memory.used_of_limit == expected


def test_an_oom_under_a_higher_limit_is_unknown_never_guessed() -> None:
    memory = limit(replay(memory_history(), memory="1g"), "memory")
    assert memory.would_meet.total == 0
    assert memory.unknown.execution_ids == ("oom", "blind")
    assert memory.within == 3  # 100, 200, 300 of 1024 MiB
    assert memory.used_of_limit is not None
    assert memory.used_of_limit.max == 300 / 1024


def test_a_run_cut_short_at_a_limit_the_proposal_raises_is_unknown_for_what_it_had_not_reached() -> None:
    # timed out at 300 s with a 200 MiB peak; under 600 s it would have gone on: would it pass 256 MiB?
    late = run("late", cause=EndCause.WALL_TIMEOUT, wall_seconds=300.1, memory_peak_bytes=200 * MIB)
    both = replay([late], memory="256m", wall_timeout_s=600)
    assert limit(both, "memory").unknown.execution_ids == ("late",)
    assert limit(both, "wall_timeout_s").unknown.execution_ids == ("late",)  # how long it needed: unknown
    # the deadline unchanged, it stops there again, within 256 MiB
    memory_only = limit(replay([late], memory="256m"), "memory")
    assert (memory_only.within, memory_only.unknown.total) == (1, 0)
    # a peak it did reach is known whatever the deadline: 200 MiB >= 128 MiB
    assert limit(replay([late], memory="128m", wall_timeout_s=600), "memory").would_meet.execution_ids == ("late",)


def test_a_shorter_timeout_and_its_headroom() -> None:
    runs = [run("w10", wall_seconds=10.0), run("w50", wall_seconds=50.0), run("w100", wall_seconds=100.0)]
    wall = limit(replay(runs, wall_timeout_s=60), "wall_timeout_s")
    assert wall.would_meet.execution_ids == ("w100",)  # 100 s >= 60 s
    assert wall.already == 0
    assert wall.used_of_limit is not None
    assert (wall.used_of_limit.p50, wall.used_of_limit.max) == (10 / 60, 50 / 60)


def test_a_run_keeps_a_narrower_limit_it_had() -> None:
    # a request's --timeout 30 (narrower than the profile's 300): it timed out at 30 s, and would again under 600
    narrowed = run("short", cause=EndCause.WALL_TIMEOUT, wall_seconds=30.0, limits=with_limits(wall_timeout_s=30.0))
    report = replay([narrowed, run("w10", wall_seconds=10.0)], wall_timeout_s=600)
    wall = limit(report, "wall_timeout_s")
    assert (wall.would_meet.execution_ids, wall.already, wall.unknown.total) == (("short",), 1, 0)
    assert report.notes == (
        "1 runs had a limit narrower than the profile's (a request's timeout, a policy cap, a grant): they keep "
        "it under the proposal",
    )


def test_output_caps_cut_rather_than_kill_and_the_record_knows_all_that_was_written() -> None:
    runs = [
        run("loud", cause=EndCause.OUTPUT_CAP, stdout_bytes=2 * MIB),  # everything it wrote: 2 MiB
        run("quiet", stdout_bytes=100 * 1024),
    ]
    smaller = limit(replay(runs, stdout_max_bytes="512k"), "stdout_max_bytes")
    assert (smaller.ends_as, smaller.kills) == (EndCause.OUTPUT_CAP, False)
    assert smaller.would_meet.execution_ids == ("loud",)
    assert smaller.already == 1
    # under 4 MiB the loud run's 2 MiB fits: 0.5 of it; the quiet one 100 KiB / 4 MiB
    larger = limit(replay(runs, stdout_max_bytes="4m"), "stdout_max_bytes")
    assert (larger.would_meet.total, larger.unknown.total, larger.within) == (0, 0, 2)
    assert larger.used_of_limit is not None
    assert (larger.used_of_limit.p50, larger.used_of_limit.max) == (100 / 4096, 0.5)


def test_write_budgets_and_pids() -> None:
    runs = [
        run("files", cause=EndCause.WRITE_BUDGET, workspace_files_written=100_001, workspace_bytes_written=GIB // 2),
        run("few", workspace_files_written=5_000, pids_peak=40),
        run("forky", pids_peak=100),
    ]
    report = replay(runs, workspace_write_files=10_000, workspace_write_bytes="256m", pids=64)
    files = limit(report, "workspace_write_files")
    assert (files.would_meet.execution_ids, files.already, files.within) == (("files",), 1, 1)
    # the bytes budget did not stop "files" (512 MiB of 1 GiB), but 512 MiB passes the proposed 256 MiB
    written = limit(report, "workspace_write_bytes")
    assert (written.would_meet.execution_ids, written.already) == (("files",), 0)
    assert written.unknown.execution_ids == ("few", "forky")
    pids = limit(report, "pids")
    assert (pids.ends_as, pids.would_meet.execution_ids, pids.unknown.execution_ids) == (
        EndCause.PIDS_LIMIT,
        ("forky",),
        ("files",),
    )


def test_fewer_cpus_make_runs_slower_not_killed_and_some_then_time_out() -> None:
    runs = [
        run("light", cpu_seconds=20.0, wall_seconds=100.0),  # 0.2 cores: within 0.5
        run("busy", cpu_seconds=80.0, wall_seconds=100.0),  # 0.8 cores: 100 s x 0.8/0.5 = 160 s < 300 s
        run("heavy", cpu_seconds=200.0, wall_seconds=200.0),  # 1.0 cores: 200 s x 1.0/0.5 = 400 s >= 300 s
        run("blind", wall_seconds=5.0),
    ]
    report = replay(runs, cpus="0.5")
    assert report.limits == ()
    cpu = report.cpu
    assert cpu is not None
    assert (cpu.current, cpu.proposed, cpu.known) == (1.0, 0.5, 3)
    assert cpu.slower.execution_ids == ("busy", "heavy")
    assert cpu.would_time_out_estimated.execution_ids == ("heavy",)
    assert cpu.unknown.execution_ids == ("blind",)
    # used ÷ proposed: 0.4, 1.6, 2.0
    assert cpu.used_of_limit == Percentiles(count=3, p50=1.6, p90=2.0, p95=2.0, p99=2.0, max=2.0)
    # with the deadline raised to 500 s, 400 s fits
    longer = replay(runs, cpus="0.5", wall_timeout_s=500).cpu
    assert longer is not None
    assert longer.would_time_out_estimated.total == 0


def test_node_capacity_before_and_after() -> None:
    node = NodeSize(cpus=4, memory_bytes=16 * GIB)
    # now: min(4 / 1, 16384 / 512) = min(4, 32) = 4; proposed: min(4 / 0.25, 16384 / 256) = min(16, 64) = 16
    capacity = replay([], node=node, cpus=0.25, memory="256m").node
    assert capacity is not None
    assert (capacity.current, capacity.proposed, capacity.gain) == (4, 16, 12)
    # memory alone does not help a CPU-bound node: min(4, 64) = 4
    memory_only = replay([], node=node, memory="256m").node
    assert memory_only is not None
    assert (memory_only.current, memory_only.proposed, memory_only.gain) == (4, 4, 0)


def test_node_capacity_is_exact_in_decimal_cores() -> None:
    # 2.3 / 0.1 is 22.999999999999996 in floats: the node holds 23, not 22
    assert runs_per_node(NodeSize(cpus=2.3, memory_bytes=64 * GIB), 0.1, 256 * MIB) == 23


def test_the_runs_are_named_up_to_twenty_and_all_counted() -> None:
    runs = [run(f"r{i:02}", memory_peak_bytes=300 * MIB) for i in range(25)]
    memory = limit(replay(runs, memory="256m"), "memory")
    assert memory.would_meet.total == 25
    assert memory.would_meet.execution_ids == tuple(f"r{i:02}" for i in range(20))


def test_rows_of_another_profile_are_not_replayed() -> None:
    runs = [run("mine", memory_peak_bytes=300 * MIB), run("theirs", profile="untrusted", memory_peak_bytes=300 * MIB)]
    report = replay(runs, memory="256m")
    assert report.runs == 1
    assert limit(report, "memory").would_meet.execution_ids == ("mine",)


@pytest.mark.parametrize(
    ("proposed", "fields", "says"),
    [
        ({"nofile": "4096"}, ["limits.nofile"], "not a limit the recorded usage can replay"),
        ({"swap": "1g", "mem": "1g"}, ["limits.mem", "limits.swap"], "not a limit the recorded usage can replay"),
        ({"memory": "lots"}, ["limits.memory"], "must be a number of bytes or a size such as '64m'"),
        ({"memory": "1m"}, ["limits.memory"], "greater than or equal to 6291456"),
        ({"cpus": "0"}, ["limits.cpus"], "greater than 0"),
        ({"pids": "4"}, ["limits.pids"], "greater than or equal to 8"),
        ({"wall_timeout_s": "100000"}, ["limits.wall_timeout_s"], "less than or equal to 86400"),
        ({}, ["limits"], "no limit proposed"),
    ],
)
def test_bad_input_is_input_invalid_naming_the_key_never_the_value(
    proposed: Mapping[str, str], fields: list[str], says: str
) -> None:
    with pytest.raises(InputInvalid) as info:
        whatif([], profile="ci", current=LIMITS, proposed=proposed, node=None)
    assert info.value.code == "INPUT.INVALID"
    assert info.value.details == {"fields": fields}
    assert says in info.value.message
    assert "lots" not in info.value.message


def test_values_are_read_as_a_profile_file_reads_them() -> None:
    report = replay([], memory="1.5g", cpus="0.5", pids="64", wall_timeout_s="90", stdout_max_bytes=4096)
    assert report.proposed == {
        "memory": 1536 * MIB,
        "cpus": 0.5,
        "pids": 64,
        "wall_timeout_s": 90.0,
        "stdout_max_bytes": 4096,
    }
    assert report.current == {
        "memory": 512 * MIB,
        "cpus": 1.0,
        "pids": 128,
        "wall_timeout_s": 300.0,
        "stdout_max_bytes": MIB,
    }
    assert WhatIfReport.model_validate_json(report.model_dump_json()) == report


def test_the_apis_proposal_has_the_profile_schemas_bounds() -> None:
    """LimitsProposal (the API's what-if body, in the domain) and profiles.models.Limits take the same values."""
    from orchestrator.domain.profile_usage import LimitsProposal
    from orchestrator.profiles.models import Limits

    proposal = LimitsProposal.model_json_schema()["properties"]
    profile = Limits.model_json_schema()["properties"]
    for key, field in proposal.items():
        theirs = profile[key]
        bounds = {k: v for k, v in field.items() if k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")}
        if "anyOf" in theirs:  # a size: its integer form carries the bounds
            theirs = next(form for form in theirs["anyOf"] if form.get("type") == "integer")
        assert bounds == {
            k: v
            for k, v in theirs.items()
            if k in bounds or k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        }, key


def test_a_peak_at_its_limit_without_an_oom_is_page_cache_unknown_below_it_never_an_oom() -> None:
    # the review's repro: a shell reading a 900 MB file under 512 MiB ends ok at a 511 MiB peak (cache the
    # kernel reclaimed at the limit; it needed 4 MiB). Under 256 MiB it was "would end as oom"; it is unknown
    runs = [
        run("cat", memory_peak_bytes=511 * MIB),
        run("m400", memory_peak_bytes=400 * MIB),  # below 95 % of 512 MiB (486.4 MiB): its peak stands
        run("oom", cause=EndCause.OOM),
    ]
    report = replay(runs, memory="256m")
    memory = limit(report, "memory")
    assert memory.would_meet.execution_ids == ("m400", "oom")
    assert memory.unknown.execution_ids == ("cat",)
    assert memory.within == 0
    assert report.notes == (
        "1 runs reached their memory limit without an OOM kill: the kernel reclaimed page cache there, so their "
        "need is unknown under a limit at or below their peak and below their own",
    )
    # at its own limit, or above: it ends as it did, within (511/512; 511/1024)
    same = limit(replay(runs, memory="512m"), "memory")
    assert (same.would_meet.execution_ids, same.unknown.execution_ids, same.within) == (("oom",), (), 2)
    assert same.used_of_limit is not None and same.used_of_limit.max == 511 / 512
    more = limit(replay(runs, memory="1g"), "memory")
    assert (more.unknown.execution_ids, more.within) == (("oom",), 2)
    # above its peak, below its limit: the peak was never passed, within
    between = limit(replay(runs, memory=f"{511 * MIB + 1}"), "memory")
    assert (between.would_meet.execution_ids, between.unknown.execution_ids, between.within) == (("oom",), (), 2)
