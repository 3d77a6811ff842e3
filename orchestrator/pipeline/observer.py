"""Who is told where an execution is (typed: a Protocol, never a method named by a string).

``Observer``: the service keeps its table of executions with it. ``Telemetry``: timings for the service's
metrics. Both are called on the event loop and must not block; what one raises is logged and ignored
(``GuardedObserver``, ``GuardedTelemetry``): an observer's bug never changes a decision or a run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from orchestrator.domain.decisions import ApprovalResult
from orchestrator.domain.ids import ExecutionId
from orchestrator.domain.usage import RunUsage
from orchestrator.gate.gate import GateResult
from orchestrator.profiles import ResolvedProfile

log = logging.getLogger(__name__)


class Observer(Protocol):
    def decided(self, execution_id: ExecutionId, gate: GateResult) -> None:
        """The gate decided (before any approval)."""

    def awaiting_approval(self, execution_id: ExecutionId, deadline_unix: float) -> None:
        """The ask is queued; silence until ``deadline_unix`` is APPROVAL.TIMEOUT."""

    def approval_settled(self, execution_id: ExecutionId, result: ApprovalResult) -> None:
        """An approval (or the timeout) answered the ask."""

    def running(self, execution_id: ExecutionId, profile: ResolvedProfile) -> None:
        """The begin record is durable; the sandbox is being created."""

    def measured(self, usage: RunUsage) -> None:
        """The end record of a run that began is durable: what it used, and how it ended."""


class Telemetry(Protocol):
    def durable_write(self, seconds: float) -> None:
        """A durable evidence append took ``seconds`` (queued → fsynced)."""

    def sandbox_started(self, seconds: float) -> None:
        """From the begin record to the engine's start event."""

    def end_unconfirmed(self, profile: str) -> None:
        """The engine's account of an end the sandbox's init reported disagreed with it, or never came."""

    def run_measured(self, usage: RunUsage) -> None:
        """The end record of a run that began is durable: what it used, and how it ended."""


class NoTelemetry:
    """The default: timings are dropped."""

    def durable_write(self, seconds: float) -> None:
        pass

    def sandbox_started(self, seconds: float) -> None:
        pass

    def end_unconfirmed(self, profile: str) -> None:
        pass

    def run_measured(self, usage: RunUsage) -> None:
        pass


def _safely(call: Callable[[], None], what: str) -> None:
    try:
        call()
    except Exception as exc:  # never in the way of a decision or a run
        log.warning("execution observer failed in %s: %s", what, type(exc).__name__)


class GuardedObserver:
    """An ``Observer`` (absent or not) whose failures are logged, never raised."""

    def __init__(self, observer: Observer | None) -> None:
        self._observer = observer

    def decided(self, execution_id: ExecutionId, gate: GateResult) -> None:
        if (o := self._observer) is not None:
            _safely(lambda: o.decided(execution_id, gate), "decided")

    def awaiting_approval(self, execution_id: ExecutionId, deadline_unix: float) -> None:
        if (o := self._observer) is not None:
            _safely(lambda: o.awaiting_approval(execution_id, deadline_unix), "awaiting_approval")

    def approval_settled(self, execution_id: ExecutionId, result: ApprovalResult) -> None:
        if (o := self._observer) is not None:
            _safely(lambda: o.approval_settled(execution_id, result), "approval_settled")

    def running(self, execution_id: ExecutionId, profile: ResolvedProfile) -> None:
        if (o := self._observer) is not None:
            _safely(lambda: o.running(execution_id, profile), "running")

    def measured(self, usage: RunUsage) -> None:
        if (o := self._observer) is not None:
            _safely(lambda: o.measured(usage), "measured")


class GuardedTelemetry:
    """The current ``Telemetry`` (the service swaps in its metrics after start), failures logged."""

    def __init__(self) -> None:
        self.sink: Telemetry = NoTelemetry()

    def durable_write(self, seconds: float) -> None:
        _safely(lambda: self.sink.durable_write(seconds), "durable_write")

    def sandbox_started(self, seconds: float) -> None:
        _safely(lambda: self.sink.sandbox_started(seconds), "sandbox_started")

    def end_unconfirmed(self, profile: str) -> None:
        _safely(lambda: self.sink.end_unconfirmed(profile), "end_unconfirmed")

    def run_measured(self, usage: RunUsage) -> None:
        _safely(lambda: self.sink.run_measured(usage), "run_measured")
