"""Text shown to people or machines: control and bidi characters escaped, so a command cannot hide
part of itself from an approver (a carriage return, an ANSI or OSC sequence, a right-to-left
override) nor drive the terminal that reads our output.

The unsafe characters are those of the Unicode categories Cc (C0 and C1 controls, DEL), Cf (format:
bidi overrides and isolates, zero-width characters, tag characters), Cs (lone surrogates: what
undecodable bytes become), Zl and Zp (line and paragraph separators). They are listed below as a
table (Unicode 14, plus later additions) rather than looked up per character: escaping runs over
whole outputs, at the speed of one regular expression. ``tests/unit/test_text.py`` checks the table
against ``unicodedata``.
"""

from __future__ import annotations

import re

# fmt: off
UNSAFE_RANGES: tuple[tuple[int, int], ...] = (
    (0x0000, 0x001F), (0x007F, 0x009F), (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C),
    (0x06DD, 0x06DD), (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x180E, 0x180E),
    (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F), (0xD800, 0xDFFF),
    (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)
# fmt: on


def _char_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return "".join(f"\\U{a:08x}" if a == b else f"\\U{a:08x}-\\U{b:08x}" for a, b in ranges)


_UNSAFE_CLASS = _char_class(UNSAFE_RANGES)
_UNSAFE = re.compile(f"[{_UNSAFE_CLASS}]")
_UNSAFE_OR_BACKSLASH = re.compile(f"[\\\\{_UNSAFE_CLASS}]")
# in a JSON text, tab, LF and CR can only be whitespace between tokens (inside strings they are escaped)
_JSON_UNSAFE = re.compile(f"(?![\\t\\n\\r])[{_UNSAFE_CLASS}]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _python_escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ch == "\\":
        return "\\\\"
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON spells characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def printable(text: str) -> str:
    """``text`` unambiguous on a terminal: unsafe characters as ``\\xNN``/``\\uNNNN`` and ``\\`` as ``\\\\``
    (so what was typed as ``\\x1b`` and a real ESC read differently). For what an approver reads."""
    return _UNSAFE_OR_BACKSLASH.sub(_python_escape, text)


def terminal_safe(text: str) -> str:
    """``text`` with unsafe characters escaped (``\\xNN``/``\\uNNNN``), backslashes left as they are.
    For messages (errors, logs): one line each, nothing a terminal would act on."""
    return _UNSAFE.sub(_python_escape, text)


def json_safe(json_text: str) -> str:
    """A JSON text with every unsafe character inside its strings written as ``\\uXXXX``: still valid
    JSON, the same data once parsed. (Outside strings, valid JSON holds only ASCII punctuation and
    whitespace, which is left alone.)"""
    return _JSON_UNSAFE.sub(_json_escape, json_text)


def has_surrogates(text: str) -> bool:
    """True when ``text`` is not valid Unicode: a lone surrogate, which is what Python makes of bytes
    that are not UTF-8 (argv, environment, file names) and what ``\\udXXX`` escapes in JSON or YAML
    produce. Such text cannot be encoded, so it never gets past the edge."""
    return not text.isascii() and _SURROGATE.search(text) is not None
