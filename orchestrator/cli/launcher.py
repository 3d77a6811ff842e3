"""The `sandboxctl` entry point: a warm server runs the command if one of ours answers; otherwise it
runs here, cold. Kept to the standard library so the warm path costs an interpreter and a connect."""

from __future__ import annotations

import os
import sys


def entry() -> None:
    from orchestrator.cli.warm.client import run_warm

    code = run_warm(sys.argv[1:])
    if code is None:
        from orchestrator.cli.main import entry as cold_entry

        cold_entry()  # exits
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if code is not None else 125)
