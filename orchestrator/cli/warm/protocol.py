"""The warm server's wire format: length-prefixed JSON frames on a Unix stream socket, the first one
carrying the client's file descriptors. Standard library only: the client imports this on every
`sandboxctl` start."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import struct
import time

from orchestrator.domain.statedir import state_dir

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: the entry point must not pay for typing's import
    from collections.abc import Mapping, Sequence
    from typing import Any

SOCKET_NAME = "warm.sock"
# the signals a client relays to its worker (others end the client, which the worker sees as its end)
RELAYED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# AF_UNIX paths: sun_path is 108 bytes with its terminating NUL
MAX_SOCKET_PATH = 107
_HEADER = struct.Struct("!I")
# argv and the environment of one command; a frame larger than this is a broken peer
MAX_FRAME = 4 * 1024 * 1024
MAX_FDS = 8


class ProtocolError(Exception):
    """The peer sent something that is not a frame of this protocol (or went away mid-frame)."""


def state_dir_problem(directory: str) -> str | None:
    """Why the socket's directory cannot be trusted, or None: it must be a real directory (not a
    link) of this user that nobody else may write to, so nobody else can have put a socket there."""
    try:
        st = os.lstat(directory)
    except OSError as exc:
        return f"{directory}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid != os.getuid():
        return f"{directory} belongs to uid {st.st_uid}, not to this user"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{directory} is writable by others: chmod 700 it"
    return None


def socket_path(environ: Mapping[str, str] | None = None) -> str:
    return os.path.join(state_dir(environ), SOCKET_NAME)


def send_frame(sock: socket.socket, message: Mapping[str, Any], fds: Sequence[int] = ()) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise ProtocolError(f"frame of {len(data)} bytes is over the {MAX_FRAME}-byte limit")
    frame = _HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [frame], list(fds)) if fds else sock.send(frame)
    if sent < len(frame):
        sock.sendall(frame[sent:])


class FrameReader:
    """Reads frames off one socket; bytes of a next frame that arrived early wait in a buffer."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._buffer = bytearray()
        self._deadline: float | None = None

    def read(self, *, within_s: float | None = None) -> tuple[dict[str, Any], list[int]] | None:
        """The next frame and the descriptors that came with it; None at a clean end of stream.
        ``within_s``: the whole frame must arrive by then (TimeoutError), however it trickles in."""
        fds: list[int] = []
        self._deadline = None if within_s is None else time.monotonic() + within_s
        try:
            while len(self._buffer) < _HEADER.size:
                if not self._fill(fds):
                    if self._buffer:
                        raise ProtocolError("the peer went away mid-frame")
                    return None
            (size,) = _HEADER.unpack_from(self._buffer)
            if size > MAX_FRAME:
                raise ProtocolError(f"frame of {size} bytes is over the {MAX_FRAME}-byte limit")
            while len(self._buffer) < _HEADER.size + size:
                if not self._fill(fds):
                    raise ProtocolError("the peer went away mid-frame")
            body = bytes(self._buffer[_HEADER.size : _HEADER.size + size])
            del self._buffer[: _HEADER.size + size]
            message = json.loads(body)
            if not isinstance(message, dict):
                raise ProtocolError("a frame is a JSON object")
            return message, fds
        except BaseException as err:
            for fd in fds:
                os.close(fd)
            if isinstance(err, (ValueError, RecursionError)):  # not JSON, or nested beyond reason
                raise ProtocolError(f"malformed frame: {type(err).__name__}") from None
            raise

    def _fill(self, fds: list[int]) -> bool:
        if self._deadline is not None:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the peer did not send a whole frame in time")
            self._sock.settimeout(left)
        data, received, _flags, _addr = socket.recv_fds(self._sock, 64 * 1024, MAX_FDS)
        fds.extend(received)
        self._buffer += data
        return bool(data)
