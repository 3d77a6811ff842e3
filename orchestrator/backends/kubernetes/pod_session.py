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
from datetime import UTC, datetime

from orchestrator.backends._support.input_feed import InputFeed
from orchestrator.backends._support.threads import in_daemon_thread
from orchestrator.backends.kubernetes.channels import STDERR, STDOUT, ChannelError, Channels
from orchestrator.backends.kubernetes.kube import KubeClient, KubeError, exit_code
from orchestrator.backends.kubernetes.manifest import CONTAINER
from orchestrator.backends.kubernetes.sinks import Deliver, Sinks, SinksClosed
from orchestrator.backends.kubernetes.start_barrier import session_command, session_marker
from orchestrator.domain.errors import SandboxUnavailable

log = logging.getLogger(__name__)


class PodSession:
    """``open()`` starts the command; then ``deliver_to`` (sinks), ``feed`` (input), ``resize``,
    ``until_done()`` / ``exit_code``, ``close()``."""

    def __init__(self, kube: KubeClient, namespace: str, name: str, command: list[str], *, tty: bool) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self._command = command
        self.tty = tty
        self._sinks = Sinks()
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

        def keep() -> None:
            self._channels = channels
            self.feed = InputFeed(self._name, channels.write_stdin, self._end_input)

        if not self._sinks.if_open(keep):  # closed while it opened (a cancelled start): nothing keeps it open
            channels.close()
            raise SandboxUnavailable(f"the session of {self._name} was closed while it started")

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
        self._sinks.attach(stdout, stderr)

    def _read(self) -> None:
        assert self._channels is not None
        try:
            self._channels.pump(
                lambda data: self._sinks.deliver("stdout", data), lambda data: self._sinks.deliver("stderr", data)
            )
        except SinksClosed:
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
        self._sinks.close()
        if self.feed is not None:
            self.feed.abandon()
        if self._channels is not None:
            self._channels.close()


__all__ = ["PodSession"]
