"""One execution in a fresh sandbox, with its evidence.

begin record (durable) → subscribe to the engine's events → create (while the workspace meter starts
watching) → start → output ‖ wait under the deadline and the workspace write budget → kill on timeout or
over budget → inspect (OOM from the engine) → destroy on every path → side effects (set-id bits removed)
→ end record. Lifecycle records carry the engine's own timestamps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.backends.base import (
    ExitState,
    LaunchSpec,
    LifecycleEvent,
    ResourceUsage,
    SandboxBackend,
    SandboxHandle,
    StreamCapture,
)
from orchestrator.domain.canonical import canonical_sha256
from orchestrator.domain.errors import (
    OrchestratorError,
    SandboxOOM,
    SandboxTimeout,
    SandboxWorkspaceLimit,
    SideEffectsIncomplete,
)
from orchestrator.evidence import EventType
from orchestrator.profiles import ResolvedProfile
from orchestrator.results import CollectLimits, Redactor, SideEffects, Snapshot, collect
from orchestrator.results.write_meter import MeterReport, WorkspaceMeter, WriteBudget

log = logging.getLogger(__name__)

LIFECYCLE_EVENTS: dict[str, EventType] = {
    "create": EventType.CONTAINER_CREATED,
    "start": EventType.CONTAINER_STARTED,
    "die": EventType.CONTAINER_DIED,
    "oom": EventType.CONTAINER_OOM,
    "kill": EventType.CONTAINER_KILLED,
    "destroy": EventType.CONTAINER_DESTROYED,
}
# how long teardown waits for the engine to report the destroy event before moving on
DESTROY_EVENT_WAIT_S = 5.0

Record = Callable[..., Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RunOutcome:
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_capture: StreamCapture | None
    stderr_capture: StreamCapture | None
    timed_out: bool
    oom_killed: bool
    duration_ms: int
    state: ExitState | None
    side_effects: SideEffects | None
    write_budget: MeterReport | None  # None for a read-only workspace (nothing to meter)
    redactions: int
    usage: ResourceUsage | None
    lifecycle: str
    error: OrchestratorError | None

    @property
    def truncated(self) -> bool:
        return any(c is not None and c.truncated for c in (self.stdout_capture, self.stderr_capture))

    @property
    def over_budget(self) -> bool:
        """The run passed its workspace write budget (and was killed, unless it ended first)."""
        return self.write_budget is not None and self.write_budget.exceeded is not None

    @property
    def side_effects_complete(self) -> bool:
        return self.side_effects is not None and self.side_effects.complete


def _stream_json(capture: StreamCapture | None) -> dict[str, Any] | None:
    if capture is None:
        return None
    return {"bytes": capture.total_bytes, "sha256": capture.sha256, "truncated": capture.truncated}


async def _follow_events(
    backend: SandboxBackend, execution_id: str, record: Record, seen: dict[str, asyncio.Event], ready: asyncio.Event
) -> None:
    events = backend.events(execution_id)
    try:
        ready.set()
        async for event in events:
            await _record_lifecycle(event, record)
            seen.setdefault(event.kind, asyncio.Event()).set()
            if event.kind == "destroy":
                return
    finally:
        await events.aclose()


async def _record_lifecycle(event: LifecycleEvent, record: Record) -> None:
    data: dict[str, Any] = {"sandbox_id": event.sandbox_id}
    if event.exit_code is not None:
        data["exit_code"] = event.exit_code
    if event.signal is not None:
        data["signal"] = event.signal
    await record(LIFECYCLE_EVENTS[event.kind], engine_ts=event.engine_ts.isoformat(), data=data)


# what the after-run scan reads beyond the file budget: room for the overshoot of a run killed for passing it
SCAN_MARGIN_ENTRIES = 50_000


def collect_limits(profile: ResolvedProfile) -> CollectLimits:
    """What the after-run scan may read beyond the workspace's earlier entries: twice the entries the run
    may create plus a margin (the meter stops it shortly after it passes them), so that a run within its
    budget, or killed for passing it, gets a complete record."""
    return CollectLimits(max_new_entries=2 * profile.workspace_write_files + SCAN_MARGIN_ENTRIES)


def _meter(workspace: Path, before: Snapshot, profile: ResolvedProfile, over: asyncio.Event) -> WorkspaceMeter | None:
    if profile.workspace.mode != "rw":
        return None
    loop = asyncio.get_running_loop()
    budget = WriteBudget(max_bytes=profile.workspace_write_bytes, max_files=profile.workspace_write_files)

    def exceeded() -> None:  # called from the meter's thread
        loop.call_soon_threadsafe(over.set)

    return WorkspaceMeter(workspace, before, budget, exceeded)


async def _wait_within_budget(backend: SandboxBackend, handle: SandboxHandle, over: asyncio.Event) -> int:
    """The exit code; if the write budget is passed first, the sandbox is killed (then its exit code)."""
    waiting = asyncio.ensure_future(backend.wait(handle))
    watching = asyncio.ensure_future(over.wait())
    try:
        await asyncio.wait({waiting, watching}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():
            await backend.kill(handle)
        return await waiting
    finally:
        for task in (waiting, watching):
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


async def run_in_sandbox(
    backend: SandboxBackend,
    spec: LaunchSpec,
    record: Record,
    *,
    redactor: Redactor,
    workspace: Path,
    before: Snapshot,
) -> RunOutcome:
    """Run ``spec`` once. ``record(event_type, **fields)`` appends evidence for this execution;
    ``before`` is the workspace as it was before the sandbox existed."""
    profile: ResolvedProfile = spec.profile
    seen: dict[str, asyncio.Event] = {"destroy": asyncio.Event()}
    ready = asyncio.Event()
    follower = asyncio.create_task(_follow_events(backend, spec.execution_id, record, seen, ready))
    await ready.wait()
    over_budget = asyncio.Event()
    meter = _meter(workspace, before, profile, over_budget)
    meter_started: asyncio.Future[None] | None = None
    meter_report: MeterReport | None = None
    handle: SandboxHandle | None = None
    timed_out = False
    exit_code: int | None = None
    state: ExitState | None = None
    captures: tuple[StreamCapture, StreamCapture] | None = None
    error: OrchestratorError | None = None
    usage: ResourceUsage | None = None
    started = time.monotonic()
    try:
        if meter is not None:  # the watches are set up while the engine creates the container
            meter_started = asyncio.ensure_future(asyncio.to_thread(meter.start))
        handle = await backend.create(spec)
        capture_task = asyncio.create_task(backend.capture(handle, profile.stdout_max_bytes, profile.stderr_max_bytes))
        try:
            if meter_started is not None:
                await meter_started
            await backend.start(handle)
            try:
                async with asyncio.timeout(profile.wall_timeout_s):
                    exit_code = await _wait_within_budget(backend, handle, over_budget)
            except TimeoutError:
                timed_out = True
                await backend.kill(handle)
                exit_code = await backend.wait(handle)
            # output streams close when the container exits; bound the wait anyway
            async with asyncio.timeout(10):
                captures = await capture_task
        finally:
            if not capture_task.done():
                capture_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await capture_task
        state = await backend.inspect(handle)
        usage = await backend.usage(handle)
    finally:
        duration_ms = round((time.monotonic() - started) * 1000)
        if handle is not None:
            await asyncio.shield(_teardown(backend, handle, seen))
        if meter_started is not None:
            # the sandbox is gone: the meter's last look settles its figures
            meter_report = await asyncio.shield(_stop_meter(meter, meter_started))
        lifecycle = _lifecycle_status(follower, seen)
        if not follower.done():
            follower.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await follower

    oom = bool(state and state.oom_killed)
    side_effects = await asyncio.to_thread(
        collect, before, workspace, redactor=redactor, limits=collect_limits(profile)
    )
    if timed_out:
        error = SandboxTimeout(f"killed after the {profile.wall_timeout_s:g}s deadline")
    elif oom:
        error = SandboxOOM(f"killed for exceeding the {profile.memory_bytes} byte memory limit")
    elif meter_report is not None and meter_report.exceeded is not None:
        error = SandboxWorkspaceLimit(
            f"{meter_report.detail}: the sandbox was stopped (write budget: {profile.workspace_write_bytes} bytes, "
            f"{profile.workspace_write_files} entries)",
            details={"exceeded": meter_report.exceeded},
        )
    elif not side_effects.complete:
        error = SideEffectsIncomplete(side_effects.incompleteness() or "incomplete")
    stdout = redactor.redact(captures[0].data) if captures else None
    stderr = redactor.redact(captures[1].data) if captures else None
    return RunOutcome(
        exit_code=state.exit_code if state and state.exit_code is not None else exit_code,
        stdout=stdout.data if stdout else b"",
        stderr=stderr.data if stderr else b"",
        stdout_capture=captures[0] if captures else None,
        stderr_capture=captures[1] if captures else None,
        timed_out=timed_out,
        oom_killed=oom,
        duration_ms=duration_ms,
        state=state,
        side_effects=side_effects,
        write_budget=meter_report,
        redactions=(stdout.count if stdout else 0) + (stderr.count if stderr else 0),
        usage=usage,
        lifecycle=lifecycle,
        error=error,
    )


async def _stop_meter(meter: WorkspaceMeter | None, started: asyncio.Future[None]) -> MeterReport | None:
    """Stops a meter whose start may still be running or may have failed (then there is nothing to stop)."""
    try:
        await started
    except Exception as err:
        log.warning("the workspace meter did not start: %s", err)
        return None
    assert meter is not None
    return await asyncio.to_thread(meter.stop)


def _lifecycle_status(follower: asyncio.Task[None], seen: dict[str, asyncio.Event]) -> str:
    """Whether the evidence holds the whole lifecycle as the engine reported it, said plainly."""
    if follower.done() and not follower.cancelled() and follower.exception() is not None:
        err = follower.exception()
        return f"failed: {type(err).__name__}: {err}"
    return "complete" if seen["destroy"].is_set() else "incomplete: no destroy event within the wait"


async def _teardown(backend: SandboxBackend, handle: SandboxHandle, seen: dict[str, asyncio.Event]) -> None:
    """Remove the sandbox whatever happened; then give the engine a moment to report it."""
    try:
        await backend.destroy(handle)
    except Exception as err:
        # not a traceback for the user: the reaper collects it (sandboxctl gc, or the next run)
        log.warning("could not remove sandbox %s (%s); it will be collected as an orphan", handle.name, err)
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(DESTROY_EVENT_WAIT_S):
            await seen["destroy"].wait()


def outputs_digest(outcome: RunOutcome) -> str:
    return canonical_sha256(
        {"stdout": _stream_json(outcome.stdout_capture), "stderr": _stream_json(outcome.stderr_capture)}
    )


def side_effects_json(effects: SideEffects | None, budget: MeterReport | None = None) -> dict[str, Any] | None:
    """The side-effect part of an end record: bounded in advance (``SIDE_EFFECTS_MAX_BYTES`` plus the
    meter's few figures), whatever names the workload chose."""
    if effects is None:
        return None
    out: dict[str, Any] = effects.to_dict()
    if budget is not None:
        out["write_budget"] = budget.to_dict()
    return out


def finished_data(outcome: RunOutcome, profile: ResolvedProfile) -> dict[str, Any]:
    """The sanitized end-of-execution facts for evidence: sizes and hashes, never content."""
    state = outcome.state
    return {
        "exit_code": outcome.exit_code,
        "timed_out": outcome.timed_out,
        "oom_killed": outcome.oom_killed,
        "duration_ms": outcome.duration_ms,
        "stdout": _stream_json(outcome.stdout_capture),
        "stderr": _stream_json(outcome.stderr_capture),
        "redactions": outcome.redactions,
        "image": profile.image,
        "image_id": state.image_id if state else None,
        "usage": dataclasses.asdict(outcome.usage) if outcome.usage else None,
        "lifecycle_stream": outcome.lifecycle,
        "runtime": profile.runtime,
        "seccomp_sha256": profile.seccomp_sha256,
        "engine_started_at": state.started_at.isoformat() if state and state.started_at else None,
        "engine_finished_at": state.finished_at.isoformat() if state and state.finished_at else None,
        "engine_error": state.error if state else None,
        "side_effects": side_effects_json(outcome.side_effects, outcome.write_budget),
    }
