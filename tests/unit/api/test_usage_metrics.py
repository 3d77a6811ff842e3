"""What runs used, per profile, in the service's /metrics (api/metrics.py, ``ServiceMetrics.run_measured``): the
histograms' buckets, sums and counts, the end causes, the limits, read back from the exposition a scrape gets.
Every expected figure is worked out by hand from the runs below."""

from __future__ import annotations

import math

import pytest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.api.metrics import USAGE_HISTOGRAMS, ServiceMetrics
from orchestrator.domain.usage import EndCause, RunLimits, RunUsage

MiB = 2**20
GiB = 2**30

CI = RunLimits(
    cpus=2.0,
    memory_bytes=2 * GiB,
    pids=512,
    wall_timeout_s=1800.0,
    stdout_max_bytes=MiB,
    stderr_max_bytes=MiB,
    workspace_write_bytes=GiB,
    workspace_write_files=10_000,
)
UNTRUSTED = RunLimits(
    cpus=0.5,
    memory_bytes=256 * MiB,
    pids=64,
    wall_timeout_s=60.0,
    stdout_max_bytes=MiB,
    stderr_max_bytes=MiB,
    workspace_write_bytes=0,
    workspace_write_files=0,
)


def usage(
    profile: str,
    cause: EndCause,
    limits: RunLimits,
    *,
    cpu: float | None,
    memory: int | None,
    pids: int | None,
    wall: float | None,
) -> RunUsage:
    known = cpu is not None
    return RunUsage(
        execution_id=f"exec-{profile}-{cause.value}",
        profile=profile,
        ended_at=1_700_000_000.0,
        cause=cause,
        limits=limits,
        cpu_seconds=cpu,
        memory_peak_bytes=memory,
        pids_peak=pids,
        wall_seconds=wall,
        stdout_bytes=None,
        stderr_bytes=None,
        workspace_bytes_written=None,
        workspace_files_written=None,
        source="cgroup" if known else None,
        tenant="team-a",
    )


RUNS = [
    # 0.3 CPU s over 2 s of wall time: 0.15 cores
    usage("ci", EndCause.OK, CI, cpu=0.3, memory=100 * MiB, pids=7, wall=2.0),
    # 90 CPU s over 60 s: 1.5 cores; its peak exactly the limit (a bucket's bound is inclusive: le="2 GiB")
    usage("ci", EndCause.OOM, CI, cpu=90.0, memory=2 * GiB, pids=40, wall=60.0),
    # killed at its deadline, nothing read but its wall time
    usage("ci", EndCause.WALL_TIMEOUT, CI, cpu=None, memory=None, pids=None, wall=1800.0),
    # its sandbox never started: nothing known at all
    usage("untrusted", EndCause.FAILED, UNTRUSTED, cpu=None, memory=None, pids=None, wall=None),
]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(runs: list[RunUsage], in_force: list[tuple[str, RunLimits]] | None = None) -> Samples:
    """The samples of a /metrics body after these runs, by name and labels (bucket bounds as floats); ``in_force``:
    the profiles in force and their limits now."""
    metrics = ServiceMetrics()
    if in_force is not None:
        metrics.watch_limits(lambda: in_force)
    for run in runs:
        metrics.run_measured(run)
    samples: Samples = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for s in family.samples:
            labels = {k: (repr(float(v)) if k == "le" else v) for k, v in s.labels.items()}
            samples[s.name, frozenset(labels.items())] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str | float) -> float | None:
    key = frozenset((k, repr(float(v)) if k == "le" else str(v)) for k, v in labels.items())
    return samples.get((name, key))


@pytest.fixture(scope="module")
def samples() -> Samples:
    return scrape(RUNS, [("ci", CI), ("untrusted", UNTRUSTED)])


# (histogram, {bucket bound: runs at or below it}, count, sum) for the profile ci, from RUNS by hand
CI_HISTOGRAMS = [
    ("sandbox_run_wall_seconds", {1: 0, 2.5: 1, 30: 1, 60: 2, 900: 2, 1800: 3, 86400: 3}, 3, 1862.0),
    ("sandbox_run_cpu_seconds", {0.25: 0, 0.5: 1, 60: 1, 120: 2, 86400: 2}, 2, 90.3),
    ("sandbox_run_cores", {0.1: 0, 0.25: 1, 1: 1, 1.5: 2, 64: 2}, 2, 1.65),
    (
        "sandbox_run_memory_peak_bytes",
        {64 * MiB: 0, 128 * MiB: 1, GiB: 1, 2 * GiB: 2, 64 * GiB: 2},
        2,
        float(100 * MiB + 2 * GiB),
    ),
    ("sandbox_run_pids_peak", {4: 0, 8: 1, 32: 1, 64: 2, 32768: 2}, 2, 47.0),
]


