"""Reading shell words: unquoting as bash does, and a guard against a tree-sitter-bash crash."""

from __future__ import annotations

import re

from tree_sitter import Node

from orchestrator.gate.paths import MAX_BRACE_WORDS, expand_braces
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


# --------------------------------------------------------------------------------------------
# where bash makes words the grammar does not see


def unquoted_blank(text: bytes) -> bool:
    """A blank outside quotes, substitutions and escapes: where bash ends a word."""
    if b" " not in text and b"\t" not in text and b"\n" not in text:
        return False
    quote = 0
    nest: list[int] = []  # open ``$(``/``${``/backtick, innermost last
    i = 0
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == 0x5C:  # backslash
            i += 2
            continue
        if quote == 0x27:  # inside '…'
            if ch == 0x27:
                quote = 0
        elif ch == 0x60:  # backtick
            if nest and nest[-1] == 0x60:
                nest.pop()
            else:
                nest.append(0x60)
        elif ch == 0x24 and i + 1 < n and text[i + 1] in (0x28, 0x7B):  # $( ${
            nest.append(text[i + 1])
            i += 1
        elif ch == 0x28 and i and text[i - 1] == 0x3D and not quote:  # =( an array assignment's list
            nest.append(0x28)
        elif nest and ch in (0x29, 0x7D) and nest[-1] == (0x28 if ch == 0x29 else 0x7B):
            nest.pop()
        elif ch == 0x22 and not nest:  # "…" at top level
            quote = 0 if quote else 0x22
        elif ch == 0x27 and not quote and not nest:
            quote = 0x27
        elif ch in (0x20, 0x09, 0x0A) and not quote and not nest:
            return True
        i += 1
    return False


def brace_expanded(
    words: list[str], dynamic: list[bool], sources: list[bytes], st: WalkState
) -> tuple[list[str], list[bool]]:
    """bash expands ``{a,b}`` and ``{1..3}`` in arguments into several words (``rm {-rf,x}`` is
    ``rm -rf x``): the gate reads them expanded; where it cannot, it says so."""
    out_words: list[str] = [words[0]]
    out_dynamic: list[bool] = [dynamic[0]]
    for word, dyn, source in zip(words[1:], dynamic[1:], sources[1:], strict=True):
        text = source.decode("utf-8", "replace")
        if not brace_expression(text):
            out_words.append(word)
            out_dynamic.append(dyn)
            continue
        st.reasons["brace expansion"] = None
        plain = not any(ch in text for ch in "'\"\\$`")  # only the braces made it look dynamic
        expanded = expand_braces(text, MAX_BRACE_WORDS + 1) if plain else []
        if not expanded or len(expanded) > MAX_BRACE_WORDS:
            st.blind("brace expansion the gate cannot expand (quoted or computed parts, or too many words)")
            out_words.append(word)
            out_dynamic.append(dyn)
            continue
        out_words.extend(expanded)
        out_dynamic.extend([False] * len(expanded))
    return out_words, out_dynamic


def brace_expression(text: str) -> bool:
    """An unquoted ``{…}`` with a ``,`` or ``..`` at its own level (not ``${…}``): bash expands it."""
    depth = 0
    found = False
    quote = ""
    i = 0
    opened: list[bool] = []
    dollar = False  # the character before is an unescaped "$" (``${`` is an expansion, ``\${`` is not)
    while i < len(text):
        ch = text[i]
        after_dollar, dollar = dollar, False
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                i += 1
        elif ch == "\\":
            i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "$":
            dollar = True
        elif ch == "{" and not after_dollar:
            depth += 1
            opened.append(False)
        elif ch == "}" and depth:
            depth -= 1
            found = found or opened.pop()
        elif depth and (ch == "," or text.startswith("..", i)):
            opened[-1] = True
        i += 1
    return found


def splice_continuations(command: str) -> str:
    """The text with bash's line continuations removed where bash removes them: not in single quotes,
    ``$'…'`` or comments (checked on bash 5.2). A ``'`` inside ``"$(…)"`` is taken literally here, so
    such a continuation is removed too; the caller only compares, so that errs towards "changed"."""
    out: list[str] = []
    i, n = 0, len(command)
    quote = ""  # "" outside quotes, '"' in double quotes
    word_start = True
    while i < n:
        c = command[i]
        if c == "\\" and i + 1 < n:
            if command[i + 1] != "\n":
                out.append(command[i : i + 2])
                word_start = False
            i += 2
            continue
        if quote:
            quote = "" if c == '"' else quote
        elif c == '"':
            quote = c
        elif c == "'" or (c == "$" and command.startswith("$'", i)):
            start = i + (2 if c == "$" else 1)
            end = _closing_single_quote(command, start, ansi=c == "$")
            out.append(command[i:end])
            i, word_start = end, False
            continue
        elif c == "#" and word_start:
            end = command.find("\n", i)
            end = n if end < 0 else end
            out.append(command[i:end])
            i = end
            continue
        out.append(c)
        word_start = not quote and c in " \t\n;&|()<>"
        i += 1
    return "".join(out)


def _closing_single_quote(command: str, start: int, *, ansi: bool) -> int:
    """The index just past the quote that closes ``'…'`` (``$'…'`` honours ``\\'``), or the end."""
    i = start
    while i < len(command):
        if ansi and command[i] == "\\":
            i += 2
            continue
        if command[i] == "'":
            return i + 1
        i += 1
    return len(command)
