"""Facts about a command string and its parse tree, read before (or beside) the walk: where the parse
failed, whether the string is only literal words, readings where bash and the grammar differ."""

from __future__ import annotations

import re
import shlex

from tree_sitter import Node

from orchestrator.gate.expansions import IDENTIFIER
from orchestrator.gate.shellwords import node_text, position


def error_position(root: Node, data: bytes) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            return position(data, *node.start_point)
        if node.has_error:
            stack.extend(reversed(node.children))
    return position(data, *root.end_point)


_PLAIN = re.compile(r"""[ \t]*(?:(?:[\w@%+=:,./-]|'[^']*'|"[^"$`\\]*")+(?:[ \t]+|$))*""", re.ASCII)
"""Only literal words: unquoted characters shlex leaves unquoted, '…' and "…" without $ ` \\."""
_ASSIGNMENT_START = re.compile(r"[ \t]*[A-Za-z_][A-Za-z0-9_]*\+?=")
_RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done"}
    | {"function", "in", "coproc", "time", "!", "{", "}", "[[", "]]"}
)


def plain_words(command: str) -> tuple[str, ...] | None:
    """The words of a string made only of literal words (the shape ``shlex.join`` produces), or None.

    For these bash's reading is unambiguous, so they are a second opinion where tree-sitter-bash has
    grammar gaps (it rejects ``l%`` and ``a ==``, and reads ``7=`` as an assignment)."""
    if _PLAIN.fullmatch(command) is None or _ASSIGNMENT_START.match(command):
        return None
    words = tuple(shlex.split(command))
    if not words or words[0] in _RESERVED:
        return None
    return words


def bad_assignment(root: Node) -> bool:
    """A leading 'assignment' whose name is not an identifier (``7=x``): bash runs it as a command."""
    for child in root.children:
        if not child.is_named or child.type == "comment":
            continue
        if child.type in ("command", "variable_assignments"):
            nodes = [c for c in child.children if c.type == "variable_assignment"]
        elif child.type == "variable_assignment":
            nodes = [child]
        else:
            return False
        for node in nodes:
            name = node.children[0] if node.child_count else None
            if name is not None and name.type == "variable_name" and not IDENTIFIER.fullmatch(node_text(name)):
                return True
        return False
    return False


TIGHT_CONTINUATION = re.compile(r"(?:^|(?<=[^ \t\\]))(?<!\\)(?:\\\\)*\\\n|(?<=\n)\\\n")
"""A line continuation right after a non-blank character, or at the start of a line."""


def line_col(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    return f"{line}:{offset - (text.rfind(chr(10), 0, offset) + 1) + 1}"
