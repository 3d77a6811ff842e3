"""How the CLI reports: one JSON object with --json, `CODE: message` on stderr always for errors."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, TypeAlias

from orchestrator.domain.text import json_safe, terminal_safe


def emit_json(obj: Any) -> None:
    """One JSON object on a line. Controls, bidi and other invisible characters are written as \\uXXXX:
    the same data once parsed, and nothing a terminal showing it would act on."""
    sys.stdout.write(json_safe(json.dumps(obj, sort_keys=True, ensure_ascii=False)) + "\n")
    sys.stdout.flush()


def say(text: str, *, file: Any = None) -> None:
    """A line the orchestrator prints for people: controls and bidi characters escaped (messages quote
    paths, names and reasons that others chose)."""
    print(terminal_safe(text), file=file or sys.stdout)


def report_error(code: str, message: str) -> None:
    """``sandboxctl: CODE: message`` on stderr, on one line, nothing a terminal would act on."""
    sys.stderr.write(f"sandboxctl: {terminal_safe(code)}: {terminal_safe(message)}\n")


def fail(code: str, message: str, exit_code: int, *, json_out: bool = False) -> int:
    if json_out:
        emit_json({"error": {"code": code, "message": message}})
    report_error(code, message)
    return exit_code


def flush_stdio(code: int) -> int:
    """Flush what is still buffered; output that could not be written is a failure (Python's own
    status for it, 120), said on stderr if stderr still works, never a traceback."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError) as exc:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(
                f"sandboxctl: INTERNAL: cannot write the output: {getattr(exc, 'strerror', None) or exc}\n"
            )
        code = code or 120
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        code = code or 120
    return code


# what every command module's register() receives (the parser class is sandboxctl's own)
Subparsers: TypeAlias = "argparse._SubParsersAction[Any]"
