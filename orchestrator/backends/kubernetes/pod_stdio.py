"""One pod's stdio, relayed by exec from its sidecar (see ``start_barrier``): the command's stdout and
stderr into the sinks ``capture()`` brings, its stdin from the spec.

Each output stream has a daemon thread that reads its exec websocket frame by frame. Output waits for the
sinks (the thread, and so the command's writes, stall meanwhile: back-pressure, never an unbounded
buffer); every byte the command writes is counted, however much.
"""

from __future__ import annotations

import asyncio
import functools
import io
import logging
import threading
from collections.abc import Callable

from orchestrator.backends._support.init_status import MAX_LINE
from orchestrator.backends._support.input_feed import InputFeed
from orchestrator.backends._support.threads import in_daemon_thread
from orchestrator.backends.kubernetes.channels import ChannelError, Channels
from orchestrator.backends.kubernetes.kube import KubeClient, KubeError, exit_code
from orchestrator.backends.kubernetes.sinks import Deliver, Sinks, SinksClosed
from orchestrator.backends.kubernetes.start_barrier import (
    LAUNCHED_MARKER,
    PIPES,
    READY_MARKER,
    SIDECAR,
    STATUS,
    launch_header,
    launch_writer_command,
    reader_command,
    writer_command,
)
from orchestrator.domain.errors import SandboxUnavailable, SideEffectsIncomplete

log = logging.getLogger(__name__)

#: what is kept of a relay's own stderr (its diagnostics, never the command's output)
RELAY_STDERR_MAX = 4096


