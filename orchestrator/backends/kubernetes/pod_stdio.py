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


class PodStdio:
    """Open with :meth:`open` (the relays connected: from then on the command can start)."""

    def __init__(self, kube: KubeClient, namespace: str, name: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._name = name
        self._sinks = Sinks()
        self._channels: dict[str, Channels] = {}
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
