"""Regular expressions for an *unfinished* match at the end of a text: what a streaming redactor holds back.

A pattern is described as a sequence of parts, each a pair (the whole part, a proper prefix of it; the
prefix may be empty). :func:`unfinished` builds a regex that matches, up to the end of the text, the
beginning of a match of the parts in order: text that more text could turn into a match, or a complete
match that more text could still change (a longer run, a look-ahead that has not seen its byte). Group
``s`` starts where the secret itself would start, if the text reaches that far.

The parts are written next to each pattern in :mod:`orchestrator.results.redact`; they may accept more than
the pattern would (that only holds back a little more), never less (that would let a secret out).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

Part = tuple[bytes, bytes]
NEVER = rb"(?!)"


def _prefixes(text: bytes) -> bytes:
    """A non-empty proper prefix of ``text``, as a regex (``NEVER`` for a single byte)."""
    inner = b""
    for index in reversed(range(len(text) - 1)):
        char = re.escape(text[index : index + 1])
        inner = char + (b"(?:" + inner + b")?" if inner else b"")
    return inner or NEVER


def literal(text: bytes) -> Part:
    prefix = b"(?:" + _prefixes(text) + b")?" if len(text) > 1 else b""
    return re.escape(text), prefix


def first(text: bytes) -> Part:
    """A literal the match starts with: its prefix is never empty (a search can skip ahead to it)."""
    return re.escape(text), _prefixes(text)


def alternatives(*texts: bytes) -> Part:
    whole = b"(?:" + b"|".join(re.escape(t) for t in texts) + b")"
    prefixes = b"|".join(_prefixes(t) for t in texts if len(t) > 1)
    prefix = b"(?:" + prefixes + b")?" if prefixes else b""
    return whole, prefix


def optional(text: bytes) -> Part:
    return b"(?:" + re.escape(text) + b")?", b"(?:" + _prefixes(text) + b")?"


def run(char_class: bytes, least: int, most: int | None = None) -> Part:
    """``least`` to ``most`` characters of a class (no upper bound when ``most`` is None)."""
    upper = b"" if most is None else str(most).encode()
    whole = char_class + b"{" + str(least).encode() + b"," + upper + b"}"
    prefix = char_class + b"{0," + str(least - 1).encode() + b"}" if least > 1 else b""
    return whole, prefix


def free(regex: bytes) -> Part:
    """A part whose only proper prefix to consider is the empty one: every beginning of its matches is itself
    a match (``[ \\t]*``, an optional byte), or it is one byte long, or zero-width (an assertion)."""
    return regex, b""


def unfinished(parts: Sequence[Part], *, secret: int, flags: int = 0) -> re.Pattern[bytes]:
    """The regex for an unfinished match of ``parts``; group ``s`` from part ``secret`` on. The whole of a
    part is tried before its prefix, so ``s`` takes part whenever the text can reach it."""
    pattern = b""
    for index in reversed(range(len(parts))):
        whole, prefix = parts[index]
        body = whole + pattern + b"|" + prefix
        pattern = (b"(?P<s>" if index == secret else b"(?:") + body + b")"
    return re.compile(pattern + rb"\Z", flags)
