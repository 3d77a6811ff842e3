"""The client half: hand this command to a warm server if one of ours answers, else say so (None) and
let the caller run it cold. Standard library only, imported on every `sandboxctl` start.

Nothing is sent before the server is known to be ours: the state directory belongs to this user and
is closed to others, and the process listening on the socket runs as this user. Until this client
says "go", nothing has run and falling back is safe; after that it only relays: signals go to the
worker, and the worker's exit status becomes ours.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

from orchestrator.cli.warm.peer import identity, peer_credentials, peer_difference
from orchestrator.cli.warm.protocol import (
    RELAYED_SIGNALS,
    FrameReader,
    ProtocolError,
    send_frame,
    socket_path,
    state_dir_problem,
)

TYPE_CHECKING = False
if TYPE_CHECKING:  # annotations only: this module is on every start's path
    from collections.abc import Sequence
    from types import FrameType
    from typing import Any

CONNECT_TIMEOUT_S = 2.0
DISABLE_ENV = "SANDBOXCTL_WARM"  # "0": never use a warm server
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


def _connect(path: str) -> socket.socket | None:
    if state_dir_problem(os.path.dirname(path)) is not None:
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(CONNECT_TIMEOUT_S)
        conn.connect(path)
        _pid, uid, _gid = peer_credentials(conn)
    except OSError:
        conn.close()
        return None
    # never hand our environment or streams to another user's process, nor to a confined one of ours
    # (a sandbox running as our uid could have put a socket in a state dir it can write to)
    try:
        refused = uid != os.getuid() or peer_difference(conn, identity(os.getpid()), role="server") is not None
    except OSError:
        refused = True
    if refused:
        conn.close()
        return None
    return conn


def run_warm(argv: Sequence[str]) -> int | None:
    """The command's exit status, run by a warm server; None when no server took it."""
    if os.environ.get(DISABLE_ENV) == "0" or (argv and argv[0] == "warm"):
        return None
    # a terminal on stdin belongs to the foreground job: job control (Ctrl-Z, background reads) and the
    # approval prompt must act on this process, which they cannot do through a worker
    if os.isatty(0):
        return None
    conn = _connect(socket_path())
    if conn is None:
        return None
    ignored = [int(s) for s in RELAYED_SIGNALS if signal.getsignal(s) is signal.SIG_IGN]
    fds = None
    try:
        fds = _descriptors()
        if fds is None:
            conn.close()
            return None
        request = {
            "op": "run",
            "argv": list(argv),
            "env": dict(os.environ),
            "executable": sys.executable,
            "umask": _umask(),
            "rlimits": _rlimits(),
            "ignored_signals": ignored,
        }
        send_frame(conn, request, fds)
        reader = FrameReader(conn)
        reply = reader.read()
        if reply is None or not reply[0].get("accepted"):
            conn.close()
            return None
        send_frame(conn, {"go": True})  # from here on the command is the worker's: no falling back
    except (OSError, ProtocolError):  # no server, or not one that speaks to us: nothing ran
        conn.close()
        return None
    finally:
        if fds is not None:
            os.close(fds[3])
    conn.settimeout(None)
    return _relay(conn, reader, ignored)


def _relay(conn: socket.socket, reader: FrameReader, ignored: list[int]) -> int:
    relayed: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        relayed.append(signum)
        # not contextlib.suppress: contextlib costs an import on every start
        try:  # noqa: SIM105
            send_frame(conn, {"signal": signum})
        except OSError:
            pass  # the worker is gone: its exit (or the lack of one) ends the loop below

    for signum in RELAYED_SIGNALS:
        if signum not in ignored:
            signal.signal(signum, forward)
    while True:
        try:
            frame = reader.read()
        except (OSError, ProtocolError):
            frame = None
        if frame is None:
            return _ended_without_status(relayed)
        message, received = frame
        for fd in received:
            os.close(fd)
        code = message.get("exit")
        if isinstance(code, int):
            return code


def _ended_without_status(relayed: list[int]) -> int:
    if relayed:  # the worker died of the signal we passed on: so do we, as a cold start would have
        signum = relayed[-1]
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum
    sys.stderr.write("sandboxctl: INTERNAL: the warm worker ended without an exit status\n")
    return 125


def query(op: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> dict[str, Any] | None:
    """A server's answer to ``status`` or ``stop``; None when none of ours answers at the socket."""
    conn = _connect(socket_path())
    if conn is None:
        return None
    with conn:
        try:
            conn.settimeout(timeout_s)
            send_frame(conn, {"op": op})
            reply = FrameReader(conn).read()
        except (OSError, ProtocolError):
            return None
    return reply[0] if reply is not None and reply[0].get("ok") else None
