"""A session's command in its pod: one exec stream (see ``start_barrier``), its stdio and its exit code.

The stream is opened once the command container runs (``open`` proves it by the session's marker; the
backend retries while the container cannot take an exec yet). Its output goes to the sinks ``capture()``
brings, frame by frame on a daemon thread (waiting for them stalls the stream: back-pressure, never an
unbounded buffer); its input comes through an ``InputFeed`` (a command that does not read never blocks
the caller); ``exit_code`` is what the kubelet reported at the stream's end (None: it broke, or the pod
was stopped under it).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from orchestrator.backends._support.input_feed import InputFeed
from orchestrator.backends._support.threads import in_daemon_thread
from orchestrator.backends.kubernetes.channels import STDERR, STDOUT, ChannelError, Channels
from orchestrator.backends.kubernetes.kube import KubeClient, KubeError, exit_code
from orchestrator.backends.kubernetes.manifest import CONTAINER
from orchestrator.backends.kubernetes.start_barrier import session_command, session_marker
from orchestrator.domain.errors import SandboxUnavailable

log = logging.getLogger(__name__)

Deliver = Callable[[bytes], None]


class _Closed(Exception):
    """The session was closed while its output waited for the sinks."""


class PodSession:
    """``open()`` starts the command; then ``deliver_to`` (sinks), ``feed`` (input), ``resize``,
    ``until_done()`` / ``exit_code``, ``close()``."""

    def __init__(self, kube: KubeClient, namespace: str, name: str, command: list[str], *, tty: bool) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self._command = command
        self.tty = tty
        self._ready = threading.Condition()
        self._sinks: tuple[Deliver, Deliver] | None = None
        self._closed = False
        self._channels: Channels | None = None
        self.feed: InputFeed | None = None
        self._reader: asyncio.Future[None] | None = None
        self.exit_code: int | None = None
        self.ended_at: datetime | None = None  # when the stream ended (with or without an exit code)

    def open(self, timeout_s: float) -> None:
        """Blocking: exec the command, until its marker, at most ``timeout_s`` (raises ``KubeError`` if it
        surely did not start: call again to retry; ``SandboxUnavailable`` if it may have: never again).
        Its input is accepted from then on."""
        channels = self._kube.open_exec(
            self._namespace, self._name, CONTAINER, session_command(self._command), stdin=True, tty=self.tty
        )
        try:
            channels.await_marker(session_marker(self.tty), STDOUT if self.tty else STDERR, timeout_s)
        except ChannelError as exc:
            channels.close()
            if exc.started:  # never opened again: that would run it twice
                raise SandboxUnavailable(f"the stdio of {self._name} could not be read: {exc}") from exc
            raise KubeError("unreachable" if exc.status is None else "server", "exec", str(exc)) from exc
        with self._ready:
            if self._closed:  # closed while it opened (a cancelled start): nothing may keep it open
                channels.close()
                raise SandboxUnavailable(f"the session of {self._name} was closed while it started")
            self._channels = channels
            self.feed = InputFeed(self._name, channels.write_stdin, self._end_input)

    def start_reading(self) -> None:
        """Read the stream from now on (on the event loop: its end is awaited by ``until_done``)."""
        if self._channels is not None and self._reader is None:
            self._reader = asyncio.ensure_future(in_daemon_thread(self._read, f"session-{self._name}"))

    @property
    def reader(self) -> asyncio.Future[None] | None:
        """Done once the stream ended and its output was delivered."""
        return self._reader

    def _end_input(self) -> None:
        assert self._channels is not None
        self._channels.close_stdin()

    @property
    def can_end_input(self) -> bool:
        return self._channels is not None and self._channels.can_close_stdin

    def resize(self, rows: int, cols: int) -> None:
        if self._channels is None:
            raise ChannelError("the session's stream is not open")
        self._channels.resize(rows, cols)

    def deliver_to(self, stdout: Deliver, stderr: Deliver) -> None:
        with self._ready:
            self._sinks = (stdout, stderr)
            self._ready.notify_all()

    def _deliver(self, index: int, data: bytes) -> None:
        with self._ready:
            while self._sinks is None and not self._closed:
                self._ready.wait()
            if self._closed or self._sinks is None:
                raise _Closed
            sink = self._sinks[index]
        sink(data)

    def _read(self) -> None:
        assert self._channels is not None
        try:
            self._channels.pump(lambda data: self._deliver(0, data), lambda data: self._deliver(1, data))
        except _Closed:
            return
        finally:
            self.exit_code = exit_code(self._channels.status)
            self.ended_at = datetime.now(UTC)
            if self.feed is not None:
                self.feed.abandon()
            self._channels.close()
        if self.exit_code is None and self._channels.status is not None:
            log.info("the session in %s ended without an exit code: %s", self._name, self._channels.status)

    async def until_done(self) -> None:
        """Until the stream ended (the command exited and its output was read); a broken one raises
        ``ChannelError``."""
        if self._reader is not None:
            await self._reader

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()
        if self.feed is not None:
            self.feed.abandon()
        if self._channels is not None:
            self._channels.close()


__all__ = ["PodSession"]
