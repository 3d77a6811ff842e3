"""Interactive sessions: ``exec_command`` opens one long-lived, hardened sandbox; ``write_stdin`` feeds it.

A session is an execution like any other (the same gate, approval, begin and end records, lifecycle and
workspace side effects: :meth:`Orchestrator.run` with ``session=True``) whose stdin stays open. Its output
is redacted like one-shot output and waits in a bounded buffer until a call takes it. Each call answers
with what the command produced within its ``yield_time_ms`` (sooner once the output has settled, the
answer is full, or the command ended); what did not fit waits for the next call.

A session ends when its command exits, on ``close``, after ``sessions.idle_timeout_s`` without input or
output, at ``sessions.max_lifetime_s`` (its sandbox's deadline) or when the orchestrator closes; its
sandbox is then removed by the execution's own teardown. Evidence beside the execution's records:
``session_opened``, ``session_input`` and ``session_output`` (sizes and sha256, never content),
``session_closed`` with the reason and the exit code.

Governance: write_stdin is gated (the gate sees its size and digest) and needs no new approval when it is
the session owner's (``SessionApprovals.approve_exec_session``); what is typed into an approved shell is not
gated, the known limit of sessions (profiles can forbid interactive shells: ``check_session_allowed``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import hmac
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from orchestrator.backends.base import OutputStream, SandboxBackend, SandboxHandle
from orchestrator.domain.errors import (
    InputInvalid,
    OrchestratorError,
    SandboxTimeout,
    SandboxUnavailable,
    SessionLimit,
    SessionNotFound,
)
from orchestrator.domain.ids import new_execution_id
from orchestrator.domain.requests import ExecCommandRequest, WriteStdinRequest, parse_request
from orchestrator.domain.wire import ErrorBody, SessionAnswer
from orchestrator.evidence import EventType
from orchestrator.pipeline.orchestrator import Authorization, ExecutionResult, Observer, Orchestrator
from orchestrator.profiles import ResolvedProfile

log = logging.getLogger(__name__)

CloseReason = Literal["exit", "idle", "lifetime", "closed", "cancelled", "failed"]

#: output a session holds for its caller at most; past it the oldest is dropped (and counted)
BUFFER_MAX_BYTES = 4 * 1024 * 1024
#: an answer goes once the output has been quiet this long (a prompt printed, an echo back)
SETTLE_S = 0.03
#: open sessions per tenant, unless the Sessions is told otherwise
DEFAULT_MAX_PER_TENANT = 8
#: how long close() waits for the execution's end (its end record) after stopping the sandbox
CLOSE_WAIT_S = 60.0
#: how long an ended session's untaken output is kept for its caller
FORGET_AFTER_S = 60.0


class SessionHooks(Protocol):
    """Who else keeps track of a session's execution (the service's execution manager: its view, its
    store row, the events page, recovery after a restart)."""

    def session_opening(self, execution_id: str, request: ExecCommandRequest) -> Observer: ...

    def session_ended(
        self, execution_id: str, result: ExecutionResult | None, error: OrchestratorError | None, started: bool
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class SessionReply:
    """One answer: the output since the last one (redacted), and whether the session still runs."""

    session_id: str
    stdout: bytes
    stderr: bytes
    running: bool
    exit_code: int | None = None
    closed_reason: CloseReason | None = None
    pending_bytes: int = 0  # output already produced that did not fit this answer
    dropped_bytes: int = 0  # output lost because nobody took it before the buffer filled
    error: OrchestratorError | None = None
    # streams that passed the profile's output cap: nothing more of them is shown (sticky once set)
    output_capped: tuple[OutputStream, ...] = ()

    def to_wire(self) -> SessionAnswer:
        return SessionAnswer(
            session_id=self.session_id,
            stdout=self.stdout.decode("utf-8", "replace"),
            stderr=self.stderr.decode("utf-8", "replace"),
            running=self.running,
            exit_code=self.exit_code,
            closed_reason=self.closed_reason,
            pending_bytes=self.pending_bytes,
            dropped_bytes=self.dropped_bytes,
            error=None if self.error is None else ErrorBody.of(self.error),
            output_capped=list(self.output_capped),
        )


@dataclass(eq=False)
class _Session:
    auth: Authorization
    tty: bool
    observer: Observer | None = None
    idle_timeout_s: float = 0.0
    lifetime_ends: float = float("inf")  # (monotonic) when its sandbox's deadline stops it
    chunks: collections.deque[tuple[OutputStream, bytes]] = field(default_factory=collections.deque)
    buffered: int = 0
    dropped: int = 0
    capped: list[OutputStream] = field(default_factory=list)
    last_active: float = field(default_factory=time.monotonic)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    handle: SandboxHandle | None = None
    task: asyncio.Task[ExecutionResult] | None = None
    idle_task: asyncio.Task[None] | None = None
    stop_reason: CloseReason | None = None
    reason: CloseReason | None = None
    recording: bool = False
    recorded: asyncio.Event = field(default_factory=asyncio.Event)  # its end is on the record
    exit_code: int | None = None
    error: OrchestratorError | None = None
    writing: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def id(self) -> str:
        return self.auth.execution_id

    @property
    def ended(self) -> bool:
        return self.task is not None and self.task.done()

    def feed(self, stream: OutputStream, data: bytes) -> None:
        """The execution's live output (redacted), on the loop."""
        self.chunks.append(("stdout" if self.tty else stream, data))
        self.buffered += len(data)
        while self.buffered > BUFFER_MAX_BYTES and self.chunks:
            _, oldest = self.chunks.popleft()
            self.buffered -= len(oldest)
            self.dropped += len(oldest)
        self.last_active = time.monotonic()
        self.changed.set()

    def cap_reached(self, stream: OutputStream) -> None:
        """The execution's live output says ``stream`` passed its cap (with a terminal: stdout)."""
        shown: OutputStream = "stdout" if self.tty else stream
        if shown not in self.capped:
            self.capped.append(shown)
            self.changed.set()

    def take(self, limit: int) -> tuple[bytes, bytes]:
        out = {"stdout": bytearray(), "stderr": bytearray()}
        room = limit
        while self.chunks and room > 0:
            stream, data = self.chunks.popleft()
            if len(data) > room:
                cut = _character_boundary(data, room)
                if cut == 0 and room < limit:  # not even one more character fits: the next answer has it
                    self.chunks.appendleft((stream, data))
                    break
                cut = cut or room  # a limit below one character: cut it (never an empty answer)
                self.chunks.appendleft((stream, data[cut:]))
                data = data[:cut]
            out[stream] += data
            room -= len(data)
            self.buffered -= len(data)
        return bytes(out["stdout"]), bytes(out["stderr"])