@pytest.mark.parametrize(("name", "buckets", "count", "total"), CI_HISTOGRAMS, ids=[h[0] for h in CI_HISTOGRAMS])
def test_each_measure_s_buckets_count_and_sum(
    samples: Samples, name: str, buckets: dict[float, int], count: int, total: float
) -> None:
    for bound, runs in buckets.items():
        assert value(samples, f"{name}_bucket", profile="ci", le=bound) == runs, (name, bound)
    assert value(samples, f"{name}_bucket", profile="ci", le=math.inf) == count
    assert value(samples, f"{name}_count", profile="ci") == count
    assert value(samples, f"{name}_sum", profile="ci") == pytest.approx(total)


def test_unknown_measures_are_not_observed(samples: Samples) -> None:
    # the ci run that timed out added its wall time (3 walls) but no 0 of CPU, memory or processes (2 each)
    assert value(samples, "sandbox_run_memory_peak_bytes_bucket", profile="ci", le=4 * MiB) == 0
    assert value(samples, "sandbox_run_cpu_seconds_bucket", profile="ci", le=0.01) == 0
    assert value(samples, "sandbox_run_pids_peak_bucket", profile="ci", le=1) == 0
    # the untrusted run knew nothing: no sample of any histogram for it, its end counted all the same
    untrusted = [key for key in samples if ("profile", "untrusted") in key[1]]
    histograms = {h.name for h in USAGE_HISTOGRAMS}
    assert not [name for name, _ in untrusted if name.rsplit("_", 1)[0] in histograms]
    assert value(samples, "sandbox_runs_ended_total", profile="untrusted", cause="failed") == 1


def test_runs_ended_by_profile_and_cause_every_cause_from_zero(samples: Samples) -> None:
    ended = {
        (dict(labels)["profile"], dict(labels)["cause"]): v
        for (name, labels), v in samples.items()
        if name == "sandbox_runs_ended_total"
    }
    expected = {(p, c.value): 0.0 for p in ("ci", "untrusted") for c in EndCause}
    expected |= {("ci", "ok"): 1.0, ("ci", "oom"): 1.0, ("ci", "wall_timeout"): 1.0, ("untrusted", "failed"): 1.0}
    assert ended == expected


def test_the_limits_each_profile_s_runs_had(samples: Samples) -> None:
    limits = {
        "sandbox_profile_limit_memory_bytes": (2 * GiB, 256 * MiB),
        "sandbox_profile_limit_cpus": (2.0, 0.5),
        "sandbox_profile_limit_wall_timeout_seconds": (1800.0, 60.0),
        "sandbox_profile_limit_pids": (512, 64),
    }
    for name, (ci, untrusted) in limits.items():
        assert value(samples, name, profile="ci") == ci, name
        assert value(samples, name, profile="untrusted") == untrusted, name
    # no gauge of a limit nobody sets (CPU seconds: the cores for the whole timeout)
    assert not [name for name, _ in samples if name.startswith("sandbox_profile_limit_cpu_seconds")]


def test_a_profile_s_limit_is_the_profile_s_now_never_one_run_s() -> None:
    """A run narrowed by its request or a grant (here: a 5 s timeout) moves no line: the gauges are read from the
    profiles in force at each scrape, and change when a profile does."""
    narrowed = RunLimits(**{**CI.to_json(), "wall_timeout_s": 5.0})
    later = usage("ci", EndCause.OK, narrowed, cpu=1.0, memory=GiB, pids=3, wall=1.0)
    in_force = [("ci", CI)]
    metrics = ServiceMetrics()
    metrics.watch_limits(lambda: in_force)
    for run in [*RUNS, later]:
        metrics.run_measured(run)

    def gauge(name: str) -> float | None:
        found = text_string_to_metric_families(metrics.render().decode())
        return next(
            (s.value for f in found for s in f.samples if s.name == name and s.labels == {"profile": "ci"}), None
        )

    assert gauge("sandbox_profile_limit_wall_timeout_seconds") == 1800.0
    in_force[0] = ("ci", RunLimits(**{**CI.to_json(), "memory_bytes": 4 * GiB}))  # the profile changed
    assert gauge("sandbox_profile_limit_memory_bytes") == 4 * GiB


def test_nothing_before_a_run_but_the_families() -> None:
    text = ServiceMetrics().render().decode()
    assert "# TYPE sandbox_run_memory_peak_bytes histogram" in text
    assert "# TYPE sandbox_runs_ended_total counter" in text
    assert "sandbox_runs_ended_total{" not in text and "sandbox_run_wall_seconds_count{" not in text
