"""A warm worker: the forked child that becomes the client's `sandboxctl` process for one command.

It adopts the client's standard streams, working directory, umask and environment, then runs the same
`main()` as a cold start. Signals the client receives come over the socket and are raised here; a
client that goes away (even by SIGKILL) ends the command as SIGTERM would, so its sandbox is removed.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from orchestrator.cli.warm.protocol import FrameReader, ProtocolError, send_frame

# what a client forwards; anything else kills the client itself, which the worker sees as its end
FORWARDED_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


def _adopt_rlimits(limits: Any) -> str | None:
    """Take the caller's resource limits; why not, if they cannot be taken (the client then runs cold)."""
    import resource

    if not isinstance(limits, dict):
        return "malformed rlimits"
    for name, value in limits.items():
        number = getattr(resource, name, None) if isinstance(name, str) and name.startswith("RLIMIT_") else None
        if not isinstance(number, int) or not (
            isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)
        ):
            return f"malformed rlimit {name!r}"
        try:
            resource.setrlimit(number, (value[0], value[1]))
        except (ValueError, OSError) as exc:
            return f"cannot take the caller's {name}: {exc}"
    return None


def _adopt(message: dict[str, Any], fds: list[int]) -> None:
    stdin, stdout, stderr, cwd = fds
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    os.fchdir(cwd)
    for fd in fds:
        os.close(fd)
    os.umask(message["umask"])
    os.environ.clear()
    os.environ.update(message["env"])
    # fresh stream objects: the server's were opened on /dev/null, buffered for it
    encoding, errors = sys.stdout.encoding, sys.stdout.errors
    # buffering=1: line-buffered, as Python makes a terminal's stdout and every stderr
    sys.stdin = open(0, encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
    out_buffering = 1 if os.isatty(1) else -1
    sys.stdout = open(1, "w", buffering=out_buffering, encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding=encoding, errors="backslashreplace", closefd=False)  # noqa: SIM115


def _watch_client(reader: FrameReader, done: threading.Event) -> None:
    while True:
        try:
            frame = reader.read()
        except (OSError, ProtocolError):
            frame = None
        if frame is None:  # the client is gone: nobody waits for this command any more
            if not done.is_set():
                os.kill(os.getpid(), signal.SIGTERM)
            return
        message, fds = frame
        for fd in fds:
            os.close(fd)
        signum = message.get("signal")
        if signum in FORWARDED_SIGNALS and not done.is_set():
            os.kill(os.getpid(), signum)


def run_worker(
    conn: socket.socket,
    reader: FrameReader,
    message: dict[str, Any],
    fds: list[int],
) -> int:
    """Run the client's command here (the server has checked it: see mismatch); returns its exit
    status, already reported to the client."""
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.setpgid(0, 0)  # the server's group is not this command's
    reason = _adopt_rlimits(message.get("rlimits", {}))
    if reason is not None:  # nothing has run yet: the client can still run the command cold
        send_frame(conn, {"refused": reason})
        return 0
    _adopt(message, fds)
    fds.clear()  # adopted and closed: the server's cleanup must not close them again
    send_frame(conn, {"accepted": True, "pid": os.getpid()})
    done = threading.Event()
    threading.Thread(target=_watch_client, args=(reader, done), name="warm-client", daemon=True).start()

    from orchestrator.cli.main import main

    logging.getLogger().handlers.clear()  # the server's log handler writes to the server's log
    gc.disable()  # as a cold start: `run` re-enables it once start-up is over
    try:
        code = main(message["argv"])
    except KeyboardInterrupt:  # a signal after main's own handling
        code = 130
    done.set()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError):
            stream.flush()
    # the output is in the client's streams before it learns the status
    with contextlib.suppress(OSError):
        send_frame(conn, {"exit": code})
    return code
