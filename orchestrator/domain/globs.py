"""Shell-style globs from configuration (``fnmatch``), checked when the file is loaded, compiled once.

``fnmatch`` itself never refuses a glob: an unclosed ``[`` silently becomes a literal and a reversed
range ``[z-a]`` a class that matches nothing. In a deny rule either means a rule that quietly never
fires, so both are refused here, at load time, with the reason (the caller names file, line, field).
"""

from __future__ import annotations

import fnmatch
import re

from orchestrator.domain.text import has_surrogates

MAX_GLOB_LENGTH = 4096


def _bracket_end(glob: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at ``start``, or -1 (fnmatch's own reading)."""
    i = start + 1
    if i < len(glob) and glob[i] == "!":
        i += 1
    if i < len(glob) and glob[i] == "]":
        i += 1  # a ']' first in the class is a member
    return glob.find("]", i)


def _empty_range(body: str) -> str | None:
    """The first range ``x-y`` with x after y in a class body (without its ``!``), or None. (Never
    shown: a config's values stay out of messages.)"""
    i = 0
    while i + 2 < len(body):
        if body[i + 1] == "-" and body[i] > body[i + 2]:
            return body[i : i + 3]
        i += 3 if body[i + 1] == "-" else 1
    return None


def glob_problem(glob: str) -> str | None:
    """Why ``glob`` cannot be used as a glob, or None when it can."""
    if not glob:
        return "a glob must not be empty"
    if len(glob) > MAX_GLOB_LENGTH:
        return f"a glob may have at most {MAX_GLOB_LENGTH} characters"
    if "\x00" in glob or has_surrogates(glob):
        return "a glob must be valid text without NUL characters"
    i = 0
    while i < len(glob):
        if glob[i] == "[":
            end = _bracket_end(glob, i)
            if end < 0:
                return f"unclosed '[' at character {i + 1} (write [[] for a literal '[')"
            body = glob[i + 1 : end]
            reversed_range = _empty_range(body[1:] if body.startswith("!") else body)
            if reversed_range is not None:
                return f"the class at character {i + 1} has a range whose ends are reversed: it matches nothing"
            i = end
        i += 1
    try:
        re.compile(fnmatch.translate(glob))
    except re.error as err:  # pragma: no cover - fnmatch escapes what it does not understand
        return f"not a valid glob: {err}"
    return None


def check_glob(glob: str) -> str:
    """``glob`` when it is usable; ValueError (for a pydantic validator) when not."""
    problem = glob_problem(glob)
    if problem is not None:
        raise ValueError(problem)
    return glob


def compile_glob(glob: str) -> re.Pattern[str]:
    """The regular expression ``fnmatch.fnmatchcase`` would use for ``glob`` (case-sensitive, whole string)."""
    return re.compile(fnmatch.translate(check_glob(glob)))
