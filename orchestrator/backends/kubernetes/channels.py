"""A container's stdio over the API server: the exec subresource's websocket, channel by channel.

The official client opens the connection (auth, TLS, proxies, the channel protocol); its ``WSClient``
then buffers every frame already waiting, without a bound, so the frames are read here instead, one at a
time, straight into the caller's callbacks: output a workload floods is never held whole in memory, and
the reader's pace is the command's back-pressure. Blocking: run off the event loop; ``close()`` from any
thread ends a blocked ``pump()``.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client as k8s_client
from kubernetes import stream as k8s_stream
from websocket import ABNF, WebSocketException

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
#: v5 of the channel protocol (Kubernetes >= 1.30) can close one channel: stdin's end without the stream's
V5_PROTOCOL = "v5.channel.k8s.io"
CLOSE = 255
WRITE_CHUNK = 64 * 1024
#: what is kept of the error channel (a Status object: how the stream ended)
STATUS_MAX = 64 * 1024
#: output that may come before the start marker (the kubelet copies each stream on its own, so a frame
#: of stdout can overtake the marker on stderr): kept for ``pump()``; past it the stream is refused
EARLY_MAX = 1024 * 1024
RESIZE_WAIT_S = 2.0


class ChannelError(Exception):
    """The websocket could not be opened or broke; ``status`` is the handshake's HTTP status if known;
    ``started``: the command was seen running (opening it again would run it twice); ``exited``: the
    stream ended with the command's exit status (it ended, and said so)."""

    def __init__(self, message: str, status: int | None = None, *, started: bool = False, exited: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.started = started
        self.exited = exited


class Channels:
    """One open exec/attach websocket."""

    def __init__(self, ws: Any, api: k8s_client.ApiClient) -> None:
        self._ws = ws  # kubernetes.stream.ws_client.WSClient, used for its socket and protocol only
        self._api = api
        self._write_lock = threading.Lock()
        self._closed = threading.Event()
        self.status: dict[str, Any] | None = None
        self._early: list[tuple[int, bytes]] = []  # output that came before or with await_marker's marker

    def await_marker(self, marker: bytes, channel: int = STDERR, timeout_s: float | None = None) -> None:
        """Until the exec'd command wrote ``marker`` on ``channel`` (its stderr; a terminal's is stdout):
        then it runs. The API server accepts the websocket before the kubelet found the container, so a
        command that could not start (the pod not scheduled yet, the container not started) only shows as
        a Failure Status on the error channel: then ``ChannelError.started`` is False and it may be tried
        again. Anything else that ends the wait without the marker (output, an exit code, a broken or
        silent stream past ``timeout_s``) may mean it ran: ``started`` True, never to be run twice.
        Output that came before the marker on the other channel, or after it, is delivered first by
        ``pump()``; what precedes it on its own channel is the wrapper's, not the command's."""
        status = bytearray()
        seen = bytearray()  # the marker's channel until the marker (it may come in pieces, after noise)
        early = 0
        self._ws.sock.settimeout(timeout_s)
        try:
            for got, payload in self._frames():
                if got in (STDOUT, STDERR):
                    early += len(payload)
                    if early > EARLY_MAX:
                        raise ChannelError("output overtook the start marker by more than 1 MiB", started=True)
                if got == channel:
                    seen += payload
                    at = seen.find(marker)
                    if at >= 0:
                        self._early.append((channel, bytes(seen[at + len(marker) :])))
                        return
                elif got in (STDOUT, STDERR):
                    self._early.append((got, payload))
                elif got == ERROR:
                    status += payload[: max(0, STATUS_MAX - len(status))]
        except (OSError, WebSocketException) as exc:  # a timeout too: the command may be running
            raise ChannelError(f"{type(exc).__name__}: {exc}", started=True) from exc
        finally:
            with contextlib.suppress(OSError, WebSocketException, AttributeError):
                self._ws.sock.settimeout(None)
        text = bytes(status).decode("utf-8", "replace")
        decoded: Any = None
        with contextlib.suppress(ValueError):
            decoded = json.loads(text)
        if isinstance(decoded, dict):
            text = str(decoded.get("message") or text)
        ran = early > 0 or _exited(decoded)
        raise ChannelError(
            f"the command {'ended without its start marker' if ran else 'did not start'}:"
            f" {text[:500] or 'the stream ended'}",
            started=ran,
            exited=_exited(decoded),
        )

    def _frames(self) -> Iterator[tuple[int, bytes]]:
        """(channel, payload) of each data frame, until the stream closes or ``close()``."""
        while not self._closed.is_set():
            opcode, frame = self._ws.sock.recv_data_frame(True)
            if opcode == ABNF.OPCODE_CLOSE:
                return
            if opcode not in (ABNF.OPCODE_BINARY, ABNF.OPCODE_TEXT) or not frame.data:
                continue
            data: bytes = frame.data if isinstance(frame.data, bytes) else frame.data.encode()
            yield data[0], data[1:]

    def write_stdin(self, data: bytes) -> None:
        for start in range(0, len(data), WRITE_CHUNK):
            self._send(bytes([STDIN]) + data[start : start + WRITE_CHUNK])

    @property
    def can_close_stdin(self) -> bool:
        return getattr(self._ws, "subprotocol", None) == V5_PROTOCOL

    def close_stdin(self) -> None:
        """The command reads EOF; its output still comes. Needs the v5 protocol (``can_close_stdin``)."""
        if not self.can_close_stdin:
            raise ChannelError("the API server speaks no v5.channel.k8s.io: stdin cannot be closed alone")
        self._send(bytes([CLOSE, STDIN]))

    def resize(self, rows: int, cols: int) -> None:
        """The terminal's window size (an exec with ``tty``): the command gets SIGWINCH. Waits at most
        RESIZE_WAIT_S behind input the command does not read (the stream is one socket)."""
        self._send(bytes([RESIZE]) + json.dumps({"Width": cols, "Height": rows}).encode(), wait_s=RESIZE_WAIT_S)

    def _send(self, payload: bytes, wait_s: float = -1) -> None:
        if not self._write_lock.acquire(timeout=wait_s):
            raise ChannelError("the stream is busy with input the command does not read")
        try:
            self._ws.sock.send(payload, opcode=ABNF.OPCODE_BINARY)
        except (OSError, WebSocketException) as exc:
            raise ChannelError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            self._write_lock.release()

    def pump(self, on_stdout: Callable[[bytes], None], on_stderr: Callable[[bytes], None]) -> None:
        """Deliver output frame by frame until the stream ends (the container's stdio closed, or
        ``close()``); the error channel's Status is kept in ``status``. A callback may raise to stop."""
        status = bytearray()
        early, self._early = self._early, []
        for channel, payload in early:
            if payload:
                (on_stdout if channel == STDOUT else on_stderr)(payload)
        try:
            for channel, payload in self._frames():
                if channel == STDOUT and payload:
                    on_stdout(payload)
                elif channel == STDERR and payload:
                    on_stderr(payload)
                elif channel == ERROR:
                    status += payload[: max(0, STATUS_MAX - len(status))]
        except (OSError, WebSocketException) as exc:
            if not self._closed.is_set() and not _ended(exc):
                raise ChannelError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if status:
                with contextlib.suppress(ValueError):
                    decoded = json.loads(bytes(status))
                    self.status = decoded if isinstance(decoded, dict) else None

    def close(self) -> None:
        """End the stream (a blocked ``pump()`` returns); idempotent, from any thread."""
        if self._closed.is_set():
            return
        self._closed.set()
        sock = getattr(self._ws.sock, "sock", None)
        with contextlib.suppress(OSError):
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in another thread
        with contextlib.suppress(Exception):
            self._ws.close()
        with contextlib.suppress(Exception):
            self._api.close()  # type: ignore[no-untyped-call]


def _exited(status: Any) -> bool:
    """A Status that reports an exit (Success, or a NonZeroExitCode with its code): the command ran."""
    if not isinstance(status, dict):
        return False
    causes = (status.get("details") or {}).get("causes") or []
    return status.get("status") == "Success" or any(
        isinstance(cause, dict) and cause.get("reason") == "ExitCode" for cause in causes
    )


def _ended(exc: BaseException) -> bool:
    return type(exc).__name__ == "WebSocketConnectionClosedException"


def open_channels(
    configuration: k8s_client.Configuration, subresource: str, namespace: str, pod: str, **query: Any
) -> Channels:
    """Open ``pods/<subresource>`` (``exec`` or ``attach``) of ``pod``; ``query``: the subresource's
    parameters (container, command, stdin, stdout, stderr, tty)."""
    # a client of its own: the library's stream() swaps its client's request method while it connects,
    # which would turn other threads' calls on a shared client into websockets
    api = k8s_client.ApiClient(configuration)
    core = k8s_client.CoreV1Api(api)
    connect = core.connect_get_namespaced_pod_exec if subresource == "exec" else core.connect_get_namespaced_pod_attach
    try:
        ws = k8s_stream.stream(connect, pod, namespace, _preload_content=False, binary=True, **query)
    except Exception as exc:
        with contextlib.suppress(Exception):
            api.close()  # type: ignore[no-untyped-call]
        raise ChannelError(f"{type(exc).__name__}: {exc}", _handshake_status(exc)) from exc
    return Channels(ws, api)


def _handshake_status(exc: Exception) -> int | None:
    status = getattr(exc, "status", None) or getattr(exc, "status_code", None)
    if isinstance(status, int):
        return status
    text = str(exc)
    marker = "Handshake status "
    if marker in text:
        with contextlib.suppress(ValueError):
            return int(text.split(marker, 1)[1][:3])
    return None