class PodStdio:
    """Open with :meth:`open` (the relays connected: from then on the command can start). ``with_status``:
    a pre-started pod's, whose init reports the command's end on a pipe of its own (:meth:`status`)."""

    def __init__(self, kube: KubeClient, namespace: str, name: str, *, with_status: bool = False) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self._sinks = Sinks()
        self._streams = (*PIPES, STATUS) if with_status else PIPES
        self._channels: dict[str, Channels] = {}
        self._launcher: Channels | None = None  # a pre-started pod's launch writer, until launch()
        self._launched: Channels | None = None
        self.readers: list[asyncio.Future[None]] = []
        # what the status pipe carried, once it ended (at most MAX_LINE + 1 bytes: more is no report)
        self._status: asyncio.Future[bytes] | None = None
        self.feed: InputFeed | None = None  # a session's input (launched with ``session``), to the launch writer

    async def open(self, stdin: bytes | None, timeout_s: float) -> None:
        """Connect the relays not connected yet (raises the first ``KubeError`` after keeping those that
        did connect: a relay that runs holds its pipe, and a second one on the same pipe would split the
        output; call again to retry the others). Once all are, each output's reader starts, and stdin is
        fed on a thread of its own (the command reads it only as fast as it is read)."""
        missing = [stream for stream in self._streams if stream not in self._channels]
        if not self._channels:
            # one until the container runs: an exec the kubelet refuses (no container yet) leaks a descriptor
            # in the API server (kubernetes/kubernetes#135245), and the others would fail the same way
            missing = missing[:1]
        opened = await asyncio.gather(
            *(asyncio.to_thread(self._open_reader, stream, timeout_s) for stream in missing), return_exceptions=True
        )
        for stream, result in zip(missing, opened, strict=True):
            if not isinstance(result, BaseException):
                self._channels[stream] = result
        for result in opened:
            if isinstance(result, BaseException):
                raise result
        if len(self._channels) < len(self._streams):  # the first one connected: the others now
            await self.open(stdin, timeout_s)
            return
        if self.readers:  # connected by an earlier call (a pooled pod's launcher is retried after it)
            return
        for stream, channels in self._channels.items():
            if stream == STATUS:
                status = functools.partial(self._read_status, channels)
                self._status = asyncio.ensure_future(in_daemon_thread(status, f"status-{self._name}"))
                continue
            read = functools.partial(self._read, stream, channels)
            self.readers.append(asyncio.ensure_future(in_daemon_thread(read, f"{stream}-{self._name}")))
        if stdin is not None:
            threading.Thread(target=self._feed, args=(stdin,), name=f"stdin-{self._name}", daemon=True).start()

    def _open_reader(self, stream: str, timeout_s: float) -> Channels:
        channels = self._kube.open_exec(self._namespace, self._name, SIDECAR, reader_command(stream))
        try:
            channels.await_marker(READY_MARKER, timeout_s=timeout_s)  # the exec's command runs: its pipe is held
        except ChannelError as exc:
            channels.close()
            if exc.started:  # never opened again: that would run it twice
                raise SandboxUnavailable(f"the stdio of {self._name} could not be read: {exc}") from exc
            raise KubeError("unreachable" if exc.status is None else "server", "exec", str(exc)) from exc
        return channels

    def open_launcher(self, timeout_s: float) -> None:
        """A pre-started pod, as it is filled: the launch writer exec'd in the sidecar, holding the init's
        stdin pipe (``start_barrier.launch_writer_command``). Blocking; ``KubeError`` when it could not
        start yet (try again), ``SandboxUnavailable`` when it started and failed."""
        if self._launcher is not None:
            return
        channels = self._kube.open_exec(self._namespace, self._name, SIDECAR, launch_writer_command(), stdin=True)
        try:
            channels.await_marker(READY_MARKER, timeout_s=timeout_s)  # it holds the pipe; so does the init
        except ChannelError as exc:
            channels.close()
            if exc.started:
                raise SandboxUnavailable(f"the launch channel of {self._name} failed: {exc}") from exc
            raise KubeError("unreachable" if exc.status is None else "server", "exec", str(exc)) from exc
        self._launcher = channels

    def launch(self, message: bytes, stdin: bytes | None, timeout_s: float, *, session: bool = False) -> None:
        """The launch message, then the command's stdin, through the writer connected at fill, once.
        Blocking: returns once the writer put the whole message into the init's pipe, which it can only
        while the pod's side holds it (the writer said so: LAUNCHED_MARKER); the stdin goes on at the
        command's pace, on a thread of its own. ``session``: no stdin yet; what ``feed`` is sent from then on
        goes down the same stream, until ``feed.end()`` closes its stdin (the command reads EOF).
        ``SandboxUnavailable`` when the writer ended without saying so (no init took a whole message: the
        command never ran); ``SideEffectsIncomplete`` (not retryable) when the stream broke or went silent
        first (the command may have run).
        One thread at a time uses the stream: a TLS socket read and written at once by two threads lost
        the connection (seen once in ~12 launches). So a session's stream, once launched, is only written
        (its writer says nothing more; it ends with the pod)."""
        channels, self._launcher = self._launcher, None
        if channels is None:
            raise SandboxUnavailable(f"{self._name} has no launch channel (launched already, or never filled)")
        self._launched = channels  # closed with the relays
        try:
            channels.write_stdin(launch_header(len(message), None if session else len(stdin or b"")) + message)
            channels.await_marker(LAUNCHED_MARKER, timeout_s=timeout_s)
        except ChannelError as exc:
            channels.close()
            if exc.exited:  # the writer ended without saying so: no whole message reached an init
                raise SandboxUnavailable(
                    f"the pre-started sandbox {self._name} did not take its command (its init is gone: {exc});"
                    " the command did not run",
                    details={"sandbox": self._name},
                ) from exc
            # the stream broke or went silent: the message may have reached the init, the command may run
            raise SideEffectsIncomplete(
                f"the launch into pre-started sandbox {self._name} broke off ({exc}): the command may have run;"
                " not retryable as if it had not",
                details={"sandbox": self._name},
            ) from exc
        if session:
            self.feed = InputFeed(self._name, channels.write_stdin, channels.close_stdin)
            return
        writer = threading.Thread(
            target=self._finish_launch, args=(channels, stdin or b""), name=f"launch-{self._name}", daemon=True
        )
        writer.start()

    @property
    def can_end_input(self) -> bool:
        """A session's input can be closed alone (the API server speaks v5.channel.k8s.io)."""
        return self.feed is not None and self._launched is not None and self._launched.can_close_stdin

    def _finish_launch(self, channels: Channels, stdin: bytes) -> None:
        """The command's stdin, then the writer's end (the pod's deletion): what went wrong is logged."""
        diagnostics, keep = _diagnostics()

        try:
            if stdin:
                channels.write_stdin(stdin)
            channels.pump(lambda _data: None, keep)
        except ChannelError as exc:  # the pod ended or was stopped meanwhile: its end says so
            log.debug("launch writer of %s: %s", self._name, exc)
            return
        finally:
            channels.close()
        code = exit_code(channels.status)
        if code not in (0, None):
            log.info("the launch writer of %s exited %s: %s", self._name, code, bytes(diagnostics))

    def _feed(self, data: bytes) -> None:
        try:
            code, stderr = self._kube.exec_in(
                self._namespace, self._name, SIDECAR, writer_command(len(data)), stdin=io.BytesIO(data)
            )
        except KubeError as exc:  # the pod ended or was stopped meanwhile
            log.debug("stdin of %s: %s", self._name, exc)
            return
        if code != 0:
            log.debug("stdin of %s: the relay exited %s: %s", self._name, code, stderr[-500:])

    def deliver_to(self, stdout: Deliver, stderr: Deliver) -> None:
        self._sinks.attach(stdout, stderr)

    def close(self) -> None:
        self._sinks.close()
        if self.feed is not None:
            self.feed.abandon()
        for channels in self._channels.values():
            channels.close()
        for writer in (self._launcher, self._launched):
            if writer is not None:
                writer.close()

    def _read(self, stream: str, channels: Channels) -> None:
        diagnostics, keep = _diagnostics()

        try:
            channels.pump(lambda data: self._sinks.deliver(stream, data), keep)
        except SinksClosed:
            return
        finally:
            channels.close()
        code = exit_code(channels.status)
        if code not in (0, None) or diagnostics:
            # a relay that failed (its pipe never appeared, the pod was stopped): logged, never output
            text = diagnostics.decode("utf-8", "replace").strip()
            log.info("the %s relay of %s ended with exit %s: %s", stream, self._name, code, text)

    def _read_status(self, channels: Channels) -> bytes:
        """All the status pipe carries, to its end (the init's exit, or the pod's), up to MAX_LINE + 1 bytes
        (the init writes one line of less; anything else is no report); a broken stream is no report."""
        data = bytearray()

        def keep(chunk: bytes) -> None:
            data.extend(chunk[: max(0, MAX_LINE + 1 - len(data))])

        try:
            channels.pump(keep, lambda _diagnostics: None)
        except ChannelError as exc:
            log.debug("the status relay of %s broke: %s", self._name, exc)
            return b""
        finally:
            channels.close()
        return bytes(data)

    async def status(self) -> bytes:
        """What the init reported on its status pipe, once the pipe ended (b"": nothing, or no status pipe)."""
        if self._status is None:
            return b""
        return await asyncio.shield(self._status)

    async def until_done(self) -> None:
        """Until both outputs ended; a broken relay raises ``ChannelError``. A session's input is closed
        then: nothing is left to read it."""
        try:
            await asyncio.gather(*self.readers)
        finally:
            if self.feed is not None:
                self.feed.abandon()


def _diagnostics() -> tuple[bytearray, Callable[[bytes], None]]:
    """A relay's own stderr (its diagnostics, never the command's output): the buffer and what fills it,
    up to RELAY_STDERR_MAX."""
    diagnostics = bytearray()

    def keep(data: bytes) -> None:
        diagnostics.extend(data[: max(0, RELAY_STDERR_MAX - len(diagnostics))])

    return diagnostics, keep


__all__ = ["ChannelError", "PodStdio"]
