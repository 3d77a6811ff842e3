"""How the CLI reports: one JSON object with --json, `CODE: message` on stderr always for errors."""

from __future__ import annotations

import argparse
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


# what every command module's register() receives (the parser class is sandboxctl's own)
Subparsers: TypeAlias = "argparse._SubParsersAction[Any]"