def _character_boundary(data: bytes, at: int) -> int:
    """The last offset at or before ``at`` that does not split a UTF-8 character (0 if none)."""
    cut = at
    while cut > 0 and cut > at - 4 and (data[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut if (data[cut] & 0xC0) != 0x80 else at


class Sessions:
    """The open sessions of one orchestrator (the library's, or the service's)."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        *,
        max_per_tenant: int = DEFAULT_MAX_PER_TENANT,
        hooks: SessionHooks | None = None,
    ) -> None:
        self.orchestrator = orchestrator
        self.max_per_tenant = max_per_tenant
        self.hooks = hooks
        self._sessions: dict[str, _Session] = {}
        self._opening: dict[str, int] = {}  # tenant -> opens being decided

    # -- the calls -------------------------------------------------------------------------------------
    async def open(self, raw: Any, *, workspace: Path) -> SessionReply:
        """Decide ``raw`` (an exec_command request), start its sandbox, answer with the first output."""
        request = parse_request(raw) if not isinstance(raw, ExecCommandRequest) else raw
        if not isinstance(request, ExecCommandRequest):
            raise InputInvalid("a session opens with an exec_command request", details={"field": "tool"})
        tenant = request.tenant
        # sessions that ended but still hold output count too; a slot is taken before the first await, so
        # opens racing each other cannot pass the limit together
        mine = sum(1 for s in self._sessions.values() if s.auth.request.tenant == tenant) + self._opening.get(tenant, 0)
        if mine >= self.max_per_tenant:
            raise SessionLimit(
                f"tenant {tenant!r} has {mine} open sessions, its limit: close one first",
                details={"limit": self.max_per_tenant},
            )
        self._opening[tenant] = self._opening.get(tenant, 0) + 1
        try:
            session = await self._authorize(request)
            self._sessions[session.id] = session
        finally:
            self._opening[tenant] -= 1
        session.task = asyncio.create_task(self._run(session, workspace), name=f"session-{session.id}")
        started = asyncio.ensure_future(session.started.wait())
        try:
            await asyncio.wait({started, session.task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the caller went away while it started: it ends here, on the record
            started.cancel()
            await asyncio.shield(self._stop(session, "cancelled"))
            raise
        started.cancel()
        if not session.started.is_set():
            self._forget(session)
            result = await _result(session)  # refused before its sandbox ran: raise why
            if session.error is not None:
                raise session.error
            raise SandboxUnavailable(f"session {session.id} ended before it started ({result})")
        session.idle_task = asyncio.create_task(self._watch_idle(session), name=f"session-idle-{session.id}")
        return await self._answer(session, request.yield_time_ms, request.max_output_bytes)

    async def _authorize(self, request: ExecCommandRequest) -> _Session:
        execution_id = new_execution_id()
        observer = None if self.hooks is None else self.hooks.session_opening(execution_id, request)
        try:
            auth = await self.orchestrator.authorize(request, execution_id=execution_id, observer=observer)
        except (OrchestratorError, asyncio.CancelledError) as err:
            if self.hooks is not None:
                refusal = err if isinstance(err, OrchestratorError) else None
                self.hooks.session_ended(execution_id, None, refusal, False)
            raise
        return _Session(auth=auth, tty=request.tty, observer=observer)

    async def write(self, raw: Any) -> SessionReply:
        """Decide ``raw`` (a write_stdin request), send its characters, answer with the output meanwhile."""
        request = parse_request(raw) if not isinstance(raw, WriteStdinRequest) else raw
        if not isinstance(request, WriteStdinRequest):
            raise InputInvalid("input goes to a session with a write_stdin request", details={"field": "tool"})
        session = self._owned(request.session_id, request.tenant, request.subject)
        data = request.chars.encode("utf-8")
        if data:  # an empty write only polls: nothing to decide
            # gated and recorded (as size and digest); the session's owner is not asked again. The records are
            # queued before the input is sent, in order, and flushed with the writer's group commit, not
            # awaited (an fsync per keystroke would be most of a round trip); the session's end is durable
            await self.orchestrator.authorize(request, durable=False)
            async with session.writing:
                running = self._running(session)
                if running is None:
                    raise SessionNotFound(f"session {session.id} has ended", details={"session_id": session.id})
                backend, handle = running
                await backend.send_input(handle, data)
                session.last_active = time.monotonic()
            await self._note(
                session, EventType.SESSION_INPUT, data={"bytes": len(data), "hmac_sha256": self._digest(data)}
            )
        return await self._answer(session, request.yield_time_ms, request.max_output_bytes)

    async def end_input(self, session_id: str, *, tenant: str, subject: str) -> None:
        """Close the command's stdin (it reads EOF), after what was sent; recorded."""
        session = self._owned(session_id, tenant, subject)
        running = self._running(session)
        if running is None:
            return
        backend, handle = running
        async with session.writing:
            await backend.end_input(handle)
        await self._note(session, EventType.SESSION_INPUT, data={"bytes": 0, "end": True})

    async def poll(
        self, session_id: str, *, tenant: str, subject: str, yield_ms: int, max_bytes: int = BUFFER_MAX_BYTES
    ) -> SessionReply:
        """The output produced within ``yield_ms`` (an empty write_stdin)."""
        return await self._answer(self._owned(session_id, tenant, subject), yield_ms, max_bytes)

    def owner(self, session_id: str) -> tuple[str, str] | None:
        """(tenant, subject) of an open session, for a caller that checks its own permissions."""
        session = self._sessions.get(session_id)
        return None if session is None else _owner(session)

    async def resize(self, session_id: str, *, tenant: str, subject: str, rows: int, cols: int) -> None:
        if not (0 < rows <= 10_000 and 0 < cols <= 10_000):
            raise InputInvalid("rows and cols must be between 1 and 10000", details={"field": "size"})
        session = self._owned(session_id, tenant, subject)
        if not session.tty:
            raise InputInvalid("the session has no terminal (open it with tty: true)", details={"field": "tty"})
        running = self._running(session)
        if running is None:
            raise SessionNotFound(f"session {session_id} has ended", details={"session_id": session_id})
        backend, handle = running
        await backend.resize(handle, rows, cols)

    async def close(self, session_id: str, *, tenant: str, subject: str) -> SessionReply:
        """Stop the session (if it still runs) and answer with its last output and how it ended."""
        session = self._owned(session_id, tenant, subject)
        await self._stop(session, "closed")
        reply = await self._reply_noted(session, BUFFER_MAX_BYTES)
        self._forget(session)
        return reply

    async def aclose(self) -> None:
        """The owner goes away: every session is stopped (cancelled) and its end recorded."""
        await asyncio.gather(*(self._stop(s, "cancelled") for s in list(self._sessions.values())))

    def list(self, *, tenant: str, subject: str) -> list[str]:
        return [s.id for s in self._sessions.values() if _owner(s) == (tenant, subject) and not s.ended]

    # -- inside ---------------------------------------------------------------------------------------
    def _running(self, session: _Session) -> tuple[SandboxBackend, SandboxHandle] | None:
        """The session's sandbox and its backend while it runs (None before it started, or once it ended)."""
        backend = self.orchestrator.backend
        if session.ended or session.handle is None or backend is None:
            return None
        return backend, session.handle

    def _owned(self, session_id: str, tenant: str, subject: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None or _owner(session) != (tenant, subject):
            raise SessionNotFound(f"no session {session_id}", details={"session_id": session_id})
        return session

    async def _run(self, session: _Session, workspace: Path) -> ExecutionResult:
        def started(handle: SandboxHandle, profile: ResolvedProfile) -> None:
            session.handle = handle
            session.last_active = time.monotonic()
            session.idle_timeout_s = profile.session_idle_timeout_s
            session.lifetime_ends = session.last_active + profile.session_lifetime_s
            session.started.set()
            self.orchestrator.background.spawn(
                self._note(session, EventType.SESSION_OPENED, data={"tty": session.tty, "sandbox": handle.name}),
                name=f"session-opened-{session.id}",
            )

        result: ExecutionResult | None = None
        try:
            result = await self.orchestrator.run(
                session.auth,
                workspace=workspace,
                observer=session.observer,
                on_output=session.feed,
                session=True,
                on_started=started,
                on_capped=session.cap_reached,
                stopped_by=lambda: session.stop_reason,
            )
        except OrchestratorError as err:
            session.error = err
            raise
        finally:
            if session.idle_task is not None:
                session.idle_task.cancel()
            if result is not None:
                session.exit_code = result.outcome.exit_code
                session.error = result.error
            session.reason = session.stop_reason or _end_reason(result, session.error)
            session.changed.set()
            if self.hooks is not None:
                self.hooks.session_ended(session.id, result, session.error, session.started.is_set())
            # on the record at once; forgotten once its output was taken, or after FORGET_AFTER_S
            self.orchestrator.background.spawn(self._ended(session), name=f"session-end-{session.id}")
        return result

    async def _watch_idle(self, session: _Session) -> None:
        while not session.ended:
            now = time.monotonic()
            if now >= session.lifetime_ends:
                # its deadline is stopping it (a pod's end can take the kubelet seconds to report): it ends
                # by its lifetime, never "idle" because the stop took longer than the idle timeout
                return
            left = session.last_active + session.idle_timeout_s - now
            if left <= 0:
                self.orchestrator.background.spawn(self._stop(session, "idle"), name=f"session-idle-stop-{session.id}")
                return
            await asyncio.sleep(min(left, session.lifetime_ends - now))

    async def _stop(self, session: _Session, reason: CloseReason) -> None:
        """Stop the session's sandbox (if it runs), wait for its execution's end, record it."""
        if not session.ended and session.stop_reason is None:
            session.stop_reason = reason
            backend = self.orchestrator.backend
            if session.handle is not None and backend is not None:
                with contextlib.suppress(OrchestratorError):
                    await backend.kill(session.handle)
            elif session.task is not None:
                session.task.cancel(f"session {reason}")
        if session.task is not None and not session.ended:
            try:
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await _result(session)
            except TimeoutError:  # the kill did not end it: cancel the execution (its teardown removes it)
                session.task.cancel(f"session {reason}: the sandbox did not stop")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(CLOSE_WAIT_S):
                        await _result(session)
        if session.ended:
            await self._record_end(session)

    async def _ended(self, session: _Session) -> None:
        """When its execution ended: its end on the record, then the session forgotten as soon as its
        output was taken, at the latest FORGET_AFTER_S later."""
        await self._record_end(session)
        if session.chunks:
            await asyncio.sleep(FORGET_AFTER_S)
        self._forget(session)

    async def _record_end(self, session: _Session) -> None:
        """Once per session (later callers wait for it): ``session_closed`` (durable), its grant gone. A
        session refused before its sandbox ran has no such record: its run_failed says why."""
        if session.recorded.is_set() or session.recording:
            await session.recorded.wait()
            return
        session.recording = True
        try:
            self.orchestrator.session_approvals.end_exec_session(session.id)
            if session.started.is_set():
                await self._note(
                    session,
                    EventType.SESSION_CLOSED,
                    durable=True,
                    data={"reason": session.reason or "failed", "exit_code": session.exit_code},
                )
        finally:
            session.recorded.set()

    def _forget(self, session: _Session) -> None:
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]

    async def _answer(self, session: _Session, yield_ms: int, limit: int) -> SessionReply:
        deadline = time.monotonic() + yield_ms / 1000
        while not session.ended and session.buffered < limit:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            session.changed.clear()
            wait = left if not session.chunks else min(left, SETTLE_S)
            try:
                async with asyncio.timeout(wait):
                    await session.changed.wait()
            except TimeoutError:
                if session.chunks:
                    break  # output came and then settled: answer now
        if session.ended:
            await _result(session)
            await self._record_end(session)  # an answer that says it ended comes after its record
        reply = await self._reply_noted(session, limit)
        if session.ended and not session.chunks:
            self._forget(session)  # its output taken: nothing more to answer (its end is on the record)
        return reply

    async def _reply_noted(self, session: _Session, limit: int) -> SessionReply:
        """The next answer, and its output on the record (sizes and keyed digests)."""
        reply = self._reply(session, limit)
        if reply.stdout or reply.stderr:
            await self._note(
                session,
                EventType.SESSION_OUTPUT,
                data={
                    "stdout_bytes": len(reply.stdout),
                    "stdout_hmac_sha256": self._digest(reply.stdout),
                    "stderr_bytes": len(reply.stderr),
                    "stderr_hmac_sha256": self._digest(reply.stderr),
                },
            )
        return reply

    def _reply(self, session: _Session, limit: int) -> SessionReply:
        stdout, stderr = session.take(limit)
        return SessionReply(
            session_id=session.id,
            stdout=stdout,
            stderr=stderr,
            running=not session.ended,
            exit_code=session.exit_code,
            closed_reason=session.reason if session.ended else None,
            pending_bytes=session.buffered,
            dropped_bytes=session.dropped,
            error=session.error if session.ended else None,
            output_capped=tuple(session.capped),
        )

    def _digest(self, data: bytes) -> str:
        """HMAC-SHA256 under the evidence's input key (evidence.input_key): a terminal's echo or a short
        input is as guessable as what was typed."""
        key = self.orchestrator.gate.input_key
        assert key is not None
        return hmac.new(key(), data, hashlib.sha256).hexdigest()

    async def _note(self, session: _Session, event: EventType, *, durable: bool = False, data: dict[str, Any]) -> None:
        try:
            await self.orchestrator.record_event(event, session.auth, durable=durable, data=data)
        except Exception as exc:  # evidence trouble is the writer's to report; never a session's crash
            log.warning("could not record %s of session %s: %s", event, session.id, type(exc).__name__)


def _end_reason(result: ExecutionResult | None, error: OrchestratorError | None) -> CloseReason:
    if result is None:
        return "failed" if error is not None else "cancelled"
    return "lifetime" if isinstance(result.error, SandboxTimeout) else "exit"


async def _result(session: _Session) -> str:
    """Wait for the execution's end; a summary for messages (its error is kept on the session)."""
    assert session.task is not None
    try:
        await asyncio.shield(session.task)
    except (OrchestratorError, asyncio.CancelledError) as exc:
        return type(exc).__name__
    return "ended"


def _owner(session: _Session) -> tuple[str, str]:
    return session.auth.request.tenant, session.auth.request.subject
