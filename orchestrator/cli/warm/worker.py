"""A warm worker: the forked child that becomes the client's `sandboxctl` process for one command.

Two steps, so that a command never runs twice nor half-adopted: first everything that can fail is
done (the caller's resource limits, the thread that listens to the client) and the worker says
"accepted" — a client that hears anything else, or nothing in time, runs the command cold; then,
only when the client answers "go", the worker adopts the client's standard streams, working
directory, umask and environment and runs the same `main()` as a cold start. Signals the client
receives come over the socket and are raised here; a client that goes away (even by SIGKILL) ends
the command as SIGTERM would, so its sandbox is removed.
"""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import signal
import socket
import sys
import threading
from typing import Any

from orchestrator.cli.output import flush_stdio
from orchestrator.cli.warm.protocol import RELAYED_SIGNALS, FrameReader, ProtocolError, send_frame

# how long a worker waits for the client's go after saying accepted
GO_TIMEOUT_S = 10.0


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
        if name in ("RLIMIT_AS", "RLIMIT_DATA") and value[0] != resource.RLIM_INFINITY:
            # sized for a fresh interpreter; the worker is a copy of the server, already larger
            return f"the caller limits {name}"
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
    # fresh stream objects, built as the interpreter builds them (the server's were for /dev/null);
    # the start-up environment (PYTHONUNBUFFERED, locale) is the server's: the server checked that
    encoding, errors = sys.stdout.encoding, sys.stdout.errors or "strict"
    unbuffered = bool(getattr(sys.__stdout__, "write_through", False))  # -u or PYTHONUNBUFFERED
    sys.stdin = open(0, encoding=encoding, errors=errors, closefd=False)  # noqa: SIM115
    sys.stdout = _text_stream(1, encoding, errors, line_buffering=os.isatty(1), unbuffered=unbuffered)
    sys.stderr = _text_stream(2, encoding, "backslashreplace", line_buffering=True, unbuffered=unbuffered)


def _text_stream(fd: int, encoding: str, errors: str, *, line_buffering: bool, unbuffered: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    binary: Any = raw if unbuffered else io.BufferedWriter(raw)
    return io.TextIOWrapper(
        binary, encoding=encoding, errors=errors, line_buffering=line_buffering, write_through=unbuffered
    )


class _Client:
    """Listens to the client: its go, then the signals it relays, then its end."""

    def __init__(self, reader: FrameReader) -> None:
        self._reader = reader
        self.go = False
        self.decided = threading.Event()  # go, or the client went away before it
        self.done = threading.Event()  # the command finished: the client's end means nothing now

    def listen(self) -> None:
        try:
            frame = self._reader.read()
        except (OSError, ProtocolError):
            frame = None
        self.go = frame is not None and frame[0].get("go") is True
        self.decided.set()
        if not self.go:
            return
        while True:
            try:
                frame = self._reader.read()
            except (OSError, ProtocolError):
                frame = None
            if frame is None:  # the client is gone: nobody waits for this command any more
                if not self.done.is_set():
                    # as SIGTERM (a run cancels, its sandbox removed); where the caller ignored SIGTERM,
                    # as a cold start killed with its caller: SIGKILL (the next start collects the orphan)
                    ignored = signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
                    os.kill(os.getpid(), signal.SIGKILL if ignored else signal.SIGTERM)
                return
            message, fds = frame
            for fd in fds:
                os.close(fd)
            signum = message.get("signal")
            if signum in RELAYED_SIGNALS and not self.done.is_set():
                os.kill(os.getpid(), signum)


def run_worker(
    conn: socket.socket, reader: FrameReader, message: dict[str, Any], fds: list[int], *, ran_fd: int
) -> int:
    """Run the client's command here (the server has admitted it: see server.mismatch); returns its
    exit status, already reported to the client. ``ran_fd``: one byte there tells the server a
    command ran."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    for signum in message.get("ignored_signals", []):  # as the caller: nohup, `trap '' INT`, `&` in a script
        signal.signal(signum, signal.SIG_IGN)
    os.setpgid(0, 0)  # the server's group is not this command's
    client = _Client(reader)
    reason = _adopt_rlimits(message.get("rlimits", {}))
    if reason is None:
        try:
            threading.Thread(target=client.listen, name="warm-client", daemon=True).start()
        except RuntimeError as exc:  # e.g. the caller's RLIMIT_NPROC
            reason = f"cannot listen to the client: {exc}"
    if reason is not None:  # nothing has run yet: the client runs the command cold
        send_frame(conn, {"refused": reason})
        return 0
    send_frame(conn, {"accepted": True, "pid": os.getpid()})
    if not client.decided.wait(GO_TIMEOUT_S) or not client.go:
        return 0  # the client gave up (and runs cold) or went away: this worker ran nothing
    os.write(ran_fd, b".")
    os.close(ran_fd)
    _adopt(message, fds)
    fds.clear()  # adopted and closed: the server's cleanup must not close them again

    from orchestrator.cli.main import main

    logging.getLogger().handlers.clear()  # as a cold start: main() installs its own
    gc.disable()  # as a cold start: `run` re-enables it once start-up is over
    try:
        code = main(message["argv"])
    except KeyboardInterrupt:  # a signal after main's own handling
        code = 130
    client.done.set()
    code = flush_stdio(code)
    # the output is in the client's streams before it learns the status
    with contextlib.suppress(OSError):
        send_frame(conn, {"exit": code})
    return code
