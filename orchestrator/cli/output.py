"""How the CLI reports: one JSON object with --json, `CODE: message` on stderr always for errors."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any, TypeAlias


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def fail(code: str, message: str, exit_code: int, *, json_out: bool = False) -> int:
    if json_out:
        emit_json({"error": {"code": code, "message": message}})
    sys.stderr.write(f"sandboxctl: {code}: {message}\n")
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
