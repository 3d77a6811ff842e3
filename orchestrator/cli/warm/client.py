"""The client half: hand this command to a warm server if one of ours answers, else say so (None) and
let the caller run it cold. Standard library only, imported on every `sandboxctl` start.

Until the worker accepts, nothing has run and falling back is safe; after that this process only
relays: signals go to the worker, and the worker's exit status becomes ours.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from orchestrator.cli.warm.protocol import FrameReader, ProtocolError, send_frame, socket_path

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: this module is on every start's path
    from collections.abc import Sequence
    from types import FrameType
    from typing import Any

CONNECT_TIMEOUT_S = 2.0
DISABLE_ENV = "SANDBOXCTL_WARM"  # "0": never use a warm server
_RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# the caller's resource limits, which its command would have inherited from a cold start
RLIMITS = (
    "RLIMIT_NOFILE",
    "RLIMIT_NPROC",
    "RLIMIT_CORE",
    "RLIMIT_FSIZE",
    "RLIMIT_AS",
    "RLIMIT_DATA",
    "RLIMIT_STACK",
    "RLIMIT_CPU",
)


def _descriptors() -> list[int] | None:
    """stdin, stdout, stderr and the working directory; None if one is missing (then run cold)."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
        return [0, 1, 2, os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    except OSError:
        return None


def _rlimits() -> dict[str, list[int]]:
    import resource

    return {name: list(resource.getrlimit(getattr(resource, name))) for name in RLIMITS}


def _umask() -> int:
    current = os.umask(0o077)
    os.umask(current)
    return current


def run_warm(argv: Sequence[str]) -> int | None:
    """The command's exit status, run by a warm server; None when no server took it."""
    if os.environ.get(DISABLE_ENV) == "0" or (argv and argv[0] == "warm"):
        return None
    path = socket_path()
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    fds = None
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.connect(path)
        fds = _descriptors()
        if fds is None:
            return None
        request = {
            "op": "run",
            "argv": list(argv),
            "env": dict(os.environ),
            "executable": sys.executable,
            "umask": _umask(),
            "rlimits": _rlimits(),
        }
        send_frame(conn, request, fds)
        reader = FrameReader(conn)
        reply = reader.read()
    except (OSError, ProtocolError, ValueError):  # no server, or not one that speaks to us
        conn.close()
        return None
    finally:
        if fds is not None:
            os.close(fds[3])
    if reply is None or not reply[0].get("accepted"):
        conn.close()
        return None
    conn.settimeout(None)
    return _relay(conn, reader)


def _relay(conn: socket.socket, reader: FrameReader) -> int:
    def forward(signum: int, _frame: FrameType | None) -> None:
        # not contextlib.suppress: contextlib costs an import on every start
        try:  # noqa: SIM105
            send_frame(conn, {"signal": signum})
        except OSError:
            pass  # the worker is gone: its exit (or the lack of one) ends the loop below

    for signum in _RELAYED:
        signal.signal(signum, forward)
    while True:
        try:
            frame = reader.read()
        except (OSError, ProtocolError):
            frame = None
        if frame is None:
            sys.stderr.write("sandboxctl: INTERNAL: the warm worker ended without an exit status\n")
            return 125
        message, received = frame
        for fd in received:
            os.close(fd)
        code = message.get("exit")
        if isinstance(code, int):
            return code


def query(op: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> dict[str, Any] | None:
    """A server's answer to ``status`` or ``stop``; None when none answers at the socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        try:
            conn.connect(socket_path())
            send_frame(conn, {"op": op})
            reply = FrameReader(conn).read()
        except (OSError, ProtocolError):
            return None
    return reply[0] if reply is not None and reply[0].get("ok") else None
