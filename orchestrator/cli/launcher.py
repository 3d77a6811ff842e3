"""The `sandboxctl` entry point: a warm server runs the command if one of ours answers; otherwise it
runs here, cold. Kept to the standard library so the warm path costs an interpreter and a connect."""

from __future__ import annotations

import os
import sys


def entry() -> None:
    from orchestrator.cli.warm.client import run_warm

    try:
        code = run_warm(sys.argv[1:])
    except KeyboardInterrupt:  # Ctrl-C before the command was handed over: nothing ran
        sys.stderr.write("sandboxctl: EXECUTION.CANCELLED: interrupted\n")
        os._exit(130)
    if code is None:
        from orchestrator.cli.main import entry as cold_entry

        cold_entry()  # exits
    os._exit(code if code is not None else 125)
