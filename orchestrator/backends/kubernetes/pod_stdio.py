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

from orchestrator.backends._support.threads import in_daemon_thread
from orchestrator.backends.kubernetes.channels import ChannelError, Channels
from orchestrator.backends.kubernetes.kube import KubeClient, KubeError, exit_code
from orchestrator.backends.kubernetes.sinks import Deliver, Sinks, SinksClosed
from orchestrator.backends.kubernetes.start_barrier import (
    PIPES,
    READY_MARKER,
    SIDECAR,
    reader_command,
    writer_command,
)
from orchestrator.domain.errors import SandboxUnavailable

log = logging.getLogger(__name__)

#: what is kept of a relay's own stderr (its diagnostics, never the command's output)
RELAY_STDERR_MAX = 4096
#: what one websocket frame of stdin carries at most
WRITE_CHUNK = 64 * 1024


class PodStdio:
    """Open with :meth:`open` (the relays connected: from then on the command can start)."""

    def __init__(self, kube: KubeClient, namespace: str, name: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self._sinks = Sinks()
        self._channels: dict[str, Channels] = {}
        self._launcher: Channels | None = None
        self._launch_aborted = False
        self.readers: list[asyncio.Future[None]] = []

    async def open(self, stdin: bytes | None, timeout_s: float) -> None:
        """Connect the relays not connected yet (raises the first ``KubeError`` after keeping those that
        did connect: a relay that runs holds its pipe, and a second one on the same pipe would split the
        output; call again to retry the others). Once all are, each output's reader starts, and stdin is
        fed on a thread of its own (the command reads it only as fast as it is read)."""
        missing = [stream for stream in PIPES if stream not in self._channels]
        opened = await asyncio.gather(
            *(asyncio.to_thread(self._open_reader, stream, timeout_s) for stream in missing), return_exceptions=True
        )
        for stream, result in zip(missing, opened, strict=True):
            if not isinstance(result, BaseException):
                self._channels[stream] = result
        for result in opened:
            if isinstance(result, BaseException):
                raise result
        for stream, channels in self._channels.items():
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

    def launch(self, data: bytes, timeout_s: float) -> None:
        """A pre-started pod: ``data`` (the launch message, then the command's stdin) into its stdin pipe,
        once. Blocking: returns once the writer, exec'd in the sidecar, opened the pipe, which it can only
        while the pod's init holds the other end: the message goes to a live init. The bytes go on a
        thread of their own, at the pace the init and the command read them. ``KubeError`` when the
        writer never started (nothing was sent: it may be tried again), ``SandboxUnavailable`` when it
        started and failed or ``abort_launch`` stopped it (never again: the message may be half sent)."""
        channels = self._launcher = self._kube.open_exec(
            self._namespace, self._name, SIDECAR, writer_command(len(data)), stdin=True
        )
        try:
            if self._launch_aborted:  # aborted while it connected
                raise ChannelError("the launch was aborted", started=True)
            channels.await_marker(READY_MARKER, timeout_s=timeout_s)
        except ChannelError as exc:
            channels.close()
            if exc.started or self._launch_aborted:
                raise SandboxUnavailable(f"the launch of {self._name} failed: {exc}") from exc
            raise KubeError("unreachable" if exc.status is None else "server", "exec", str(exc)) from exc
        threading.Thread(target=self._send, args=(channels, data), name=f"launch-{self._name}", daemon=True).start()

    def abort_launch(self) -> None:
        """Stop a launch still waiting for the pod's init (it ended: nothing will ever read the pipe)."""
        self._launch_aborted = True
        if self._launcher is not None:
            self._launcher.close()

    def _send(self, channels: Channels, data: bytes) -> None:
        diagnostics = bytearray()

        def keep(data: bytes) -> None:
            diagnostics.extend(data[: max(0, RELAY_STDERR_MAX - len(diagnostics))])

        try:
            for offset in range(0, len(data), WRITE_CHUNK):
                channels.write_stdin(data[offset : offset + WRITE_CHUNK])
            channels.pump(lambda _data: None, keep)
        except ChannelError as exc:  # the pod ended or was stopped meanwhile: its end says so
            log.debug("launch of %s: %s", self._name, exc)
            return
        finally:
            channels.close()
        code = exit_code(channels.status)
        if code not in (0, None):
            log.info("the launch writer of %s exited %s: %s", self._name, code, bytes(diagnostics[-500:]))

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
        for channels in self._channels.values():
            channels.close()
        if self._launcher is not None:
            self._launcher.close()

    def _read(self, stream: str, channels: Channels) -> None:
        diagnostics = bytearray()

        def keep(data: bytes) -> None:
            diagnostics.extend(data[: max(0, RELAY_STDERR_MAX - len(diagnostics))])

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

    async def until_done(self) -> None:
        """Until both outputs ended; a broken relay raises ``ChannelError``."""
        await asyncio.gather(*self.readers)


__all__ = ["ChannelError", "PodStdio"]
