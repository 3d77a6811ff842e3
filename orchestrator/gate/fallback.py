"""Best-effort command words of text the gate could not analyze, for matching the denylist on them.

What the parser could not read, what was cut off at the nesting limit, a word that holds a command
string: split like a shell would at ``; & | ( ) < >``, backticks and newlines, unquoted, and again
inside any word that is itself a command string (``sh -c 'rm -rf x'``, ``--to-command=rm -rf x``).
Never used to allow anything: only to deny what is visibly denied.
"""

from __future__ import annotations

import re
import shlex

from orchestrator.gate.paths import expand_braces

MAX_DEPTH = 8
"""How many quoting levels deep command strings inside words are split again."""

_SEPARATORS = frozenset(";&|()<>")
_MAX_SEGMENT_CHARS = 64 * 1024


def segments(text: str, depth: int = 0) -> list[tuple[str, ...]]:
    """Best-effort command words of text the parser could not read: split like a shell would at
    ``; & | ( ) < >``, backticks and newlines, and again inside quoted words (a quoted word may be a
    command string: ``sh -c 'rm -rf x'``). Only for matching the denylist on what is visible."""
    out = _split_segments(text[:_MAX_SEGMENT_CHARS])
    if depth < MAX_DEPTH:
        for words in list(out):
            for word in words:
                out.extend(inside(word, depth + 1))
    return out


_OPTION_OR_NAME = re.compile(r"-{0,2}[\w.-]+")
"""What precedes ``=`` in ``--to-command=CMD`` or ``NAME=VALUE``."""


def inside(word: str, depth: int) -> list[tuple[str, ...]]:
    """The command words inside a word that holds a command string (``'rm -rf x'``, ``--to-command=rm -rf x``)."""
    head, eq, tail = word.partition("=")
    value = tail if eq and _OPTION_OR_NAME.fullmatch(head) else word
    if len(value) > 2 and any(ch in value for ch in " \t\n;&|'\""):
        return segments(value, depth)
    return [(value,)] if value != word else []


def _split_segments(text: str) -> list[tuple[str, ...]]:
    text = text.replace("`", " ; ").replace("\n", " ; ")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        tokens = list(lexer)
    except ValueError:
        tokens = text.split()
    out: list[tuple[str, ...]] = []
    current: list[str] = []
    for token in tokens:
        if token and set(token) <= _SEPARATORS:
            if current:
                out.append(tuple(current))
            current = []
        elif token.startswith("$("):
            if current:
                out.append(tuple(current))
            current = [token[2:]] if token[2:] else []
        elif "{" in token and ("," in token or ".." in token):
            current.extend(expand_braces(token))  # ``{sudo,id}`` is ``sudo id`` for bash
        else:
            current.append(token)
    if current:
        out.append(tuple(current))
    return out
