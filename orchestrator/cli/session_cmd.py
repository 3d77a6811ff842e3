"""sandboxctl session: the caller's terminal attached to a gated, hardened sandbox (like ``docker run -it``).

The command (``bash`` unless ``--shell`` says otherwise) is decided like any other, then runs in a session
sandbox (:mod:`orchestrator.service.sessions`). With a terminal on stdin: raw mode (Ctrl-C and the like go
to the sandbox's foreground process), the window size forwarded at once and on every SIGWINCH, restored on
the way out. Without one: plain pipes, stdout and stderr apart, and the end of stdin is the command's.
Exit status: the command's own; 125 when refused or when the session failed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from orchestrator.cli.output import Subparsers, report_error

REFUSED_EXIT = 125
READ_SIZE = 4096
#: what one write_stdin carries at most (typed-ahead input is merged up to this)
WRITE_MAX_BYTES = 64 * 1024


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "session",
        help="attach this terminal to a gated sandbox shell",
        description="Decide, then run a shell (or --shell STRING) in a long-lived hardened sandbox attached to "
        "this terminal: raw mode and the window size when stdin is one, plain pipes otherwise. Every input is "
        "recorded as size and keyed digest; the session ends with the command, or at the profile's idle timeout or "
        "lifetime. Exit status: the command's own; 125 when refused or when the session failed.",
    )
    p.add_argument("--config", metavar="FILE", help="orchestrator YAML config (default: built-in policy)")
    p.add_argument("--shell", default="bash", metavar="STRING", help="what runs (default: bash)")
    p.add_argument("--profile", help="execution profile")
    p.add_argument("--workspace", default=None, help="directory mounted as the workspace (default: current dir)")
    p.add_argument("--tenant", default="default")
    p.add_argument("--subject", default=None, help="who asks (default: the current user)")
    p.add_argument("--no-tty", action="store_true", help="plain pipes even when stdin is a terminal")
    p.add_argument("--evidence", default=None, metavar="PATH", help="evidence file (default: state dir)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import asyncio

    try:
        return asyncio.run(_session(args))
    except KeyboardInterrupt:
        return 130


async def _session(args: argparse.Namespace) -> int:
    import getpass

    from orchestrator.cli.check_cmd import workspace_from_args
    from orchestrator.cli.run_cmd import open_orchestrator
    from orchestrator.domain.errors import InputInvalid, OrchestratorError
    from orchestrator.service.sessions import Sessions

    tty = sys.stdin.isatty() and not args.no_tty
    subject = args.subject or getpass.getuser()
    try:
        workspace = workspace_from_args(args)
        if not workspace.is_dir():
            raise InputInvalid(f"workspace {workspace} is not a directory")
        orch = await open_orchestrator(args, workspace)
    except OrchestratorError as err:
        report_error(err.code, err.message)
        return REFUSED_EXIT
    sessions = Sessions(orch, max_per_tenant=1)
    request: dict[str, Any] = {
        "tool": "exec_command",
        "cmd": args.shell,
        "tty": tty,
        "yield_time_ms": 0,
        "tenant": args.tenant,
        "subject": subject,
    }
    if args.profile:
        request["profile"] = args.profile
    try:
        try:
            opened = await sessions.open(request, workspace=workspace)
        except OrchestratorError as err:
            report_error(err.code, err.message)
            return REFUSED_EXIT
        try:
            with _RawTerminal(tty):
                reply = await _attach(sessions, opened.session_id, args.tenant, subject, tty)
        except OrchestratorError as err:
            report_error(err.code, err.message)
            return REFUSED_EXIT
        if reply.error is not None and reply.closed_reason != "exit":
            report_error(reply.error.code, reply.error.message)
        if reply.closed_reason != "exit" or reply.exit_code is None:
            return REFUSED_EXIT
        return int(reply.exit_code)
    finally:
        await sessions.aclose()
        await orch.aclose()


async def _attach(sessions: Any, session_id: str, tenant: str, subject: str, tty: bool) -> Any:
    """Copy stdin to the session and its output to stdout/stderr until it ends; its last reply."""
    import asyncio
    import codecs
    import os
    import signal

    loop = asyncio.get_running_loop()
    stdin = sys.stdin.fileno()
    typed: asyncio.Queue[bytes] = asyncio.Queue()
    who = {"tenant": tenant, "subject": subject}

    def readable() -> None:
        try:
            data = os.read(stdin, READ_SIZE)
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(stdin)
        typed.put_nowait(data)

    async def resize() -> None:
        size = os.get_terminal_size(sys.stdout.fileno() if sys.stdout.isatty() else stdin)
        await sessions.resize(session_id, rows=size.lines, cols=size.columns, **who)

    def show(reply: Any) -> None:
        for data, stream in ((reply.stdout, sys.stdout), (reply.stderr, sys.stderr)):
            if data:
                stream.buffer.write(data)
                stream.flush()

    async def send() -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")  # a character split across reads stays whole
        while True:
            data = await typed.get()
            while not typed.empty() and len(data) < WRITE_MAX_BYTES:  # typed meanwhile: one write
                more = typed.get_nowait()
                if not more:
                    typed.put_nowait(more)
                    break
                data += more
            if not data:
                await sessions.end_input(session_id, **who)
                return
            request = {"tool": "write_stdin", "session_id": session_id, "yield_time_ms": 0, **who}
            show(await sessions.write({**request, "chars": decoder.decode(data)}))

    loop.add_reader(stdin, readable)
    if tty:
        await resize()
        loop.add_signal_handler(signal.SIGWINCH, lambda: loop.create_task(resize()))
    sender = asyncio.create_task(send())
    try:
        while True:
            reply = await sessions.poll(session_id, yield_ms=250, **who)
            show(reply)
            if not reply.running and not reply.pending_bytes:
                return reply
            if sender.done() and not sender.cancelled() and sender.exception() is not None:
                raise sender.exception()  # type: ignore[misc]  # the input broke: say why, end the session
    finally:
        sender.cancel()
        loop.remove_reader(stdin)
        if tty:
            loop.remove_signal_handler(signal.SIGWINCH)


class _RawTerminal:
    """stdin in raw mode while attached (a terminal only), restored however the session ends."""

    def __init__(self, active: bool) -> None:
        self.active = active
        self.saved: Any = None

    def __enter__(self) -> _RawTerminal:
        if self.active:
            import termios
            import tty

            self.saved = termios.tcgetattr(sys.stdin.fileno())
            tty.setraw(sys.stdin.fileno(), termios.TCSANOW)  # not the default TCSAFLUSH: it drops typeahead
        return self

    def __exit__(self, *exc: object) -> None:
        if self.saved is not None:
            import termios

            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, self.saved)
