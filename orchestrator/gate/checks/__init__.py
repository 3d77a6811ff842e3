"""Risk checks that read more than a program's options, by the name the program table gives them
(``Program.check``). Interpreters and shells are checked from their table entries alone."""

from __future__ import annotations

from orchestrator.gate.checks import code, files, git, system
from orchestrator.gate.checks.code import interpreter, shell_script
from orchestrator.gate.findings import Check

__all__ = ["CHECKS", "interpreter", "shell_script"]

CHECKS: dict[str, Check] = {**files.CHECKS, **git.CHECKS, **system.CHECKS, **code.CHECKS}
"""Check name (``Program.check``) → the check."""
