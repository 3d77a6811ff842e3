"""sandboxctl: the command-line front. Heavy libraries are imported inside handlers, never here,
so start-up stays lean for `sandboxctl run`."""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import select
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from orchestrator.cli import (
    approvals_cmd,
    check_cmd,
    ci_cmd,
    evidence_cmd,
    grants_cmd,
    mcp_cmd,
    ops_cmd,
    profiles_cmd,
    run_cmd,
    serve_cmd,
    session_cmd,
    warm_cmd,
)
from orchestrator.cli.arguments import undecodable_argument
from orchestrator.cli.output import fail, flush_stdio
from orchestrator.domain.text import terminal_safe


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors like every other refusal (and as JSON with --json)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sandboxctl",
        description="Governed, contained execution: policy gate, approvals, hardened sandboxes, evidence.",
    )
    parser.add_argument("--version", action="version", version="sandboxctl 0.1.0")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    check_cmd.register(sub)
    run_cmd.register(sub)
    session_cmd.register(sub)
    evidence_cmd.register(sub)
    approvals_cmd.register(sub)
    grants_cmd.register(sub)
    profiles_cmd.register(sub)
    ops_cmd.register(sub)
    warm_cmd.register(sub)
    serve_cmd.register(sub)
    mcp_cmd.register(sub)
    ci_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(args_list)
    except UsageError as err:
        return fail("INPUT.INVALID", str(err), 2, json_out="--json" in args_list)
    except SystemExit as exit_:  # --help and --version
        return int(exit_.code or 0)
    undecodable = undecodable_argument(parser, args)
    if undecodable is not None:
        return fail(
            "INPUT.INVALID",
            f"{undecodable} is not valid UTF-8 (command-line arguments must be UTF-8 text)",
            2,
            json_out=getattr(args, "json", False),
        )
    _quiet_logging()
    try:
        return int(args.handler(args))
    except KeyboardInterrupt:  # Ctrl-C, and SIGTERM during `run` (see run_cmd.handle)
        return fail("EXECUTION.CANCELLED", "interrupted", 130)
    except BrokenPipeError as err:
        if not _reader_gone(sys.stdout):  # another pipe broke: not ours to hide
            return fail("INTERNAL", f"unexpected {err.__class__.__name__}: {err}", 125)
        # the reader of our output went away (`| head`): stop quietly, as other tools do
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush there
        return 128 + signal.SIGPIPE
    except Exception as err:  # the last line of defence: never a traceback
        from orchestrator.domain.errors import OrchestratorError

        if isinstance(err, OrchestratorError):
            return fail(err.code, err.message, err.exit_code, json_out=getattr(args, "json", False))
        return fail("INTERNAL", f"unexpected {err.__class__.__name__}: {err}", 125)


def _reader_gone(stream: Any) -> bool:
    """Whether ``stream`` is a pipe whose reading end is closed (poll reports an error on its writing end)."""
    try:
        poller = select.poll()
        poller.register(stream.fileno(), select.POLLOUT)
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


class _NoTraceback(logging.Formatter):
    """Warnings for people: one line each, never a traceback (those are for a debug log)."""

    def formatException(self, ei: Any) -> str:
        return ""

    def format(self, record: logging.LogRecord) -> str:
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        return terminal_safe(super().format(record))  # one line, nothing a terminal would act on


def _quiet_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_NoTraceback("sandboxctl: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    debug = bool(os.environ.get("SANDBOX_DEBUG"))
    root.setLevel(logging.DEBUG if debug else logging.WARNING)
    # urllib3 (the Kubernetes client's) warns of each retry ("Retrying (Retry(total=2...)) after connection
    # broken"): what finally failed is reported once, as an error with its code and fix
    logging.getLogger("urllib3.connectionpool").setLevel(logging.DEBUG if debug else logging.ERROR)


def entry() -> None:
    # Start-up builds many long-lived objects (models, validators, regexes): collecting garbage among
    # them is wasted work, so the collector waits (a long `run` re-enables it, see run_cmd).
    gc.disable()
    code = main()
    # Everything that matters is written and fsynced by now (evidence closes before main returns);
    # skipping the interpreter's teardown of every module saves tens of milliseconds per command.
    logging.shutdown()
    os._exit(flush_stdio(code))


if __name__ == "__main__":
    entry()
