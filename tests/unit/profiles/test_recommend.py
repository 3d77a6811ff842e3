"""recommend: each rule's arithmetic by hand, too few runs, the OOM bump, lower bounds, the YAML patch."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from orchestrator.domain.usage import EndCause, RunUsage
from orchestrator.profiles import Limits, ProfileRegistry
from orchestrator.profiles.paths import ENV_VAR
from orchestrator.profiles.recommend import Recommendation, ResourceRecommendation, recommend
from tests.support.paths import DOCS
from tests.unit.profiles.usage_runs import LIMITS, MIB, run, with_limits


@pytest.fixture(autouse=True)
def _no_env_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def resource(rec: Recommendation, key: str) -> ResourceRecommendation:
    return next(r for r in rec.resources if r.key == key)


def test_too_few_runs_with_the_measure_known_gives_no_value_and_says_why() -> None:
    # 30 runs, but only 12 with a memory peak: the 18 others count as unknown, never as 0
    runs = [run(f"k{i}", memory_peak_bytes=100 * MIB) for i in range(12)] + [run(f"u{i}") for i in range(18)]
    memory = resource(recommend(runs, profile="ci", current=LIMITS), "memory")
    assert memory.recommended is None
    assert memory.change is None
    assert memory.confidence == "none"
    assert memory.rule == "too_few_runs"
    assert memory.reason == "12 runs with a known memory peak below its limit or an OOM kill, 20 needed"
    assert (memory.inputs.known, memory.inputs.unknown) == (12, 18)
    assert memory.inputs.percentiles is not None  # the figures are still given
    assert memory.inputs.percentiles.p50 == 100 * MIB
    rec = recommend(runs, profile="ci", current=LIMITS)
    assert "memory" not in rec.patch


def test_too_few_runs_says_how_many_ended_at_the_limit() -> None:
    runs = [run(f"oom{i}", cause=EndCause.OOM) for i in range(3)]
    memory = resource(recommend(runs, profile="ci", current=LIMITS, min_runs=5), "memory")
    assert memory.reason == (
        "3 runs with a known memory peak below its limit or an OOM kill, 5 needed (3 of them ended at the limit)"
    )


def test_memory_is_the_vpa_upper_bound_p95_plus_15_percent_up_to_a_whole_mib() -> None:
    # peaks 10, 20, …, 200 MiB (n = 20): p95 = rank 19 = 190 MiB; x 1.15 = 218.5 MiB → 219 MiB
    runs = [run(f"r{i}", memory_peak_bytes=10 * i * MIB) for i in range(1, 21)]
    rec = recommend(runs, profile="ci", current=LIMITS)
    memory = resource(rec, "memory")
    assert memory.recommended == 219 * MIB
    assert memory.rule == "memory.vpa_upper_bound"
    assert memory.change == "lower"  # from 512 MiB
    assert memory.confidence == "low"  # 20 samples: under 100
    assert memory.inputs.margin == 0.15
    assert memory.inputs.floor is None
    # the cross-checks: VPA's target p90 = rank 18 = 180 MiB x 1.15 = 207 MiB; KRR's max 200 MiB x 1.15 = 230 MiB
    assert memory.inputs.cross_checks["vpa_target"] == pytest.approx(207 * MIB, abs=1)
    assert memory.inputs.cross_checks["krr_max_plus_15pct"] == pytest.approx(230 * MIB, abs=1)
    assert rec.patch["memory"] == "219m"


def test_an_oom_kill_is_a_lower_bound_bumped_the_vpa_way() -> None:
    # 19 runs peaking at 100 MiB, one OOM-killed at its 512 MiB limit (its peak unknown).
    # Its need: max(512 x 1.2, 512 + 100) MiB = 614.4 MiB = ceil(644245094.4) = 644245095 bytes.
    # p95 of the 20 samples = rank 19 = 100 MiB, below it: the OOM sets the value.
    # 644245095 x 1.15 = 740881859.25 bytes = 706.56 MiB → 707 MiB
    runs = [run(f"r{i}", memory_peak_bytes=100 * MIB) for i in range(19)]
    runs.append(run("oom", cause=EndCause.OOM))
    memory = resource(recommend(runs, profile="ci", current=LIMITS), "memory")
    assert memory.recommended == 707 * MIB
    assert memory.rule == "memory.vpa_oom_bump"
    assert memory.change == "raise"
    assert memory.inputs.at_limit == 1
    assert memory.inputs.floor == 644245095
    assert (memory.inputs.known, memory.inputs.unknown) == (20, 0)  # the OOM counts: its limit is known


def test_the_oom_bump_is_at_least_100_mib() -> None:
    # OOM-killed at a 128 MiB limit (a policy cap): max(128 x 1.2 = 153.6, 128 + 100 = 228) = 228 MiB;
    # x 1.15 = 262.2 MiB → 263 MiB
    runs = [run(f"r{i}", memory_peak_bytes=50 * MIB) for i in range(19)]
    runs.append(run("oom", cause=EndCause.OOM, memory_peak_bytes=127 * MIB, limits=with_limits(memory_bytes=128 * MIB)))
    memory = resource(recommend(runs, profile="ci", current=LIMITS), "memory")
    assert memory.inputs.floor == 228 * MIB
    assert memory.recommended == 263 * MIB


def test_cpus_is_the_p95_of_cores_used_rounded_up_to_005() -> None:
    # cores i/100 for i = 1…20 (CPU i s over 100 s): p95 = rank 19 = 0.19 → 0.20
    runs = [run(f"r{i}", cpu_seconds=float(i), wall_seconds=100.0) for i in range(1, 21)]
    cpus = resource(recommend(runs, profile="ci", current=LIMITS), "cpus")
    assert cpus.recommended == 0.2
    assert cpus.rule == "cpus.krr_p95"
    assert cpus.inputs.cross_checks["vpa_target"] == pytest.approx(0.18 * 1.15)  # p90 = rank 18 = 0.18


def test_cpus_on_a_step_stays_there_and_never_goes_below_005() -> None:
    # 0.35 cores is 7 steps of 0.05 exactly (7.000000000000001 in floats): 0.35, not 0.40
    on_step = [run(f"r{i}", cpu_seconds=35.0, wall_seconds=100.0) for i in range(20)]
    assert resource(recommend(on_step, profile="ci", current=LIMITS), "cpus").recommended == 0.35
    idle = [run(f"r{i}", cpu_seconds=0.1, wall_seconds=100.0) for i in range(20)]  # 0.001 cores
    assert resource(recommend(idle, profile="ci", current=LIMITS), "cpus").recommended == 0.05


def test_throttled_runs_are_counted_and_said() -> None:
    # 5 of 20 runs used 0.98 of their 1 core (>= 95 %): throttled
    runs = [run(f"t{i}", cpu_seconds=98.0, wall_seconds=100.0) for i in range(5)]
    runs += [run(f"r{i}", cpu_seconds=10.0, wall_seconds=100.0) for i in range(15)]
    rec = recommend(runs, profile="ci", current=LIMITS)
    assert resource(rec, "cpus").inputs.at_limit == 5
    assert any(note.startswith("5 runs used at least 95 % of their cpus") for note in rec.notes)


def test_wall_timeout_is_p99_plus_half_in_whole_seconds() -> None:
    # walls 1, 2, …, 100 s: p99 = rank 99 = 99 s; x 1.5 = 148.5 → 149 s
    runs = [run(f"r{i}", wall_seconds=float(i)) for i in range(1, 101)]
    wall = resource(recommend(runs, profile="ci", current=LIMITS), "wall_timeout_s")
    assert wall.recommended == 149.0
    assert wall.rule == "wall.p99_margin"
    assert wall.confidence == "medium"  # 100 samples


def test_runs_that_timed_out_keep_the_current_limit() -> None:
    # 99 runs of 10 s and one that timed out at 300 s: p99 = rank 99 = 10 s; x 1.5 = 15 s — but a run needed
    # more than 300 s: the value stays 300
    runs = [run(f"r{i}", wall_seconds=10.0) for i in range(99)]
    runs.append(run("late", cause=EndCause.WALL_TIMEOUT, wall_seconds=300.2))
    wall = resource(recommend(runs, profile="ci", current=LIMITS), "wall_timeout_s")
    assert wall.recommended == 300.0
    assert wall.change == "keep"
    assert wall.rule == "wall.timeouts_keep_current"
    assert wall.inputs.floor == 300.0
    assert wall.inputs.at_limit == 1


def test_a_timeout_at_the_profiles_limit_is_no_sample_it_keeps_the_current_limit() -> None:
    # the review's repro: 19 runs of 10 s and one timed out at the profile's 300 s. The timeout is no sample (it
    # was 300 + 50 % = 451 s, "raise"): p99 of the 19 = rank 19 = 10 s; x 1.5 = 15 s; floored at the current 300
    runs = [run(f"r{i}", wall_seconds=10.0) for i in range(19)]
    runs.append(run("late", cause=EndCause.WALL_TIMEOUT, wall_seconds=300.2))
    wall = resource(recommend(runs, profile="ci", current=LIMITS), "wall_timeout_s")
    assert (wall.recommended, wall.change, wall.rule) == (300.0, "keep", "wall.timeouts_keep_current")
    assert wall.inputs.percentiles is not None and wall.inputs.percentiles.max == 10.0  # the 19 only
    assert (wall.inputs.known, wall.inputs.unknown, wall.inputs.at_limit, wall.inputs.floor) == (19, 1, 1, 300.0)
    assert wall.confidence == "low"  # 20 runs: 19 samples and the timeout at the current limit


def test_a_timeout_never_raises_the_limit_and_the_p99_rule_stands_above_the_current_one() -> None:
    # 100 runs of 200 … 299 s and one timed out at 300 s: p99 of the 100 = rank 99 = 298 s; x 1.5 = 447 s
    runs = [run(f"r{i}", wall_seconds=200.0 + i) for i in range(100)]
    runs.append(run("late", cause=EndCause.WALL_TIMEOUT, wall_seconds=300.1))
    wall = resource(recommend(runs, profile="ci", current=LIMITS), "wall_timeout_s")
    assert (wall.recommended, wall.change, wall.rule, wall.inputs.floor) == (447.0, "raise", "wall.p99_margin", None)


def test_a_timeout_under_a_narrower_limit_of_its_own_says_nothing_of_the_profiles() -> None:
    # a grant's bound of 5 s (the profile's: 300 s), every other run at 1 s: p99 = 1 s; x 1.5 = 2 s, lower — not
    # "keep" (it was: any timeout kept the current limit)
    runs = [run(f"r{i}", wall_seconds=1.0) for i in range(20)]
    runs.append(run("granted", cause=EndCause.WALL_TIMEOUT, wall_seconds=5.0, limits=with_limits(wall_timeout_s=5.0)))
    rec = recommend(runs, profile="ci", current=LIMITS)
    wall = resource(rec, "wall_timeout_s")
    assert (wall.recommended, wall.change, wall.rule, wall.inputs.floor) == (2.0, "lower", "wall.p99_margin", None)
    assert (wall.inputs.known, wall.inputs.unknown, wall.inputs.at_limit) == (20, 1, 1)
    assert any(note.startswith("1 runs timed out under a timeout of their own narrower") for note in rec.notes)
    # and it does not count towards min_runs: 19 runs of 1 s and it are too few
    few = resource(recommend(runs[1:], profile="ci", current=LIMITS), "wall_timeout_s")
    assert few.recommended is None
    assert few.reason == (
        "19 runs with a known wall time or a timeout at the current limit, 20 needed "
        "(1 runs timed out, 0 of them at the current limit)"
    )


def test_every_run_timed_out_at_the_current_limit_keeps_it() -> None:
    # no wall time to rank, 20 runs that needed more than 300 s (a wider grant of 600 s among them): keep 300
    runs = [run(f"t{i}", cause=EndCause.WALL_TIMEOUT, wall_seconds=300.0) for i in range(19)]
    runs.append(run("wide", cause=EndCause.WALL_TIMEOUT, wall_seconds=600.0, limits=with_limits(wall_timeout_s=600.0)))
    wall = resource(recommend(runs, profile="ci", current=LIMITS), "wall_timeout_s")
    assert (wall.recommended, wall.change, wall.rule, wall.inputs.floor) == (
        300.0,
        "keep",
        "wall.timeouts_keep_current",
        300.0,
    )
    assert (wall.inputs.known, wall.inputs.percentiles) == (0, None)


def test_a_memory_peak_at_its_limit_without_an_oom_is_page_cache_left_out() -> None:
    # the review's repro: a shell reading a 900 MB file under 512 MiB ends ok at a 511 MiB peak (the kernel
    # reclaimed cache at the limit). 20 runs at 4 MiB and 5 such: before, p95 of the 25 = rank 24 = 511 MiB,
    # x 1.15 = 588 MiB, "raise" (and again after every raise). Now the 5 are left out: p95 of the 20 = 4 MiB;
    # x 1.15 = 4.6 MiB → 5 MiB → the schema's 6 MiB
    runs = [run(f"r{i}", memory_peak_bytes=4 * MIB) for i in range(20)]
    runs += [run(f"cat{i}", memory_peak_bytes=511 * MIB) for i in range(5)]
    rec = recommend(runs, profile="ci", current=LIMITS)
    memory = resource(rec, "memory")
    assert (memory.recommended, memory.change, memory.rule) == (6 * MIB, "lower", "memory.vpa_upper_bound")
    assert (memory.inputs.known, memory.inputs.unknown, memory.inputs.at_limit) == (20, 5, 0)
    assert memory.inputs.cross_checks["krr_max_plus_15pct"] == math.ceil(4 * MIB * 1.15)
    assert (
        "5 runs reached their memory limit without an OOM kill: the kernel reclaimed page cache there, so their "
        "need is unknown and they are left out"
    ) in rec.notes


def test_the_page_cache_rule_starts_at_95_percent_of_the_runs_own_limit() -> None:
    # 95 % of 512 MiB = 510027366.4 bytes: 510027366 is a sample, 510027367 is not; of a run's own 1 GiB limit
    # (a grant), 511 MiB is a sample; an OOM-killed run is a sample whatever its peak
    below, at = 510_027_366, 510_027_367
    runs = [run(f"r{i}", memory_peak_bytes=below) for i in range(20)]
    runs += [
        run("at", memory_peak_bytes=at),
        run("granted", memory_peak_bytes=511 * MIB, limits=with_limits(memory_bytes=1024 * MIB)),
        run("timed-out", cause=EndCause.WALL_TIMEOUT, memory_peak_bytes=512 * MIB),  # reclaimed too: not an OOM
    ]
    memory = resource(recommend(runs, profile="ci", current=LIMITS), "memory")
    assert (memory.inputs.known, memory.inputs.unknown) == (21, 2)
    assert memory.inputs.percentiles is not None and memory.inputs.percentiles.max == 511 * MIB


def test_pids_is_p99_plus_half_at_least_the_schemas_minimum() -> None:
    # peaks 10 (n = 20): p99 = 10; x 1.5 = 15
    tens = [run(f"r{i}", pids_peak=10) for i in range(20)]
    assert resource(recommend(tens, profile="ci", current=LIMITS), "pids").recommended == 15
    # peaks 2: x 1.5 = 3 → at least 8; and at least 64 for a runsc profile
    twos = [run(f"r{i}", pids_peak=2) for i in range(20)]
    assert resource(recommend(twos, profile="ci", current=LIMITS), "pids").recommended == 8
    assert resource(recommend(twos, profile="ci", current=LIMITS, min_pids=64), "pids").recommended == 64


def test_a_run_stopped_at_the_pids_limit_is_bumped_like_an_oom() -> None:
    # stopped at 128: max(ceil(128 x 1.2) = 154, 128 + 8 = 136) = 154; x 1.5 = 231
    runs = [run(f"r{i}", pids_peak=10) for i in range(19)]
    runs.append(run("stopped", cause=EndCause.PIDS_LIMIT))
    pids = resource(recommend(runs, profile="ci", current=LIMITS), "pids")
    assert (pids.recommended, pids.rule, pids.inputs.floor) == (231, "pids.limit_bump", 154)


def test_confidence_by_count() -> None:
    def confidence(n: int) -> str:
        runs = [run(f"r{i}", pids_peak=10) for i in range(n)]
        return resource(recommend(runs, profile="ci", current=LIMITS), "pids").confidence

    assert [confidence(n) for n in (19, 20, 99, 100, 499, 500)] == ["none", "low", "low", "medium", "medium", "high"]


def history() -> list[RunUsage]:
    # 20 runs: cores 0.25, memory 100 MiB, pids 20, wall 40 s; plus a run of another profile that would
    # change every figure if it were counted
    runs = [
        run(f"r{i}", cpu_seconds=10.0, wall_seconds=40.0, memory_peak_bytes=100 * MIB, pids_peak=20) for i in range(20)
    ]
    runs.append(run("x", profile="untrusted", cpu_seconds=400.0, wall_seconds=400.0, memory_peak_bytes=900 * MIB))
    return runs


def test_the_patch_holds_only_the_changed_keys_in_the_profile_files_form() -> None:
    # cpus 0.25; memory 100 MiB x 1.15 = 115 MiB; pids 20 x 1.5 = 30; wall 40 x 1.5 = 60 s
    rec = recommend(history(), profile="ci", current=LIMITS)
    assert rec.runs == 20
    assert rec.patch == {"cpus": 0.25, "memory": "115m", "pids": 30, "wall_timeout_s": 60}
    assert rec.yaml_patch() == "limits:\n  cpus: 0.25\n  memory: 115m\n  pids: 30\n  wall_timeout_s: 60\n"
    # already there: nothing to change
    settled = with_limits(cpus=0.25, memory_bytes=115 * MIB, pids=30, wall_timeout_s=60.0)
    unchanged = recommend(history(), profile="ci", current=settled)
    assert [r.change for r in unchanged.resources] == ["keep"] * 4
    assert unchanged.patch == {}
    assert unchanged.yaml_patch() == "limits: {}\n"


def test_the_yaml_patch_validates_through_the_profile_schema_and_an_override_applies_it(tmp_path: Path) -> None:
    rec = recommend(history(), profile="ci", current=LIMITS)
    limits = yaml.safe_load(rec.yaml_patch())["limits"]
    validated = Limits.model_validate(limits)
    assert validated.memory == 115 * MIB
    assert validated.cpus == 0.25
    # the patch as an override of the built-in whose limits the runs had, extending its own name (the docs' recipe)
    (tmp_path / "workspace-write.yaml").write_text("extends: workspace-write\n" + rec.yaml_patch(), encoding="utf-8")
    profile = ProfileRegistry([tmp_path]).get("workspace-write")
    assert (profile.limits.cpus, profile.limits.memory, profile.limits.pids, profile.limits.wall_timeout_s) == (
        0.25,
        115 * MIB,
        30,
        60.0,
    )


def test_the_docs_example_is_what_recommend_gives() -> None:
    # docs/profiles.md, Recommendations: 20 runs of workspace-write at 0.25 cores, 100 MiB, 20 processes, 40 s
    section = (DOCS / "profiles.md").read_text(encoding="utf-8").split("### Recommendations", 1)[1]
    shown = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert shown is not None
    assert recommend(history(), profile="ci", current=LIMITS).yaml_patch() == shown.group(1)


def test_the_recommendation_is_its_own_json() -> None:
    rec = recommend(history(), profile="ci", current=LIMITS)
    assert Recommendation.model_validate_json(rec.model_dump_json()) == rec


def test_runs_cut_at_an_output_cap_or_a_write_budget_are_said_not_sized() -> None:
    runs = [run("cut", cause=EndCause.OUTPUT_CAP), run("budget", cause=EndCause.WRITE_BUDGET)]
    notes = recommend(runs, profile="ci", current=LIMITS).notes
    assert [note.split(":")[0] for note in notes] == [
        "1 runs had output cut at stdout_max_bytes or stderr_max_bytes",
        "1 runs were stopped at a workspace write budget",
    ]
