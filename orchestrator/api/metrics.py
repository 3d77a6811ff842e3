"""Prometheus metrics of one service (its own registry: two apps in one process never mix)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from orchestrator.domain.wire import ExecutionState, ExecutionView
from orchestrator.pipeline.orchestrator import Telemetry

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_SLOW = (0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800)


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
        self.evidence_write = Histogram(
            "sandbox_evidence_write_seconds", "Durable evidence appends: queued to fsynced.", buckets=_FAST, registry=r
        )
        self._asked_at: dict[str, float] = {}
        self._running: set[str] = set()
        self._decided: set[str] = set()
        self._ran: set[str] = set()

    # Telemetry (from the orchestrator)
    def durable_write(self, seconds: float) -> None:
        self.evidence_write.observe(seconds)

    def sandbox_started(self, seconds: float) -> None:
        self.start_latency.observe(seconds)

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

    def render(self) -> bytes:
        return generate_latest(self.registry)
