"""THE program table: what the gate knows about each program, and the one scanner that reads them.

Every analyzer (command patterns, wrapper unwrapping, risk, visibility) looks a program up here with
:func:`lookup` and reads its command line with :func:`scan`. A program that is in no table is
*opaque*: the gate does not know whether it runs its operands.

The entries live by family: ``wrappers`` (programs that run another command: privilege, resources,
architecture), ``launchers`` (tracing, environment, multiplexers, dynamic loaders, runners, shell
builtins),
``interpreters`` (shells, interpreters, awk, sed), ``git``, ``tools`` (everything else the gate reads).
"""

from __future__ import annotations

import functools
import re

from orchestrator.gate.programs import git, interpreters, launchers, tools, wrappers
from orchestrator.gate.programs.model import Command, Family, Locate, Opt, Program, Runs, Takes
from orchestrator.gate.programs.scanner import NUMERIC, UNKNOWN, Hit, Scan, resolve_long, scan

__all__ = [
    "NUMERIC",
    "PROGRAMS",
    "SHELL",
    "UNKNOWN",
    "Command",
    "Family",
    "Hit",
    "Locate",
    "Opt",
    "Program",
    "Runs",
    "Scan",
    "Takes",
    "is_shell",
    "lookup",
    "program_name",
    "resolve_long",
    "scan",
]

SHELL = interpreters.SHELL

PROGRAMS: tuple[Program, ...] = (*wrappers.ALL, *launchers.ALL, *interpreters.ALL, git.GIT, *tools.ALL)
"""Every entry of the table."""


def _by_name() -> dict[str, Program]:
    out: dict[str, Program] = {}
    for program in PROGRAMS:
        for name in program.names:
            if name in out:
                raise ValueError(f"program table: {name!r} is listed twice")
            out[name] = program
    return out


_BY_NAME = _by_name()
_PATTERNS: tuple[tuple[re.Pattern[str], Program], ...] = (
    *((re.compile(pattern), program) for pattern, program in interpreters.PATTERNS),
    *((re.compile(pattern), program) for pattern, program in tools.PATTERNS),
    (re.compile(launchers.LOADER_NAMES), launchers.LOADERS[0]),
)


@functools.lru_cache(maxsize=4096)
def lookup(name: str) -> Program | None:
    """The entry for a program's basename (``rm``, ``python3.11``, ``ld-linux-x86-64.so.2``), or None
    when the program is opaque to the gate."""
    found = _BY_NAME.get(name)
    if found is not None:
        return found
    for pattern, program in _PATTERNS:
        if pattern.fullmatch(name):
            return program
    return None


def program_name(word: str) -> str:
    """Basename of a command word with quotes and backslashes removed: ``/bin/rm`` → ``rm``, ``\\rm`` → ``rm``."""
    if "'" in word or '"' in word or "\\" in word:
        word = word.replace("\\", "").replace("'", "").replace('"', "")
    return word.rsplit("/", 1)[-1]


def is_shell(name: str) -> bool:
    return lookup(name) is SHELL
