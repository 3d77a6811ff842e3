"""Reading shell words: unquoting as bash does, and a guard against a tree-sitter-bash crash."""

from __future__ import annotations

import re

from tree_sitter import Node

from orchestrator.gate.walkstate import WalkState

# --------------------------------------------------------------------------------------------
# tree-sitter-bash crash guard
#
# tree-sitter-bash 0.25 reads out of bounds (SIGSEGV on Linux) on '{' followed by a 4-byte UTF-8
# character (tree-sitter/tree-sitter-bash#337, open). Before parsing, every character outside the
# BMP is replaced by a distinct BMP private-use (then CJK) character absent from the input; the
# grammar treats both as word characters, and the originals are put back in every word.

SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")
_PLACEHOLDERS = (range(0xE000, 0xF900), range(0x4E00, 0xA000))


class Unparseable(Exception):
    """More distinct non-BMP characters than placeholders."""


def mask(command: str, st: WalkState) -> str:
    taken = set(st.unmask)
    table: dict[int, str] = {}
    reverse = {original: placeholder for placeholder, original in st.unmask.items()}
    candidates = (chr(cp) for block in _PLACEHOLDERS for cp in block)
    for ch in dict.fromkeys(SUPPLEMENTARY.findall(command)):
        placeholder = reverse.get(ch)
        if placeholder is None:
            for candidate in candidates:
                if candidate not in taken and candidate not in command and candidate not in st.reserved:
                    placeholder = candidate
                    break
            else:
                raise Unparseable
            taken.add(placeholder)
            st.unmask[placeholder] = ch
        table[ord(ch)] = placeholder
    return command.translate(table)


def position(data: bytes, row: int, col: int) -> str:
    """1-based line:column (in characters) of a tree-sitter point (column in bytes)."""
    line = data.split(b"\n")[row] if row else data
    return f"{row + 1}:{len(line[:col].decode('utf-8', 'replace')) + 1}"


# --------------------------------------------------------------------------------------------
# unquoting

_WORD_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_DQ_ESCAPE = re.compile(r'\\([$`"\\\n])')
_ANSI_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.DOTALL)
_ANSI_SIMPLE = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
GLOB_IN_WORD = re.compile(r"(?<!\\)[*?\[{]")


def _unescape_word_match(m: re.Match[str]) -> str:
    ch = m.group(1)
    return "" if ch == "\n" else ch


def unescape_word(text: str) -> str:
    return _WORD_ESCAPE.sub(_unescape_word_match, text) if "\\" in text else text


def unescape_dq(text: str) -> str:
    return _DQ_ESCAPE.sub(_unescape_word_match, text) if "\\" in text else text


def _ansi_match(m: re.Match[str]) -> str:
    esc = m.group(1)
    head = esc[0]
    if len(esc) == 1:
        if head in _ANSI_SIMPLE:
            return _ANSI_SIMPLE[head]
        if head in "01234567":
            return chr(int(head, 8))
        return "\\" + esc
    if head in "xuU":
        code = int(esc[1:], 16)
        if 0xD800 <= code <= 0xDFFF:
            return "\ufffd"
        return chr(code) if code <= 0x10FFFF else "\\" + esc
    if head == "c":
        return chr(ord(esc[1]) & 0x1F)
    return chr(int(esc, 8) & 0xFF)


def unescape_ansi(text: str) -> str:
    return _ANSI_ESCAPE.sub(_ansi_match, text) if "\\" in text else text


def node_text(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""
