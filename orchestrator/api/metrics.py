"""Prometheus metrics of one service (its own registry: two apps in one process never mix).

The pool's (``sandbox_pool_*``, per profile) are read from the pool at each scrape (``PoolCollector``), and read
back from a service's /metrics by ``sandboxctl doctor --url`` (``read_pool``).

What each run used, per profile (``sandbox_run_*``, ``sandbox_runs_ended_total``, ``sandbox_profile_limit_*``):
observed once per run that began, from its ``RunUsage`` (``run_measured``). The chart's Grafana dashboard
(charts/sandbox-orchestrator/dashboards/sandbox-profiles.json) draws them; its expressions name only these."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.domain.usage import MEASURE_BY_NAME, EndCause, Measure, RunLimits, RunUsage
from orchestrator.domain.wire import ExecutionState, ExecutionView
from orchestrator.pipeline.orchestrator import Telemetry
from orchestrator.pipeline.pool import ProfileCounts, ProfilePool, SandboxPool

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_SLOW = (0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800)

# The buckets of a run's usage, fixed (a histogram's bounds cannot change without breaking its series). Wide
# enough for any sandbox run, fine enough to size a limit: a quantile is interpolated inside its bucket, so it is
# off by at most that bucket's width (a factor 2 for memory and processes, 2 to 2.5 for durations).
# CPU and wall seconds: 10 ms (a command that barely started) .. 1 day (the longest wall timeout worth having).
_RUN_SECONDS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200,
                14400, 43200, 86400)  # fmt: skip
# Cores used on average: a hundredth of a core (a run that mostly waited) .. 64.
_RUN_CORES = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
# Memory peak: 4 MiB (a shell and little else) .. 64 GiB, by powers of 2 (limits are set in MiB and GiB).
_RUN_MEMORY = tuple(float(2**n) for n in range(22, 37))
# Processes and threads at the peak: 1 .. 32,768, by powers of 2.
_RUN_PIDS = tuple(float(2**n) for n in range(16))


@dataclass(frozen=True, slots=True)
class UsageHistogram:
    """One per-profile histogram of what runs used: the measure it observes (the domain's table says what a
    run's value is; None, unknown, is not observed) and the gauge of the limit the measure is held against."""

    name: str
    measure: Measure
    buckets: tuple[float, ...]
    limit: str | None  # the gauge ``sandbox_profile_limit_*`` (its value: ``measure.limit``); None: no gauge


USAGE_HISTOGRAMS: tuple[UsageHistogram, ...] = (
    UsageHistogram("sandbox_run_cpu_seconds", MEASURE_BY_NAME["cpu_seconds"], _RUN_SECONDS, None),
    UsageHistogram("sandbox_run_cores", MEASURE_BY_NAME["cores"], _RUN_CORES, "sandbox_profile_limit_cpus"),
    UsageHistogram(
        "sandbox_run_memory_peak_bytes",
        MEASURE_BY_NAME["memory_peak_bytes"],
        _RUN_MEMORY,
        "sandbox_profile_limit_memory_bytes",
    ),
    UsageHistogram("sandbox_run_pids_peak", MEASURE_BY_NAME["pids_peak"], _RUN_PIDS, "sandbox_profile_limit_pids"),
    UsageHistogram(
        "sandbox_run_wall_seconds",
        MEASURE_BY_NAME["wall_seconds"],
        _RUN_SECONDS,
        "sandbox_profile_limit_wall_timeout_seconds",
    ),
)
RUNS_ENDED = "sandbox_runs_ended"  # scraped as sandbox_runs_ended_total{profile, cause}


class ServiceMetrics(Telemetry):
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.decisions = Counter("sandbox_decisions", "Gate decisions, by outcome.", ["outcome"], registry=r)
        self.executions = Counter(
            "sandbox_executions", "Executions that ended, by status and profile.", ["status", "profile"], registry=r
        )
        self.approval_wait = Histogram(
            "sandbox_approval_wait_seconds", "From the ask to its answer.", buckets=_SLOW, registry=r
        )
        self.start_latency = Histogram(
            "sandbox_start_latency_seconds",
            "From the begin record to the engine's start event.",
            buckets=_FAST,
            registry=r,
        )
        self.active = Gauge("sandbox_active_sandboxes", "Executions running now.", registry=r)
        self.ends_unconfirmed = Counter(
            "sandbox_end_unconfirmed",
            "Ends a sandbox's init reported that the engine's own account contradicted (exit code, OOM) or never"
            " gave (evidence: end_unconfirmed).",
            ["profile"],
            registry=r,
        )
        self.evidence_write = Histogram(
            "sandbox_evidence_write_seconds", "Durable evidence appends: queued to fsynced.", buckets=_FAST, registry=r
        )
        # runs' usage: labelled by profile only (a few, the operator's), never by tenant or execution, so the
        # series stay bounded by profiles x buckets (and causes), whatever the traffic
        self.runs_ended = Counter(
            RUNS_ENDED, "Runs that began and ended, by profile and end cause.", ["profile", "cause"], registry=r
        )
        self.usage: list[tuple[Measure, Histogram]] = []
        for h in USAGE_HISTOGRAMS:
            m = h.measure
            self.usage.append(
                (m, Histogram(h.name, f"Per run: {m.description}.", ["profile"], buckets=h.buckets, registry=r))
            )
        self._profiles_measured: set[str] = set()
        self._asked_at: dict[str, float] = {}
        self._running: set[str] = set()
        self._decided: set[str] = set()
        self._ran: set[str] = set()

    # Telemetry (from the orchestrator)
    def durable_write(self, seconds: float) -> None:
        self.evidence_write.observe(seconds)

    def sandbox_started(self, seconds: float) -> None:
        self.start_latency.observe(seconds)

    def end_unconfirmed(self, profile: str) -> None:
        self.ends_unconfirmed.labels(profile).inc()

    def run_measured(self, usage: RunUsage) -> None:
        profile = usage.profile
        if profile not in self._profiles_measured:
            # every cause from 0 at a profile's first run: rate() and increase() then see its first oom too
            self._profiles_measured.add(profile)
            for cause in EndCause:
                self.runs_ended.labels(profile, cause.value)
        self.runs_ended.labels(profile, usage.cause.value).inc()
        for measure, histogram in self.usage:
            value = measure.value(usage)
            if value is not None:  # unknown is not observed: a 0 would pull every quantile down
                histogram.labels(profile).observe(value)

    # state changes (from the execution manager)
    def observe(self, view: ExecutionView) -> None:
        ident = view.execution_id
        if view.decision is not None and ident not in self._decided:
            self._decided.add(ident)
            self.decisions.labels(view.decision).inc()
        if view.state is ExecutionState.PENDING_APPROVAL:
            self._asked_at.setdefault(ident, time.monotonic())
        elif ident in self._asked_at:
            self.approval_wait.observe(time.monotonic() - self._asked_at.pop(ident))
        if view.state is ExecutionState.RUNNING and ident not in self._running:
            self._running.add(ident)
            self._ran.add(ident)
            self.active.inc()
        if view.state.final:
            if ident in self._running:
                self._running.discard(ident)
                self.active.dec()
            self._decided.discard(ident)
            # the profile a sandbox got (resolved, so one of the profiles'), never a name an agent asked for
            profile = view.profile if ident in self._ran else "-"
            self._ran.discard(ident)
            self.executions.labels(view.state.value, profile or "-").inc()

    def watch_limits(self, limits_now: Callable[[], Iterable[tuple[str, RunLimits]]]) -> None:
        """Each profile's limits as a run gets them now (``limits_now``: the profiles in force), at each scrape: the
        line a dashboard draws beside the distribution, never one run's narrowing (a request's own timeout, a
        grant's bound)."""
        self.registry.register(LimitsCollector(limits_now))

    def watch_pool(self, pool: SandboxPool) -> None:
        """The pool's metrics from now on, as it is at each scrape."""
        self.registry.register(PoolCollector(pool))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class LimitsCollector:
    """``sandbox_profile_limit_*``: the limits of each profile in force, read at each scrape."""

    def __init__(self, limits_now: Callable[[], Iterable[tuple[str, RunLimits]]]) -> None:
        self._limits_now = limits_now

    def collect(self) -> Iterator[Metric]:
        families = [
            (h.measure, GaugeMetricFamily(h.limit, f"The profile's limits.{h.measure.limit_field} as a run gets it "
                                          "now (the config's caps applied).", labels=["profile"]))
            for h in USAGE_HISTOGRAMS
            if h.limit is not None
        ]  # fmt: skip
        for profile, limits in self._limits_now():
            for measure, family in families:
                family.add_metric([profile], measure.limit(limits))
        yield from (family for _, family in families)


#: the pool's metric families (their names as scraped: a counter's with _total)
POOL_CLAIMS = "sandbox_pool_claims"
POOL_KEYS = "sandbox_pool_keys"
POOL_READY = "sandbox_pool_ready"
POOL_FILLING = "sandbox_pool_filling"
POOL_TARGET = "sandbox_pool_target"
POOL_FILLS_FAILED = "sandbox_pool_fills_failed"
POOL_DISCARDED = "sandbox_pool_discarded"


class PoolParts(Protocol):
    def profiles(self) -> list[ProfilePool]:
        """Each profile's part of the pool now (``SandboxPool.profiles``)."""
        ...


class PoolCollector:
    """The pool's state and counts per profile, each scrape (a family with no sample when no profile was seen:
    its HELP and TYPE still say the pool is on)."""

    def __init__(self, pool: PoolParts) -> None:
        self._pool = pool

    def collect(self) -> Iterator[Metric]:
        parts = self._pool.profiles()
        claims = CounterMetricFamily(
            POOL_CLAIMS,
            "Claims of a pre-started sandbox: hit (one was ready) or miss (the run started cold).",
            labels=["profile", "result"],
        )
        keys = GaugeMetricFamily(POOL_KEYS, "Keys (profile, workspace, tenant) the pool holds now.", labels=["profile"])
        ready = GaugeMetricFamily(POOL_READY, "Pre-started sandboxes ready now.", labels=["profile"])
        filling = GaugeMetricFamily(POOL_FILLING, "Pre-started sandboxes being filled now.", labels=["profile"])
        target = GaugeMetricFamily(
            POOL_TARGET,
            "What the profile's keys are kept at now (ready and filling): demand within floor and ceiling.",
            labels=["profile"],
        )
        failed = CounterMetricFamily(POOL_FILLS_FAILED, "Fills that failed (the key stays cold).", labels=["profile"])
        discarded = CounterMetricFamily(
            POOL_DISCARDED, "Pre-started sandboxes destroyed unclaimed, by reason.", labels=["profile", "reason"]
        )
        for part in parts:
            claims.add_metric([part.profile, "hit"], part.counts.hits)
            claims.add_metric([part.profile, "miss"], part.counts.misses)
            keys.add_metric([part.profile], part.keys)
            ready.add_metric([part.profile], part.ready)
            filling.add_metric([part.profile], part.filling)
            target.add_metric([part.profile], part.target)
            failed.add_metric([part.profile], part.counts.fills_failed)
            for reason, count in sorted(part.counts.discarded.items()):
                discarded.add_metric([part.profile, reason], count)
        yield from (claims, keys, ready, filling, target, failed, discarded)


def read_pool(text: str) -> list[ProfilePool] | None:
    """The pool per profile, from a service's /metrics (``text``); None when it keeps no pool (no family of it)."""
    families = {f.name: f for f in text_string_to_metric_families(text) if f.name.startswith("sandbox_pool_")}
    if not families:
        return None
    values: dict[str, dict[str, float]] = collections.defaultdict(dict)  # profile -> what -> value
    discarded: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for family in families.values():
        for sample in family.samples:
            profile = sample.labels.get("profile", "")
            if family.name == POOL_CLAIMS and sample.name.endswith("_total"):
                values[profile][sample.labels.get("result", "")] = sample.value
            elif family.name == POOL_DISCARDED and sample.name.endswith("_total"):
                discarded[profile][sample.labels.get("reason", "")] = int(sample.value)
            elif sample.name in (POOL_KEYS, POOL_READY, POOL_FILLING, POOL_TARGET, f"{POOL_FILLS_FAILED}_total"):
                values[profile][sample.name] = sample.value
    return [
        ProfilePool(
            profile=profile,
            keys=int(v.get(POOL_KEYS, 0)),
            ready=int(v.get(POOL_READY, 0)),
            filling=int(v.get(POOL_FILLING, 0)),
            target=int(v.get(POOL_TARGET, 0)),
            counts=ProfileCounts(
                hits=int(v.get("hit", 0)),
                misses=int(v.get("miss", 0)),
                fills_failed=int(v.get(f"{POOL_FILLS_FAILED}_total", 0)),
                discarded=discarded[profile],
            ),
        )
        for profile, v in sorted(values.items())
    ]
