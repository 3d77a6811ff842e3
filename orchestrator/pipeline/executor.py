"""One execution in a fresh sandbox, with its evidence.

begin record (durable) → subscribe to the engine's events → create (while the workspace meter starts
watching) → start → output ‖ wait under the deadline and the workspace write budget → kill on timeout or
over budget → inspect (OOM from the engine) → destroy on every path → side effects (set-id bits removed)
→ redact, then cap the output. Lifecycle records carry the engine's own timestamps; the end record is
built from the outcome by :mod:`orchestrator.pipeline.end_record`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.backends.base import (
    ExitState,
    LaunchSpec,
    LifecycleEvent,
    OutputCallback,
    OutputStream,
    PooledLaunch,
    ResourceUsage,
    SandboxBackend,
    SandboxHandle,
    StreamCapture,
)
from orchestrator.domain.errors import (
    InternalError,
    OrchestratorError,
    SandboxOOM,
    SandboxPidsLimit,
    SandboxTimeout,
    SandboxUnavailable,
    SandboxWorkspaceLimit,
    SideEffectsIncomplete,
)
from orchestrator.egress import EgressProxy
from orchestrator.egress.runs import proxy_environment
from orchestrator.evidence import EventType
from orchestrator.pipeline.live_output import LiveOutput
from orchestrator.pipeline.pool import PooledSandbox
from orchestrator.profiles import ResolvedProfile
from orchestrator.results import CollectLimits, Redactor, SideEffects, Snapshot, collect
from orchestrator.results.write_meter import MeterReport, WorkspaceMeter, WriteBudget

log = logging.getLogger(__name__)

LIFECYCLE_EVENTS: dict[str, EventType] = {
    "create": EventType.CONTAINER_CREATED,
    "schedule": EventType.CONTAINER_SCHEDULED,
    "start": EventType.CONTAINER_STARTED,
    "die": EventType.CONTAINER_DIED,
    "oom": EventType.CONTAINER_OOM,
    "kill": EventType.CONTAINER_KILLED,
    "destroy": EventType.CONTAINER_DESTROYED,
}
# what of an engine event's attributes the evidence keeps (Docker's hold every label; these are facts)
RECORDED_ATTRIBUTES = ("reason", "node")
# how long the output may go on arriving after the sandbox exited (a cluster's log API lags behind)
OUTPUT_END_WAIT_S = 10.0
# how long teardown waits for the engine to report the destroy event before moving on
DESTROY_EVENT_WAIT_S = 5.0
#: what a pooled sandbox's own records hold already (pipeline/pool.py), not repeated on the execution's
POOL_RECORDED = frozenset({"create", "schedule", "start"})

Record = Callable[..., Awaitable[None]]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class KeptOutput:
    """One output stream as the orchestrator keeps it: redacted, then capped. Of the raw stream only its
    size is kept (never a hash: it may hold secrets)."""

    data: bytes
    total_bytes: int
    truncated: bool
    redactions: int


def keep_output(capture: StreamCapture, limit: int, redactor: Redactor) -> KeptOutput:
    """Redact, then cap: ``capture`` holds ``limit + redactor.margin`` bytes of the stream at most."""
    kept = redactor.redact_capped(capture.data, limit, complete=not capture.truncated)
    return KeptOutput(kept.data, capture.total_bytes, kept.truncated, kept.count)


@dataclass(frozen=True, slots=True)
class RunOutcome:
    exit_code: int | None
    stdout: bytes
    stderr: bytes
    stdout_kept: KeptOutput | None
    stderr_kept: KeptOutput | None
    timed_out: bool
    oom_killed: bool
    duration_ms: int
    state: ExitState | None
    side_effects: SideEffects | None
    side_effects_error: str | None
    """Why the side effects are unknown (the workspace could not be read after the run), if they are."""
    write_budget: MeterReport | None  # None for a read-only workspace (nothing to meter)
    usage: ResourceUsage | None
    lifecycle: str
    error: OrchestratorError | None
    pids_limit_killed: bool = False  # the runtime stopped the sandbox at its pids limit (gVisor)
    # the end came from the sandbox's own init: the engine's account of it, and the sandbox's removal, are
    # recorded after the end record, by this (the caller starts it once the end record is written)
    confirm: Callable[[], Awaitable[None]] | None = None

    @property
    def truncated(self) -> bool:
        return any(k is not None and k.truncated for k in (self.stdout_kept, self.stderr_kept))

    @property
    def redactions(self) -> int:
        return sum(k.redactions for k in (self.stdout_kept, self.stderr_kept) if k is not None)

    @property
    def cpu_seconds(self) -> float | None:
        """The CPU time the engine reported (None: it did not)."""
        cpu_ns = self.usage.cpu_total_ns if self.usage is not None else None
        return None if cpu_ns is None else cpu_ns / 1e9

    @property
    def kept_bytes(self) -> int:
        """The output kept: what the caller was given."""
        return sum(len(k.data) for k in (self.stdout_kept, self.stderr_kept) if k is not None)

    @property
    def over_budget(self) -> bool:
        """The run passed its workspace write budget (and was killed, unless it ended first)."""
        return self.write_budget is not None and self.write_budget.exceeded is not None

    @property
    def side_effects_complete(self) -> bool:
        return self.side_effects is not None and self.side_effects.complete


async def _follow_events(
    backend: SandboxBackend,
    execution_id: str,
    record: Record,
    seen: dict[str, asyncio.Event],
    ready: asyncio.Event,
    *,
    recorded_before: frozenset[str] = frozenset(),
    durable: set[str] | None = None,
) -> None:
    """The sandbox's lifecycle (its label ``execution_id``: a pooled one's pool id) onto this execution's
    record, but for the kinds in ``recorded_before`` (a pooled sandbox's create and start, on its own);
    the kinds in ``durable`` (filled as the run goes) on disk before they count as seen."""
    events = backend.events(execution_id)
    try:
        ready.set()
        async for event in events:
            if event.kind not in recorded_before:
                await _record_lifecycle(event, record, durable=durable is not None and event.kind in durable)
            seen.setdefault(event.kind, asyncio.Event()).set()
            if event.kind == "destroy":
                return
    finally:
        await events.aclose()


async def _record_lifecycle(event: LifecycleEvent, record: Record, *, durable: bool = False) -> None:
    data: dict[str, Any] = {"sandbox_id": event.sandbox_id}
    if event.exit_code is not None:
        data["exit_code"] = event.exit_code
    if event.signal is not None:
        data["signal"] = event.signal
    for key in RECORDED_ATTRIBUTES:
        if key in event.attributes:
            data[key] = event.attributes[key]
    await record(LIFECYCLE_EVENTS[event.kind], engine_ts=event.engine_ts.isoformat(), data=data, durable=durable)


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
    on_output: OutputCallback | None = None,
    on_started: Callable[[SandboxHandle, ResolvedProfile], None] | None = None,
    on_capped: Callable[[OutputStream], None] | None = None,
    pooled: PooledSandbox | None = None,
    egress_proxy: EgressProxy | None = None,
) -> RunOutcome:
    """Run ``spec`` once. ``record(event_type, **fields)`` appends evidence for this execution;
    ``before`` is the workspace as it was before the sandbox existed. ``on_output`` gets the output while
    the command runs, redacted and capped, in order, and what was held back once the output ended, all
    before this returns: put together, exactly the outcome's ``stdout`` / ``stderr`` (see LiveOutput).
    ``spec.egress``: the sandbox starts waiting like a pre-started one (a PooledLaunch), ``egress_proxy`` is
    put in its reach (``open_egress``), and then its command is launched, pointed at the proxy."""
    profile: ResolvedProfile = spec.profile
    seen: dict[str, asyncio.Event] = {"destroy": asyncio.Event()}
    ready = asyncio.Event()
    # after the end record (an end the init reported), the last lifecycle record is flushed by itself
    durable: set[str] = set()
    if pooled is not None:  # its create and start were recorded when it was filled, under its pool id
        follow = _follow_events(
            backend, pooled.pool_id, record, seen, ready, recorded_before=POOL_RECORDED, durable=durable
        )
    else:
        follow = _follow_events(backend, spec.execution_id, record, seen, ready, durable=durable)
    follower = asyncio.create_task(follow)
    # a pooled sandbox is this run's from the first line on: whatever ends the run, its teardown removes it
    handle: SandboxHandle | None = None if pooled is None else pooled.handle
    timed_out = False
    exit_code: int | None = None
    state: ExitState | None = None
    captures: tuple[StreamCapture, StreamCapture] | None = None
    error: OrchestratorError | None = None
    usage: ResourceUsage | None = None
    over_budget = asyncio.Event()
    meter = _meter(workspace, before, profile, over_budget)
    meter_started: asyncio.Future[None] | None = None
    meter_report: MeterReport | None = None
    started = time.monotonic()
    # a margin past the caps: a secret the cap cuts in two is still seen whole, and redacted
    margin = redactor.margin
    live = None if on_output is None else LiveOutput(redactor, profile, on_output, on_capped)
    launched_at: datetime | None = None
    reported = False  # its end from its own init's report: the engine confirms it after the end record
    try:
        if meter is not None:  # the watches are set up while the events are subscribed to and the sandbox made
            meter_started = asyncio.ensure_future(asyncio.to_thread(meter.start))
        await ready.wait()
        # an egress run's sandbox starts with our init waiting: the proxy is in its reach before its command is
        waits = pooled is None and spec.egress is not None
        if pooled is not None:
            handle = pooled.handle
        else:
            handle = await backend.create(dataclasses.replace(spec, kind=PooledLaunch()) if waits else spec)
        capture_task = asyncio.create_task(
            backend.capture(
                handle,
                profile.stdout_max_bytes + margin,
                profile.stderr_max_bytes + margin,
                on_output=None if live is None else live.feed,
            )
        )
        try:
            if meter_started is not None:
                await meter_started
            if pooled is not None or waits:
                if waits:
                    await backend.start(handle)
                command = spec
                if spec.egress is not None:
                    if egress_proxy is None:
                        raise InternalError("a run with egress was given no egress proxy: it does not run")
                    url = await backend.open_egress(handle, spec.egress, egress_proxy)
                    command = dataclasses.replace(spec, env={**spec.env, **proxy_environment(url)})
                sent_at = datetime.now(UTC)
                await backend.launch(handle, command)
                # a launch that does not confirm a live init: the sandbox's end is checked against it below
                launched_at = None if backend.capabilities.launch_confirmed else sent_at
            else:
                await backend.start(handle)
            if on_started is not None:
                on_started(handle, profile)  # a session's input may go in from now on
            try:
                async with asyncio.timeout(profile.wall_timeout_s):
                    exit_code = await _wait_within_budget(backend, handle, over_budget)
            except TimeoutError:
                timed_out = True
                await backend.kill(handle)
                exit_code = await backend.wait(handle)
            # output streams close when the container exits; bound the wait anyway
            try:
                async with asyncio.timeout(OUTPUT_END_WAIT_S):
                    captures = await capture_task
            except TimeoutError:
                raise SandboxUnavailable(
                    f"the sandbox's output did not end within {OUTPUT_END_WAIT_S:g}s of its exit"
                    " (the engine is still delivering it)",
                    details={"sandbox": handle.name},
                ) from None
            if live is not None:
                live.finish(captures)
        finally:
            if not capture_task.done():
                capture_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await capture_task
        state = await backend.inspect(handle)
        usage = await backend.usage(handle)
        reported = not timed_out and backend.end_reported(handle)
        if launched_at is not None and state.finished_at is not None and state.finished_at < launched_at:
            # the pre-started sandbox had ended before its command was sent (its init killed meanwhile):
            # what the engine reports is not this command's, and nothing may say it ran
            error = SandboxUnavailable(
                "the pre-started sandbox had ended before the command was sent to it; the command did not run",
                details={"sandbox": handle.name},
            )
    finally:
        if live is not None:
            live.finish(None)  # no capture to end with (it failed): only what was settled was shown
        duration_ms = round((time.monotonic() - started) * 1000)
        if reported:  # every process of the sandbox is gone (its init killed them): only its removal waits
            lifecycle = CONFIRMATION_FOLLOWS
            durable.add("destroy")
        else:
            if handle is not None:
                await asyncio.shield(_teardown(backend, handle, seen))
            lifecycle = _lifecycle_status(follower, seen)
            await _stop_following(follower)
        # from here on a cancellation leaves no confirmation to remove the sandbox: it is removed then
        unless_cancelled = functools.partial(
            _unless_cancelled, reported=reported, backend=backend, handle=handle, seen=seen, follower=follower
        )
        if meter_started is not None:
            # the sandbox is gone: the meter's last look settles its figures
            meter_report = await unless_cancelled(asyncio.shield(_stop_meter(meter, meter_started)))

    oom = bool(state and state.oom_killed)
    pids_killed = bool(state and state.pids_limit_killed)
    pids_hits = usage.pids_limit_hits if usage else None
    side_effects, side_effects_error = await unless_cancelled(workspace_changes(before, workspace, redactor, profile))
    # the first that applies: how the sandbox ended, then what the workspace record says, then a note
    if error is not None:  # set above: the run cannot be told as any other
        pass
    elif timed_out:
        error = SandboxTimeout(f"killed after the {profile.wall_timeout_s:g}s deadline")
    elif oom:
        error = SandboxOOM(f"killed for exceeding the {profile.memory_bytes} byte memory limit")
    elif pids_killed:
        error = SandboxPidsLimit(
            f"the sandbox reached its limit of {profile.pids_limit} processes and the {profile.runtime} runtime"
            " stopped it (the output so far is kept)"
        )
    elif meter_report is not None and meter_report.exceeded is not None:
        error = SandboxWorkspaceLimit(
            f"{meter_report.detail}: the sandbox was stopped (write budget: {profile.workspace_write_bytes} bytes, "
            f"{profile.workspace_write_files} entries)",
            details={"exceeded": meter_report.exceeded},
        )
    elif side_effects is None or not side_effects.complete:
        why = side_effects.incompleteness() if side_effects is not None else side_effects_error
        error = SideEffectsIncomplete(why or "the workspace side-effect record is incomplete")
    elif pids_hits:
        limit = (
            f"the limit of {profile.pids_limit}"
            if backend.capabilities.own_pids_limit
            else "the node's limit (a pod's pids limit is the node's podPidsLimit, not the profile's)"
        )
        error = SandboxPidsLimit(f"{pids_hits} process creation(s) refused at {limit}")
    elif (
        backend.capabilities.own_pids_limit
        and usage is not None
        and usage.pids_peak is not None
        and usage.pids_peak >= profile.pids_limit
    ):
        # the refusals are counted only in the container's cgroup, which the runtime removes within ms of
        # its exit: a short run may end uncounted, but a peak at the limit is itself the kernel's word
        error = SandboxPidsLimit(
            f"the sandbox reached its limit of {profile.pids_limit} processes (a process creation beyond it is refused)"
        )
    stdout = keep_output(captures[0], profile.stdout_max_bytes, redactor) if captures else None
    stderr = keep_output(captures[1], profile.stderr_max_bytes, redactor) if captures else None
    confirm = None
    if reported and handle is not None and state is not None:
        confirm = functools.partial(_confirm_end, backend, handle, state, record=record, seen=seen, follower=follower)
    return RunOutcome(
        confirm=confirm,
        exit_code=state.exit_code if state and state.exit_code is not None else exit_code,
        stdout=stdout.data if stdout else b"",
        stderr=stderr.data if stderr else b"",
        stdout_kept=stdout,
        stderr_kept=stderr,
        timed_out=timed_out,
        oom_killed=oom,
        duration_ms=duration_ms,
        state=state,
        side_effects=side_effects,
        side_effects_error=side_effects_error,
        write_budget=meter_report,
        usage=usage,
        lifecycle=lifecycle,
        error=error,
        pids_limit_killed=pids_killed,
    )


async def workspace_changes(
    before: Snapshot, workspace: Path, redactor: Redactor, profile: ResolvedProfile
) -> tuple[SideEffects | None, str | None]:
    """The workspace's changes since ``before`` (set-id bits the run left removed, names redacted); or
    None and why, when it cannot be read now (the run's outcome is recorded all the same)."""
    try:
        effects = await asyncio.to_thread(collect, before, workspace, redactor=redactor, limits=collect_limits(profile))
        return effects, None
    except (OSError, OrchestratorError) as exc:
        why = exc.message if isinstance(exc, OrchestratorError) else (exc.strerror or str(exc))
        log.warning("workspace side effects unknown: %s: %s", type(exc).__name__, why)
        return None, f"{type(exc).__name__}: {why}"


async def _stop_meter(meter: WorkspaceMeter | None, started: asyncio.Future[None]) -> MeterReport | None:
    """Stops a meter whose start may still be running or may have failed (then there is nothing to stop)."""
    try:
        await started
    except Exception as err:
        log.warning("the workspace meter did not start: %s", err)
        return None
    assert meter is not None
    return await asyncio.to_thread(meter.stop)


async def _stop_following(follower: asyncio.Task[None]) -> None:
    if not follower.done():
        follower.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await follower


async def _unless_cancelled(
    step: Awaitable[T],
    *,
    reported: bool,
    backend: SandboxBackend,
    handle: SandboxHandle | None,
    seen: dict[str, asyncio.Event],
    follower: asyncio.Task[None],
) -> T:
    """``step`` of a run whose teardown may wait for a confirmation (``reported``): cancelled (or failed)
    before there is an outcome, there will be no confirmation either, so the sandbox is removed and its
    lifecycle's follower stopped now."""
    try:
        return await step
    except BaseException:
        if reported and handle is not None:
            await asyncio.shield(_teardown(backend, handle, seen))
            await _stop_following(follower)
        raise


#: the end record's ``lifecycle_stream`` when the sandbox's init reported the end
CONFIRMATION_FOLLOWS = "reported by the sandbox's init: the engine's end and the removal follow this record"


async def _confirm_end(
    backend: SandboxBackend,
    handle: SandboxHandle,
    reported: ExitState,
    *,
    record: Record,
    seen: dict[str, asyncio.Event],
    follower: asyncio.Task[None],
) -> None:
    """After the end record of a run whose init reported its end: the engine's own account (its lifecycle
    records follow as it gives them), compared with the report -- a disagreement, or no account in time, is
    an ``end_unconfirmed`` record (status failed) -- then the sandbox's removal, as any run's teardown."""
    try:
        engine = await backend.confirm_end(handle)
        problem = end_disagreement(reported, engine)
        if problem is not None:
            log.warning("sandbox %s: %s", handle.name, problem)
            await record(
                EventType.END_UNCONFIRMED,
                durable=True,
                status="failed",
                reason=problem,
                data={
                    "sandbox_id": handle.sandbox_id,
                    "reported": {"exit_code": reported.exit_code, "oom_killed": reported.oom_killed},
                    "engine": None
                    if engine is None
                    else {"exit_code": engine.exit_code, "oom_killed": engine.oom_killed},
                },
            )
    finally:
        await asyncio.shield(_teardown(backend, handle, seen))
        await _stop_following(follower)


def end_disagreement(reported: ExitState, engine: ExitState | None) -> str | None:
    """Why the engine's account does not confirm the init's report (None: it does)."""
    if engine is None:
        return "the engine did not report the end its init reported in time"
    if engine.exit_code != reported.exit_code:
        return f"the init reported exit {reported.exit_code}, the engine exit {engine.exit_code}"
    if engine.oom_killed != reported.oom_killed:
        said = "an OOM kill" if reported.oom_killed else "no OOM kill"
        return f"the init reported {said}, the engine {'one' if engine.oom_killed else 'none'}"
    return None


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
