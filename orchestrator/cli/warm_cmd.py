"""sandboxctl warm start|stop|status: the optional warm server that makes every command start fast."""

from __future__ import annotations

import argparse
import time
from typing import Any

from orchestrator.cli.output import Subparsers, emit_json, fail, say

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


def register(sub: Subparsers) -> None:
    warm = sub.add_parser(
        "warm",
        help="start, stop or show the warm server (commands then skip Python's start-up)",
        description="A warm server has every module imported and every validator built; each command is "
        "forked from it with the caller's streams, directory, umask and environment, so it behaves exactly "
        "as a cold start but begins its work about half a second sooner. Only the same user is served. "
        "SANDBOXCTL_WARM=0 makes a command ignore it.",
    )
    actions = warm.add_subparsers(dest="warm_action", metavar="ACTION")
    actions.required = True
    start = actions.add_parser("start", help="start the server in the background (no-op if one answers)")
    start.add_argument(
        "--idle-timeout", type=float, default=None, metavar="S", help="stop after S seconds without a command"
    )
    start.add_argument("--foreground", action="store_true", help="serve in this process (for a supervisor)")
    start.set_defaults(handler=handle_start)
    stop = actions.add_parser("stop", help="stop the server (running commands finish)")
    stop.set_defaults(handler=handle_stop)
    status = actions.add_parser("status", help="whether a server answers, its pid and what it served")
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=handle_status)


def _server_argv(args: argparse.Namespace) -> list[str]:
    from orchestrator.cli.warm.protocol import socket_path

    argv = ["--socket", str(socket_path())]
    if args.idle_timeout is not None:
        if not args.idle_timeout > 0:
            raise ValueError("--idle-timeout must be a positive number of seconds")
        argv += ["--idle-timeout", str(args.idle_timeout)]
    return argv


def _another_installation(status: dict[str, Any]) -> int | None:
    import sys

    if status.get("python") == sys.executable:
        return None
    return fail(
        "CONFIG.INVALID",
        f"the warm server at {status['socket']} (pid {status['pid']}) belongs to another installation "
        f"({status.get('python')}); stop it with that installation's sandboxctl, or set SANDBOX_STATE_DIR",
        2,
    )


def handle_start(args: argparse.Namespace) -> int:
    import os
    import subprocess
    import sys
    from pathlib import Path

    from orchestrator.cli.warm.client import query
    from orchestrator.cli.warm.protocol import MAX_SOCKET_PATH, socket_path
    from orchestrator.cli.warm.server import ServerError, check_state_dir

    path = socket_path()
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        return fail(
            "INPUT.INVALID",
            f"the warm server's socket {path} is longer than the {MAX_SOCKET_PATH} bytes a Unix socket path "
            "may have: set SANDBOX_STATE_DIR to a shorter directory",
            2,
        )
    try:
        server_argv = _server_argv(args)
        check_state_dir(Path(path).parent)
    except (ValueError, ServerError, OSError) as err:
        return fail("INPUT.INVALID", str(err), 2)
    if (running := query("status")) is not None:
        refused = _another_installation(running)
        if refused is not None:
            return refused
        say(f"warm server already running: pid {running['pid']} at {running['socket']}")
        return 0
    if args.foreground:
        from orchestrator.cli.warm.server import main as serve

        return serve(server_argv)
    log_path = Path(path).parent / "warm.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "orchestrator.cli.warm.server", *server_argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd="/",
            start_new_session=True,
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        status = query("status")
        if status is not None and status.get("pid") == proc.pid:
            say(f"warm server started: pid {proc.pid} at {status['socket']} (log: {log_path})")
            return 0
        if proc.poll() is not None:
            if status is not None and _another_installation(status) is None:  # a concurrent start won
                say(f"warm server already running: pid {status['pid']} at {status['socket']}")
                return 0
            return fail("INTERNAL", f"the warm server exited with status {proc.returncode}: see {log_path}", 125)
        time.sleep(0.05)
    proc.terminate()
    return fail("INTERNAL", f"the warm server did not answer within {START_TIMEOUT_S:.0f} s: see {log_path}", 125)


def handle_stop(args: argparse.Namespace) -> int:
    from orchestrator.cli.warm.client import query
    from orchestrator.cli.warm.protocol import socket_path

    reply = query("stop")
    if reply is None:
        say(f"no warm server answers at {socket_path()}")
        return 0
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and query("status") is not None:
        time.sleep(0.05)
    say(f"warm server stopped (pid {reply['pid']})")
    return 0


def handle_status(args: argparse.Namespace) -> int:
    from orchestrator.cli.warm.client import query
    from orchestrator.cli.warm.protocol import socket_path

    status: dict[str, Any] | None = query("status")
    if args.json:
        emit_json({"running": status is not None, **(status or {"socket": str(socket_path())})})
    elif status is None:
        say(f"no warm server answers at {socket_path()}")
    else:
        say(
            f"warm server pid {status['pid']} at {status['socket']}: {status['served']} command(s) served, "
            f"{status['active']} running"
        )
    return 0 if status is not None else 1
