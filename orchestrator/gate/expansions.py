"""Expansions that evaluate code.

bash evaluates arithmetic recursively: a variable's value is itself an arithmetic expression, and an
array subscript in it (``a[$(cmd)]``) is expanded, which runs ``cmd``. So ``$((X))``, ``${a[X]}``,
``${S:X}``, ``let X``, ``declare -i v=X``, ``[[ X -eq 1 ]]``, ``${!X}`` (indirection to
``a[$(cmd)]``) and a subscripted name given to a builtin (``read 'a[$(cmd)]'``) run code taken
from the environment; ``${X@P}`` expands a prompt string (``$(…)`` included). They make a command
complex with the reason ``expansion that can evaluate code (KIND)``. Plain ``$X``/``${X}``/
``${X:-d}`` only record the name in ``variables``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from tree_sitter import Node

from orchestrator.gate.shellwords import node_text
from orchestrator.gate.walkstate import WalkState

Parse = Callable[[str, WalkState, int, str | None], list[int]]
"""Parse a command string into the walk (``intent.parse_into``): for subscripts given to builtins."""
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

EVAL_REASON = "expansion that can evaluate code"
EXPANSION_NODES = frozenset({"simple_expansion", "expansion", "arithmetic_expansion", "subscript", "array"})
STATEMENTS = frozenset(
    {"subshell", "compound_statement", "command", "pipeline", "list", "redirected_statement", "negated_command"}
)
NUMBER = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|\d+#[0-9A-Za-z@_]+|\d+)")
NAME_NODES = frozenset({"variable_name", "special_variable_name"})
_ARITH_NAMES = frozenset(
    {"variable_name", "special_variable_name", "simple_expansion", "expansion", "command_substitution", "subscript"}
)
SUBSCRIPTED = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\[(?!\s*(?:[-+]?\d+|[@*])\s*\](?:\+?=|$))")
"""A variable name with a subscript that is not a plain number, ``@`` or ``*``."""
ARITH_TEST_OPERATORS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})


def evaluates(st: WalkState, kind: str) -> None:
    """Code a variable's value can hold runs here: what runs is not on the command line (unseen)."""
    st.blind(f"{EVAL_REASON} ({kind})")


def numeric(node: Node) -> bool:
    return (
        node.type in ("number", "word", "variable_name", "unary_expression")
        and NUMBER.fullmatch(node_text(node).replace(" ", "")) is not None
    )


def arith_uses_names(node: Node) -> bool:
    """Whether an arithmetic expression refers to a variable (whose value bash evaluates too)."""
    stack = list(node.children)
    while stack:
        child = stack.pop()
        t = child.type
        if t in _ARITH_NAMES:
            if t == "variable_name" and NUMBER.fullmatch(node_text(child)):
                continue
            return True
        if t == "word" and not NUMBER.fullmatch(node_text(child)):
            return True
        if t == "do_group":
            continue
        stack.extend(child.children)
    return False


def note_name(node: Node, st: WalkState) -> None:
    name = node_text(node)
    if name == "_" or IDENTIFIER.fullmatch(name):
        st.variables[name] = None


def subscript_evaluates(node: Node) -> bool:
    index = [c for c in node.children if c.is_named and c.type not in NAME_NODES]
    if not index:
        return False
    single = index[0] if len(index) == 1 else None
    return single is None or not (numeric(single) or (single.type == "word" and node_text(single) in ("@", "*")))


def expansion(node: Node, st: WalkState) -> None:
    """Record the variable a ``$X``/``${…}`` expands, or why the expansion can evaluate code."""
    t = node.type
    if t == "simple_expansion":
        for child in node.children:
            if child.type in NAME_NODES:
                note_name(child, st)
        return
    if t == "arithmetic_expansion":
        if arith_uses_names(node):
            evaluates(st, "arithmetic expansion")
        return
    if t == "subscript":
        if subscript_evaluates(node):
            evaluates(st, "array subscript")
        return
    if t == "array":
        # a=([X]=1): an indexed array's subscripts are arithmetic too
        for child in node.children:
            text = node_text(child)
            if text.startswith("[") and "]=" in text:
                index = text[1 : text.index("]=")].strip()
                if not NUMBER.fullmatch(index):
                    evaluates(st, "array subscript")
                    return
        return
    children = node.children
    n = len(children)
    named = False
    for k in range(n):
        child = children[k]
        ct = child.type
        if child.is_named:
            if not named and ct in NAME_NODES:
                named = True
                note_name(child, st)
            elif not named and ct == "subscript":
                named = True
                for part in child.children:
                    if part.type == "variable_name":
                        note_name(part, st)
                        break
            continue
        if ct == "@" and k + 1 < n and children[k + 1].type != "}":
            evaluates(st, "${…@op} transformation")
        elif ct == "!" and k == 1 and n > 2:
            after = children[3].type if n > 3 else "}"
            target = children[2]
            listing = after in ("*", "@") or (
                target.type == "subscript"
                and not subscript_evaluates(target)
                and node_text(target).endswith(("[@]", "[*]"))
            )
            if not listing:
                evaluates(st, "${!…} indirection")
        elif ct == ":":
            for operand in children[k + 1 :]:
                if operand.is_named and not numeric(operand):
                    evaluates(st, "substring offset")
                    break


def note_assignment(node: Node, st: WalkState) -> None:
    for child in node.children:
        if child.type == "variable_name":
            st.assignments[node_text(child)] = None
            return
        if child.type == "subscript":
            for part in child.children:
                if part.type == "variable_name":
                    st.assignments[node_text(part)] = None
                    return
            return


_DECLARES = frozenset({"declare", "typeset", "local"})
_NAME_BUILTINS = frozenset(
    {"declare", "typeset", "local", "export", "readonly", "unset", "read", "mapfile", "readarray", "getopts", "wait"}
    | {"test", "printf", "[", "let"}
)


def builtin_evaluates(words: tuple[str, ...], st: WalkState, depth: int, parse: Parse) -> None:
    """``let``, ``declare -i``/``-n`` and subscripted names given to builtins evaluate code; the
    command substitutions in a literal subscript (``export 'a[$(cmd)]=1'``) run and are analyzed."""
    name = words[0]
    if name not in _NAME_BUILTINS:
        return
    if name == "let":
        evaluates(st, "let")
    elif name in _DECLARES and any(
        w[:1] in "-+" and len(w) > 1 and "=" not in w and ("i" in w or "n" in w) for w in words[1:]
    ):
        evaluates(st, f"{name} -i/-n")
    candidates: Sequence[str] = words[1:]
    if name == "printf":
        candidates = []
        for i in range(1, len(words)):
            w = words[i]
            if w == "-v" and i + 1 < len(words):
                candidates = [words[i + 1]]
                break
            if w.startswith("-v") and len(w) > 2:
                candidates = [w[2:]]
                break
            if not w.startswith("-") or w == "--":
                break
    for word in candidates:
        start = word.find("[")
        end = word.rfind("]")
        if 0 <= start < end and ("$(" in word[start:end] or "`" in word[start:end]):
            parse(f": {word[start + 1 : end]}", st, depth + 1, name)
        if name != "let" and SUBSCRIPTED.match(word.lstrip("\"'")):
            evaluates(st, f"subscripted variable name given to {name}")
