"""Shell intent from a real parser (tree-sitter-bash): what a command string or argv would run.

Only meaning is derived here; nothing is executed and what runs is exactly what was asked.

``analyze_shell`` parses a shell string and walks the tree once. Every simple command found anywhere
(pipelines, lists, subshells, groups, command/process substitutions, control-flow bodies, function
bodies, here-document bodies) lands in ``commands`` as its words, in source order, a command before the
commands substituted into its words. Words are unquoted (``'x'``, ``"x"``, ``$'x'``, backslashes); a
word that contains an expansion (``$VAR``, ``${…}``, ``$(…)``, backticks, ``$((…))``) is kept as its
source text. Globs and ``~`` in arguments are kept literally.

A command is complex when it is anything but one plain command: pipelines, ``&& || ; &``, newlines
between commands, subshells, ``{ }`` groups, command/process substitution anywhere, redirections,
here-documents/strings, control flow, function definitions, ``[[ ]]``/``(( ))``, leading variable
assignments, an expansion or glob in the command word, a wrapper that runs another command, an
expansion that can evaluate code (below), or a parse error (``parse_ok`` is then False and
``commands`` is best effort). A statement where a word should be (``coproc (rm -rf /)``) is walked:
its commands are found.

Expansions that evaluate code - reason ``expansion that can evaluate code (KIND)``: bash evaluates
arithmetic recursively, so a variable whose value is ``a[$(cmd)]`` runs ``cmd`` when it is used in
``$((X))``/``$[X]``/``((X))``/``for ((…))``, as an array subscript (``${a[X]}``, ``a[X]=1``), as a
substring offset (``${S:X}``), through ``let``, ``declare``/``typeset``/``local`` ``-i``/``-n``,
an arithmetic comparison in ``[[ ]]`` (``-eq -ne -lt -le -gt -ge``), an indirection ``${!X}``, or a
subscripted name given to a builtin (``read``, ``printf -v``, ``unset``, ``export``, ``declare``,
``mapfile``, ``getopts``, ``wait``, ``test -v``/``[ -v ]``: ``read 'a[$(cmd)]'``); ``${X@P}``
expands a prompt string (``$(…)`` included), and every ``${X@op}`` transformation is counted.
Literal numbers (``$((1+2))``, ``${a[1]}``, ``${S:1:2}``), ``${a[@]}``, ``${!prefix*}`` are not.
The command substitutions of a literal subscript given to such a builtin are parsed and found
(``export 'a[$(rm -rf /)]=1'``).

Wrappers: every command is looked up in the program table (``gate.programs``, on the basename of
argv[0], so ``/usr/bin/env`` counts) and ``gate.unwrap`` finds what it runs there: after its options
(``nice``, ``timeout DURATION``, ``sudo``, ``env NAME=VALUE``, ``setpriv``, ``prlimit``, the dynamic
loader…), after ``--`` (``capsh``), joined into a shell string (``eval``, ``watch``, ``parallel``),
a shell's ``-c`` operand, ``find -exec … ;``, or an option's value (``su -c``, ``tar
--to-command``, ``git -c core.pager=…``, ``ssh -o ProxyCommand=…``). The wrapper's own words AND the
command(s) it runs are in ``commands``; the inner command is unwrapped again (bounded to
``MAX_WRAPPER_DEPTH`` levels) and the reason says "wrapper 'NAME' runs another command". A here-
document or here-string without expansions given to a shell that reads its input is parsed as what
the shell runs. ``ssh HOST CMD`` is not unwrapped (the command runs elsewhere).

What the gate cannot see is listed in ``unseen`` (see ``ShellAnalysis.unseen``): a parse failure,
nesting past the limit, a computed program name, a command string with an expansion, code in a
language the gate does not read (``python -c``; awk and sed programs are read), code a shell or
interpreter reads from its input, an option the table does not know in front of a wrapped command.
Words seen but not analyzed (past the limit, after such an option, in text that did not parse) are
kept in ``unanalyzed``; programs in no table, and wrappers' option values, in ``opaque``.

Beyond the four fields of the brief, an analysis carries facts the risk analyzer needs:
``redirects`` ((operator, target) pairs; for a here-document the target is its body),
``flows`` ((i, j): output of ``commands[i]`` feeds ``commands[j]``: pipes, substitutions into the
words/redirects of a command), ``wraps`` ((i, j): wrapper ``commands[i]`` runs ``commands[j]``) and
``self_spawning`` (names of functions whose body calls the function itself twice, or once in a
pipeline or in the background: fork bombs), ``variables`` (names expanded in arguments, redirect
targets, here-documents and assignment values: the request's env may hold their values) and
``assignments`` (names assigned by ``A=1 cmd``/``A=1``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from orchestrator.gate.analysis import ScriptSource, ShellAnalysis
from orchestrator.gate.expansions import (
    ARITH_TEST_OPERATORS,
    EVAL_REASON,
    EXPANSION_NODES,
    STATEMENTS,
    SUBSCRIPTED,
    arith_uses_names,
    builtin_evaluates,
    evaluates,
    expansion,
    note_assignment,
    numeric,
)
from orchestrator.gate.fallback import inside, segments
from orchestrator.gate.programs import SHELL, lookup, program_name
from orchestrator.gate.scripts import reads_code_from_input, script_operand, stdin_script
from orchestrator.gate.shellwords import (
    GLOB_IN_WORD,
    SUPPLEMENTARY,
    Unparseable,
    brace_expanded,
    mask,
    node_text,
    position,
    splice_continuations,
    unescape_ansi,
    unescape_dq,
    unescape_word,
    unquoted_blank,
)
from orchestrator.gate.source_text import (
    TIGHT_CONTINUATION,
    bad_assignment,
    error_position,
    line_col,
    plain_words,
)
from orchestrator.gate.unwrap import Argv, locate
from orchestrator.gate.visibility import computed_options, finish
from orchestrator.gate.walkstate import FROM_FILE, WalkState

__all__ = [
    "CONTROL_REASON",
    "EVAL_REASON",
    "MAX_WRAPPER_DEPTH",
    "ScriptSource",
    "ShellAnalysis",
    "analyze_argv",
    "analyze_shell",
]

MAX_WRAPPER_DEPTH = 8
"""How many wrappers deep inner commands are still unwrapped."""
_MAX_NESTING = 100
"""Tree depth (plus wrapper levels) walked before giving up: keeps recursion bounded."""
_CACHE_MAX_CHARS = 4096

_LANGUAGE = Language(tree_sitter_bash.language())
_PARSER = Parser(_LANGUAGE)

COMPUTED_REASON = "program name is computed at run time"
TOO_DEEP = "nesting too deep"
WRAPPERS_TOO_DEEP = "wrapper nesting too deep"


# --------------------------------------------------------------------------------------------
# words

# --------------------------------------------------------------------------------------------
# words

_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


class _Subs:
    """Commands found in substitutions inside one command's words: they feed it (or it feeds them)."""

    __slots__ = ("extra", "into", "out_of")

    def __init__(self) -> None:
        self.into: list[int] = []
        self.out_of: list[int] = []
        self.extra: list[str] = []
        """Words the grammar gave a redirection beyond its target (``rm >/dev/null -rf /``): bash
        passes them to the command."""


def _scan(node: Node, st: WalkState, depth: int, subs: _Subs) -> None:
    """Walk the substitutions inside an expansion or word part."""
    if depth > _MAX_NESTING:
        st.blind(TOO_DEEP)
        return
    t = node.type
    if t in _SUBSTITUTIONS:
        found = _visit(node, st, depth + 1)
        first = node.children[0].type if node.child_count else ""
        (subs.out_of if first == ">(" else subs.into).extend(found)
        return
    if t in EXPANSION_NODES:
        expansion(node, st)
    elif t in STATEMENTS:
        # a statement where a word should be (``coproc (rm -rf /)``): its commands run
        subs.into.extend(_visit(node, st, depth + 1))
        return
    elif t in _OPERAND_LEAVES and node.named_child_count == 0:
        text = node_text(node)
        if _SUBSTITUTION_MARK.search(text) and (t != "raw_string" or _quotes_are_plain_characters(node)):
            subs.into.extend(_operand_substitutions(text[1:-1] if t == "raw_string" else text, st, depth))
        return
    for child in node.children:
        if child.is_named:
            _scan(child, st, depth + 1, subs)


def _operand_substitutions(text: str, st: WalkState, depth: int) -> list[int]:
    """``${PWD#$(cmd)}``, ``${x:-<(cmd)}``, ``$(( '$(cmd)' ))``: the grammar keeps an operand as a leaf,
    yet bash expands it (and runs what it substitutes): read it as the words of a command."""
    st.reasons["command substitution"] = None
    return _parse_into(f": {text}", st, depth + 1, "${…}")


_OPERAND_LEAVES = frozenset({"regex", "word", "extglob_pattern", "string_content", "raw_string"})
_PLAIN_QUOTE_CONTEXTS = frozenset({"arithmetic_expansion", "expansion", "string", "c_style_for_statement"})


def _quotes_are_plain_characters(node: Node) -> bool:
    """``'…'`` inside ``$(( ))``, ``(( ))`` or a double-quoted ``${…}`` is no quoting for bash: a
    substitution in it runs."""
    parent = node.parent
    for _ in range(32):
        if parent is None or parent.type in ("command", "program", "variable_assignment"):
            return False
        if parent.type in _PLAIN_QUOTE_CONTEXTS:
            return True
        if parent.type == "compound_statement" and parent.child_count and parent.children[0].type == "((":
            return True
        parent = parent.parent
    return True


_EXPANSION_CUT = re.compile(rb"\$[A-Za-z0-9_{(@*#?$!-]")


def _unescaped_at(src: bytes, at: int) -> bool:
    """The character at ``at`` is not escaped by backslashes before it."""
    before = src[:at]
    return (len(before) - len(before.rstrip(b"\\"))) % 2 == 0


_REGEX_SWALLOWED = re.compile(r"[;&|<>()\s]")
_ASSIGNMENT_TILDE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=(?:[^:]*:)*~")
_SUBSTITUTION_MARK = re.compile(r"\$\(|`|[<>]\(|\$\{")


def _literal(node: Node, st: WalkState, depth: int, subs: _Subs) -> str | None:
    """The unquoted value of a word node, or None if it contains an expansion."""
    t = node.type
    # a "regex" outside [[ ]] is the grammar misreading a word after "==" (``printf == ==\}``): bash
    # reads a word there, unquoting it like any other
    if t == "regex" and _REGEX_SWALLOWED.search(node_text(node)):
        # the grammar's "regex" after "==" read on over an operator (``== a:; '}b' g``): bash ends the
        # word there and runs what follows as another command
        st.parse_ok = False
        st.blind(f"parse error at {position(st.src, *node.start_point)}")
        return None
    if t in ("word", "number", "regex"):
        text = node_text(node)
        if _BLANK_IN_WORD.search(text):
            # the grammar read blanks into one word (``{ {``): bash splits there; unreliable
            st.parse_ok = False
            st.blind(f"parse error at {position(st.src, *node.start_point)}")
        if _ASSIGNMENT_TILDE.match(text):
            # bash expands ~ after the = (and after each :) of a word that looks like an assignment, even
            # as an argument (``dd if=~/x``): the word is HOME's value there, as ``$HOME`` would be
            st.variables["HOME"] = None
        return unescape_word(text)
    if t == "raw_string":
        return node_text(node)[1:-1]
    if t in ("string", "translated_string"):
        dynamic = False
        for child in node.children:
            if child.is_named and child.type != "string_content":
                dynamic = True
                _scan(child, st, depth + 1, subs)
        if dynamic:
            return None
        text = node_text(node)
        return unescape_dq(text[2:-1] if text.startswith("$") else text[1:-1])
    if t == "ansi_c_string":
        return unescape_ansi(node_text(node)[2:-1])
    if t == "concatenation":
        parts: list[str] = []
        dynamic = False
        for child in node.children:
            after = child.next_sibling
            if (
                child.type == "$"
                and after is not None
                and after.type == "string"
                and after.start_byte == child.end_byte
            ):
                continue  # ``$"…"``: a translated string (bash reads the text, the ``$`` is no character)
            value = _literal(child, st, depth + 1, subs)
            if value is None:
                dynamic = True
            else:
                parts.append(value)
        return None if dynamic else "".join(parts)
    if t == "variable_assignment":
        # declaration arguments (export A=1): NAME=VALUE
        parts = []
        dynamic = False
        for child in node.children:
            if child.type == "=":
                parts.append("=")
            elif child.type in ("variable_name", "subscript"):
                parts.append(node_text(child))
                if child.type == "subscript":
                    _scan(child, st, depth + 1, subs)
            else:
                value = _literal(child, st, depth + 1, subs)
                if value is None:
                    dynamic = True
                else:
                    parts.append(value)
        return None if dynamic else "".join(parts)
    if not node.is_named:
        return unescape_word(node_text(node))  # an unnamed token in a word (``''\\$``): as bash unquotes it
    if t in ("variable_name", "word_content"):
        return node_text(node)
    # expansions, substitutions, brace expressions, anything else: dynamic
    _scan(node, st, depth, subs)
    return None


def _has_glob(node: Node) -> bool:
    """An unquoted glob/brace character in a command word (pathname or brace expansion)."""
    t = node.type
    if t == "word":
        return GLOB_IN_WORD.search(node_text(node)) is not None
    if t == "concatenation":
        return any(_has_glob(child) for child in node.children)
    return False


# --------------------------------------------------------------------------------------------
# tree walk

_CONTROL_FLOW = {
    "for_statement": None,  # for / select: keyword is the first child
    "c_style_for_statement": "control flow (for)",
    "while_statement": None,  # while / until
    "if_statement": "control flow (if)",
    "case_statement": "control flow (case)",
}
_SIMPLE_REASONS = {
    "negated_command": "negation (!)",
    "variable_assignment": "variable assignment",
    "variable_assignments": "variable assignment",
}


def _visit(node: Node, st: WalkState, depth: int) -> list[int]:
    """Record the commands inside ``node``; return their indices."""
    t = node.type
    if t == "command":
        return _command(node, st, depth)
    if depth > _MAX_NESTING:
        st.blind(TOO_DEEP)
        return []
    handler = _HANDLERS.get(t)
    if handler is not None:
        return handler(node, st, depth)
    if t == "comment":
        return []
    if t in _CONTROL_FLOW:
        reason = _CONTROL_FLOW[t]
        if reason is None:
            keyword = node.children[0].type if node.child_count else "for"
            reason = f"control flow ({keyword})"
        st.reasons[reason] = None
        if t == "c_style_for_statement" and arith_uses_names(node):
            evaluates(st, "arithmetic for")
        variable = node.child_by_field_name("variable") if t == "for_statement" else None
        if variable is not None:
            st.assignments[node_text(variable)] = None  # ``for BASH_ENV in …``
    elif t in _SIMPLE_REASONS:
        st.reasons[_SIMPLE_REASONS[t]] = None
        if t == "variable_assignment":
            note_assignment(node, st)
    elif t in EXPANSION_NODES:
        expansion(node, st)
    elif t == "raw_string" and _quotes_are_plain_characters(node):
        text = node_text(node)[1:-1]
        return _operand_substitutions(text, st, depth) if _SUBSTITUTION_MARK.search(text) else []
    out: list[int] = []
    for child in node.children:
        if child.is_named:
            out += _visit(child, st, depth + 1)
    return out


def _container(node: Node, st: WalkState, depth: int) -> list[int]:
    """A statement sequence: program, subshell, group, do-group, substitution body."""
    t = node.type
    if t == "subshell":
        st.reasons["subshell"] = None
    elif t == "compound_statement":
        first = node.children[0].type if node.child_count else "{"
        st.reasons["arithmetic command" if first == "((" else "command group ({ })"] = None
        after = st.src[node.start_byte + 1 : node.start_byte + 2]
        if first == "{" and after not in (b" ", b"\t", b"\n", b""):
            # ``{sudo,id}``: bash opens a group only with ``{`` and a blank; this is a word (brace-expanded)
            _skipped(node, st)
        if first == "((" and arith_uses_names(node):
            evaluates(st, "arithmetic command")
    elif t == "command_substitution":
        st.reasons["command substitution"] = None
    elif t == "process_substitution":
        st.reasons["process substitution"] = None
    out: list[int] = []
    seen_statement = False
    separator = ""
    previous_end = -1
    for child in node.children:
        if previous_end >= 0 and child.start_byte - previous_end > 1 and st.src:
            gap = st.src[previous_end : child.start_byte].replace(b"\\\n", b"")
            if gap.strip(b" \t\n"):
                _skipped(child, st)  # text the grammar dropped between statements (``x \  ;``)
        previous_end = child.end_byte
        if child.is_named:
            if child.type == "comment":
                continue
            if child.type == "ERROR":
                out += _visit(child, st, depth + 1)
                continue
            if seen_statement:
                if separator == ";":
                    st.reasons["command list (;)"] = None
                elif not separator:
                    st.reasons["newline-separated commands"] = None
            out += _visit(child, st, depth + 1)
            seen_statement = True
            separator = ""
        else:
            ct = child.type
            if ct == ";":
                separator = ";"
            elif ct == "&":
                separator = "&"
                st.bg += 1
                st.reasons["background job (&)"] = None
            elif ct in _CASE_TERMINATORS and node.type != "case_item":
                # ``;;`` outside a case: bash refuses the whole string (the grammar lets it pass)
                st.parse_ok = False
                st.blind(f"parse error at {position(st.src, *child.start_point)}")
    return out


_CASE_TERMINATORS = frozenset({";;", ";&", ";;&"})
_BLANK_IN_WORD = re.compile(r"(?<!\\)[ \t\n]")


def _pipeline(node: Node, st: WalkState, depth: int) -> list[int]:
    st.reasons["pipeline"] = None
    st.pipes += 1
    out: list[int] = []
    previous: list[int] = []
    for child in node.children:
        if not child.is_named or child.type == "comment":
            continue
        found = _visit(child, st, depth + 1)
        st.flows.extend((a, b) for a in previous for b in found)
        previous = found
        out += found
    return out


def _list(node: Node, st: WalkState, depth: int) -> list[int]:
    # left-nested (a && b || c == list(list(a && b) || c)): flatten without recursion
    chain: list[Node] = []
    operators: list[str] = []
    current: Node | None = node
    while current is not None and current.type == "list":
        children = current.children
        right: list[Node] = []
        left: Node | None = None
        for i, child in enumerate(children):
            if child.is_named:
                if left is None and i == 0:
                    left = child
                else:
                    right.append(child)
            elif child.type in ("&&", "||"):
                operators.append(child.type)
        chain[:0] = right
        current = left
    if current is not None:
        chain.insert(0, current)
    for op in reversed(operators):
        st.reasons[f"command list ({op})"] = None
    out: list[int] = []
    for child in chain:
        if child.type != "comment":
            out += _visit(child, st, depth + 1)
    return out


def _redirected(node: Node, st: WalkState, depth: int) -> list[int]:
    body: list[int] = []
    subs = _Subs()
    given: _Input | None = None
    head: int | None = None
    for child in node.children:
        if child.type in _REDIRECTS:
            given = _redirect(child, st, depth + 1, subs) or given
        elif child.is_named and child.type != "comment":
            found = _visit(child, st, depth + 1)
            if head is None and found and child.type == "command":
                head = found[0]
            body += found
    if given is not None and head is not None:
        body += _feed(head, given.text, st, depth)
    _words_after_redirect(st, head, subs, node)
    st.flows.extend((s, b) for s in subs.into for b in body)
    st.flows.extend((b, s) for s in subs.out_of for b in body)
    return body + subs.into + subs.out_of


def _words_after_redirect(st: WalkState, head: int | None, subs: _Subs, node: Node) -> None:
    """Words after a redirection's target belong to the command for bash; the grammar gave them to the
    redirection: not read as the command's, so unseen (and matched against the denylist with it)."""
    if not subs.extra:
        return
    st.parse_ok = False
    st.blind(f"words after a redirection at {position(st.src, *node.start_point)}: cannot be analyzed reliably")
    st.unanalyzed.append((*(st.commands[head] if head is not None else ()), *subs.extra))


class _Input(NamedTuple):
    """What a here-document or here-string gives a command to read; None when it holds expansions;
    ``FROM_FILE`` for ``< FILE``."""

    text: str | None


_QUOTE_CHARS = re.compile(r"""['"\\]""")


def _redirect(node: Node, st: WalkState, depth: int, subs: _Subs) -> _Input | None:
    t = node.type
    if t == "heredoc_redirect":
        st.reasons["here-document"] = None
        op = "<<"
        body = ""
        quoted = False
        delimiter = ""
        for child in node.children:
            ct = child.type
            if ct in ("<<", "<<-"):
                op = ct
            elif ct == "heredoc_start":
                quoted = _QUOTE_CHARS.search(node_text(child)) is not None
                delimiter = _QUOTE_CHARS.sub("", node_text(child))
            elif ct == "heredoc_body":
                body = node_text(child)
                _scan(child, st, depth + 1, subs)
            elif ct in _REDIRECTS:
                _redirect(child, st, depth + 1, subs)
            elif child.is_named and ct not in ("heredoc_start", "heredoc_end"):
                value = _literal(child, st, depth + 1, subs)
                subs.extra.append(node_text(child) if value is None else value)
        st.redirects.append((op, body))
        lines = body.split("\n")
        if delimiter and any((line.lstrip("\t") if op == "<<-" else line) == delimiter for line in lines[:-1]):
            # bash ends the here-document at the first line that is its delimiter (quotes removed:
            # ``<<"$E"`` ends at ``$E``); the grammar read on, so what follows was not read as commands
            st.parse_ok = False
            st.blind(f"here-document end the grammar missed at {position(st.src, *node.start_point)}")
            st.unanalyzed.extend(segments(body))
        # unless its delimiter is quoted, the shell expands the body first ($, `, \)
        expands = not quoted and any(ch in body for ch in "$`\\")
        if op == "<<-":
            body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
        return _Input(None if expands else body)
    if t == "herestring_redirect":
        st.reasons["here-string"] = None
        target = ""
        literal: str | None = None
        for child in node.children:
            if child.is_named:
                value = _literal(child, st, depth + 1, subs)
                target = node_text(child) if value is None else value
                literal = value
        st.redirects.append(("<<<", target))
        return _Input(None if literal is None else literal + "\n")
    st.reasons["redirection"] = None
    op = ""
    target = ""
    plain = True
    destinations = 0
    for child in node.children:
        if child.type == "file_descriptor":
            op = node_text(child) + op
        elif not child.is_named:
            op += child.type
        else:
            value = _literal(child, st, depth + 1, subs)
            word = node_text(child) if value is None else value
            destinations += 1
            if destinations > 1:
                subs.extra.append(word)
                continue
            target = word
            plain = value is not None
    st.redirects.append((op, target))
    if op != "<":
        return None
    # ``< FILE`` is a script file; ``< <(cmd)`` or ``< $F`` is input the gate does not see
    return _Input(FROM_FILE if plain and not stdin_script(target) else None)


def _function(node: Node, st: WalkState, depth: int) -> list[int]:
    st.reasons["function definition"] = None
    name = ""
    out: list[int] = []
    bg, pipes = st.bg, st.pipes
    for child in node.children:
        if not child.is_named:
            continue
        if not name and child.type == "word":
            name = unescape_word(node_text(child))
        else:
            out += _visit(child, st, depth + 1)
    calls = sum(1 for i in out if st.commands[i] and st.commands[i][0] == name)
    if name and (calls >= 2 or (calls == 1 and (st.bg > bg or st.pipes > pipes))):
        st.self_spawning.append(name)
    return out


def _test(node: Node, st: WalkState, depth: int) -> list[int]:
    first = node.children[0].type if node.child_count else "[["
    st.reasons[f"test expression ({first} {']]' if first == '[[' else ']'})"] = None
    subs = _Subs()
    _scan(node, st, depth, subs)
    stack = list(node.children)
    while stack:
        child = stack.pop()
        if child.type in ("binary_expression", "unary_expression"):
            operator = next((c for c in child.children if c.type == "test_operator"), None)
            op = node_text(operator) if operator is not None else ""
            operands = [c for c in child.children if c.is_named and c.type != "test_operator"]
            if op in ARITH_TEST_OPERATORS and first == "[[" and not all(numeric(o) for o in operands):
                # [[ ]] reads the operands as arithmetic: a subscript's substitution runs, quoted or not
                # ([ ] and test want integers: bash 5.2 says "integer expression expected")
                evaluates(st, "arithmetic comparison in [[ ]]")
                for operand in operands:
                    text = node_text(operand).strip("'\"")
                    if _SUBSTITUTION_MARK.search(text) and operand.type == "raw_string":
                        subs.into.extend(_operand_substitutions(text, st, depth))
            elif op == "-v" and any(SUBSCRIPTED.match(node_text(o).strip("'\"")) for o in operands):
                evaluates(st, "subscripted variable name given to -v")
        stack.extend(c for c in child.children if c.is_named)
    return subs.into + subs.out_of


def _command(node: Node, st: WalkState, depth: int) -> list[int]:
    """A simple command (also ``export``/``declare``/``local``/``readonly``/``unset``)."""
    if depth > _MAX_NESTING:
        st.blind(TOO_DEEP)
        return []
    subs = _Subs()
    words: list[str] = []
    dynamic: list[bool] = []
    given: _Input | None = None
    spans: list[list[int]] = []
    index = -1
    last_end = -1
    word_start = 0
    src = st.src
    for child in node.children:
        t = child.type
        if t == "command_name" or (index < 0 and t in _DECLARATION_KEYWORDS):
            index = st.add(())
            inner = child.children[0] if t == "command_name" and child.child_count else child
            known = len(st.variables)
            value = _literal(inner, st, depth + 1, subs)
            if value is None or _has_glob(inner):
                st.reasons["expansion in command word"] = None
                st.blind(COMPUTED_REASON, complex_too=False)
                for name in list(st.variables)[known:]:
                    del st.variables[name]  # a computed program name is its own (high) finding
            words.append(node_text(inner) if value is None else value)
            dynamic.append(value is None)
            word_start = inner.start_byte
            last_end = child.end_byte
            spans.append([word_start, last_end])
        elif t == "variable_assignment" and index < 0:
            st.reasons["variable assignment"] = None
            note_assignment(child, st)
            _scan(child, st, depth + 1, subs)
        elif t in _REDIRECTS:
            given = _redirect(child, st, depth + 1, subs) or given
        elif t == "comment":
            continue
        elif index >= 0:
            start = child.start_byte
            if t == "$" and not child.is_named:
                after = child.next_sibling
                if after is not None and after.type == "string" and after.start_byte == child.end_byte:
                    # $"…" (a translated string) is split by the grammar into '$' and the string
                    if start != last_end:
                        last_end = -1
                    continue
            if start - last_end >= 1 and last_end >= 0 and src[last_end:start].replace(b"\\\n", b"").strip(b" \t"):
                # text the grammar skipped between two words, or a newline inside one command (``ls ==⏎cmd``)
                _skipped(child, st)
            value = _literal(child, st, depth + 1, subs)
            joined = start == last_end or (start - last_end == 2 and src[last_end:start] == b"\\\n")
            if joined and words and _EXPANSION_CUT.match(src, last_end - 1) and _unescaped_at(src, last_end - 1):
                # the grammar cut ``$x`` after its ``$`` (``""$x``): bash expands it; the gate did not read it
                st.parse_ok = False
                st.blind(f"parse error at {position(src, *child.start_point)}")
            if joined and words:
                # no blank between two nodes: one word for the shell (the grammar split it)
                if dynamic[-1] or value is None:
                    words[-1] = src[word_start : child.end_byte].decode("utf-8", "replace")
                    dynamic[-1] = True
                elif _split_escape(src, word_start, last_end, child):
                    # the grammar cut an escape from its character (``==\}``): unquote the whole word
                    words[-1] = unescape_word(src[word_start : child.end_byte].decode("utf-8", "replace"))
                else:
                    words[-1] += value
                spans[-1][1] = child.end_byte
            else:
                words.append(node_text(child) if value is None else value)
                dynamic.append(value is None)
                word_start = start
                spans.append([start, child.end_byte])
            last_end = child.end_byte
    if index < 0:
        return subs.into + subs.out_of
    if subs.extra:
        st.commands[index] = tuple(words)
        _words_after_redirect(st, index, subs, node)
    for a, b in spans:
        if unquoted_blank(src[a:b]):
            # the grammar read across a blank into one word (``sudo `` id``): bash splits there
            st.parse_ok = False
            st.blind(f"parse error at {position(src, *node.start_point)}")
            st.unanalyzed.extend(segments(src[a:b].decode("utf-8", "replace")))
    if any(b"{" in src[a:b] for a, b in spans[1:]):
        words, dynamic = brace_expanded(words, dynamic, [src[a:b] for a, b in spans], st)
    command = tuple(words)
    st.commands[index] = command
    builtin_evaluates(command, st, depth, _parse_into)
    computed_options(command, tuple(dynamic), st)
    out = [index]
    out += _unwrap(index, command, tuple(dynamic), st, depth)
    if given is not None:
        out += _feed(index, given.text, st, depth)
    if subs.into or subs.out_of:
        st.flows.extend((s, index) for s in subs.into)
        st.flows.extend((index, s) for s in subs.out_of)
        out += subs.into
        out += subs.out_of
    return out


_UNQUOTED_WORD = re.compile(rb"[^'\"$`]*")


def _split_escape(src: bytes, word_start: int, last_end: int, child: Node) -> bool:
    """The word so far ends with an escaping backslash the grammar left without its character, and the
    word has no quotes or expansions (so unquoting its source text is what bash does)."""
    before = src[word_start:last_end]
    trailing = len(before) - len(before.rstrip(b"\\"))
    return (
        trailing % 2 == 1
        and child.type in ("word", "regex")
        and _UNQUOTED_WORD.fullmatch(src[word_start : child.end_byte]) is not None
    )


def _skipped(node: Node, st: WalkState) -> None:
    """The grammar skipped text before ``node`` without an ERROR node: as unreliable as one (its
    statement's words are kept for the denylist)."""
    st.parse_ok = False
    st.blind(f"parse error at {position(st.src, *node.start_point)}")
    statement = node.parent if node.parent is not None else node
    st.unanalyzed.extend(segments(node_text(statement)))


_DECLARATION_KEYWORDS = frozenset({"export", "declare", "local", "readonly", "typeset", "unset", "unsetenv"})


def _declaration(node: Node, st: WalkState, depth: int) -> list[int]:
    return _command(node, st, depth)


_HANDLERS: dict[str, Callable[[Node, WalkState, int], list[int]]] = {
    "program": _container,
    "subshell": _container,
    "compound_statement": _container,
    "do_group": _container,
    "command_substitution": _container,
    "process_substitution": _container,
    "pipeline": _pipeline,
    "list": _list,
    "redirected_statement": _redirected,
    "function_definition": _function,
    "test_command": _test,
    "declaration_command": _declaration,
    "unset_command": _declaration,
}


# --------------------------------------------------------------------------------------------
# parsing entry points


def _splicing_changes(command: str) -> bool:
    """Whether removing the line continuations first, as bash does, changes the commands read."""
    return (
        _analyze_shell(command, spliced=True).commands
        != _analyze_shell(splice_continuations(command), spliced=True).commands
    )


def _parse_into(command: str, st: WalkState, depth: int, context: str | None) -> list[int]:
    if SUPPLEMENTARY.search(command) is not None:
        try:
            command = mask(command, st)
        except Unparseable:
            st.parse_ok = False
            st.blind("too many distinct characters outside the BMP: cannot be analyzed")
            st.unanalyzed.extend(segments(command))
            return []
    tight = TIGHT_CONTINUATION.search(command) if not st.spliced else None
    if tight is not None and _splicing_changes(command):
        # bash removes ``\<newline>`` before it reads words (``$\⏎(cmd)``, ``x\⏎#y``, a line that starts
        # with one); where the grammar reads the text otherwise, what it reads is not what would run
        st.blind(f"line continuation inside a word at {line_col(command, tight.start())}: cannot be analyzed")
        st.unanalyzed.extend(segments(splice_continuations(command)))
    data = command.encode("utf-8", "surrogatepass")
    tree = _PARSER.parse(data)
    root = tree.root_node
    # text the tree does not cover was skipped by the parser without an ERROR node (``- A=1``)
    skipped = root.start_byte > len(data) - len(data.lstrip()) or root.end_byte < len(data.rstrip())
    if root.has_error or skipped or bad_assignment(root):
        words = plain_words(command)
        if words is not None:
            index = st.add(words)
            builtin_evaluates(words, st, depth, _parse_into)
            return [index, *_unwrap(index, words, (False,) * len(words), st, depth)]
    if root.has_error or skipped:
        st.parse_ok = False
        where = error_position(root, data) if root.has_error else "1:1"
        suffix = f" in the command run by '{context}'" if context else ""
        st.blind(f"parse error at {where}{suffix}")
        st.unanalyzed.extend(segments(command))
    saved = st.src
    st.src = data
    try:
        return _container(root, st, depth)
    finally:
        st.src = saved


# bash splits words on space, tab and newline only; the parser also on \r, \v, \f: where they
# disagree, what the gate reads is not what would run
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
CONTROL_REASON = "control character in command: cannot be analyzed reliably"


def _analyze_shell(command: str, *, spliced: bool = False) -> ShellAnalysis:
    st = WalkState()
    st.spliced = spliced
    st.reserved = command
    if _CONTROL.search(command):
        st.blind(CONTROL_REASON)
    _parse_into(command, st, 0, None)
    finish(st)
    return st.result()


@functools.lru_cache(maxsize=2048)
def _analyze_shell_cached(command: str) -> ShellAnalysis:
    return _analyze_shell(command)


def analyze_shell(command: str) -> ShellAnalysis:
    """Parse a shell string (as ``sh -c`` would get it) and describe what it runs."""
    if len(command) <= _CACHE_MAX_CHARS:
        return _analyze_shell_cached(command)
    return _analyze_shell(command)


def analyze_argv(argv: Sequence[str], script: ScriptSource | None = None) -> ShellAnalysis:
    """An argv executed as is (no shell): simple unless argv[0] is a wrapper. ``script``: a script file it
    runs (a CI step), whose content is read as what the shell that runs it runs (``_script``)."""
    st = WalkState()
    if argv:
        words = tuple(argv)
        if any(_CONTROL.search(word) for word in words):
            st.blind(CONTROL_REASON)  # as for the same words in a shell string (parity)
        st.reserved = (
            "\x00".join(words) if script is None or script.text is None else "\x00".join((*words, script.text))
        )
        index = st.add(words)
        builtin_evaluates(words, st, 0, _parse_into)
        _unwrap(index, words, (False,) * len(words), st, 0)
        if script is not None:
            _script(script, st)
    finish(st)
    return st.result()


def _script(script: ScriptSource, st: WalkState) -> None:
    """The request's script file: its content parsed as what the shell that runs it runs, exactly as a ``-c``
    string would be (control characters, parse errors, nesting: unseen alike). Unseen, never allowed without
    an approval or a rule: content the gate cannot read, code for another interpreter, or a script no command
    of the argv runs (what reads it cannot be told)."""
    readers = [
        j for j, words in enumerate(st.commands) if (k := script_operand(words)) is not None and words[k] == script.path
    ]
    if not readers:
        st.blind(f"the script {script.path} is not what a shell of the command runs: what reads it cannot be told")
        return
    for j in readers:
        name = program_name(st.commands[j][0])
        if lookup(name) is not SHELL:
            st.blind(f"the script {script.path} is code for '{name}', which the gate does not read")
            continue
        if script.text is None:
            st.blind(f"the script {script.path} cannot be analyzed: {script.problem or 'its content is not given'}")
            continue
        st.reasons[f"'{name}' runs the script {script.path}"] = None
        if _CONTROL.search(script.text):
            st.blind(CONTROL_REASON)
        first = len(st.commands)
        st.wrap_level += 1
        try:
            ran = _parse_into(script.text, st, 1, f"{name} {script.path}")
        finally:
            st.wrap_level -= 1
        st.wraps.extend((j, k) for k in ran)
        st.script_readers.append(j)
        st.script_commands.extend(range(first, len(st.commands)))


# --------------------------------------------------------------------------------------------
# what wrappers run, and what the gate cannot see


def _unwrap(index: int, words: tuple[str, ...], dynamic: tuple[bool, ...], st: WalkState, depth: int) -> list[int]:
    """If ``words`` runs other commands (the program table says where), record them (recursively);
    return their indices."""
    found = locate(words, dynamic)
    if found is None:
        return []
    for reason in found.blind:
        st.blind(reason, complex_too=False)
    if found.leftover:
        # a wrapper whose command could not be found: complex, and its words checked as they are
        st.reasons[f"wrapper '{found.label}' runs another command"] = None
        for leftover in found.leftover:
            _unanalyzed(st, leftover)
    if found.values:
        st.opaque.append((found.label, tuple(found.values)))
    if not found.inners:
        return []
    label = found.label
    st.reasons[f"wrapper '{label}' runs another command"] = None
    if st.wrap_level >= MAX_WRAPPER_DEPTH or depth > _MAX_NESTING:
        st.blind(WRAPPERS_TOO_DEEP)
        for inner in found.inners:
            if isinstance(inner, Argv):
                _unanalyzed(st, inner.words)
            elif inner.text is not None:
                st.unanalyzed.extend(segments(inner.text))
        return []
    st.wrap_level += 1
    out: list[int] = []
    try:
        for inner in found.inners:
            if isinstance(inner, Argv):
                if not inner.words:
                    continue  # ``coproc (…)``: the subshell's commands were recorded with the words
                j = st.add(inner.words)
                st.wraps.append((index, j))
                if inner.dynamic[0] or GLOB_IN_WORD.search(inner.words[0]):
                    # a computed or globbed program name (``nice /usr/bin/sud? id``)
                    st.reasons["expansion in command word"] = None
                    st.blind(COMPUTED_REASON, complex_too=False)
                builtin_evaluates(inner.words, st, depth + 1, _parse_into)
                computed_options(inner.words, inner.dynamic, st)
                out.append(j)
                out += _unwrap(j, inner.words, inner.dynamic, st, depth + 1)
            elif inner.text is None:
                st.blind(f"'{label}' runs a command string that cannot be analyzed")
            else:
                ran = _parse_into(inner.text, st, depth + 1, label)
                st.wraps.extend((index, j) for j in ran)
                out += ran
    finally:
        st.wrap_level -= 1
    return out


def _unanalyzed(st: WalkState, words: tuple[str, ...]) -> None:
    """Keep words the gate could not analyze, and the command words inside any of them that is a
    quoted command string (``sh -c 'rm -rf x'``), for the denylist."""
    st.unanalyzed.append(words)
    for word in words:
        st.unanalyzed.extend(inside(word, 0))


def _wrapped_chain(st: WalkState, index: int) -> list[int]:
    """``index`` and every command it runs through wrappers (they inherit its input)."""
    chain = [index]
    k = 0
    while k < len(chain):
        chain.extend(j for i, j in st.wraps if i == chain[k] and j not in chain)
        k += 1
    return chain


def _feed(index: int, text: str | None, st: WalkState, depth: int) -> list[int]:
    """A here-document or here-string (``text``; None when it expands) is the input of ``index``:
    where a shell reads its input as commands, they are parsed as what it runs."""
    out: list[int] = []
    if text is not None and text != FROM_FILE and WRAPPERS_TOO_DEEP in st.unseen:
        # who reads it was cut off at the nesting limit: its words are checked as they are
        st.unanalyzed.extend(segments(text))
    for j in _wrapped_chain(st, index):
        st.stdin[j] = text
        words = st.commands[j]
        reader = reads_code_from_input(words)
        if reader is None or text is None or text == FROM_FILE or not _reads_shell_code(words):
            continue
        if st.wrap_level >= MAX_WRAPPER_DEPTH or depth > _MAX_NESTING:
            st.blind(WRAPPERS_TOO_DEEP)
            st.unanalyzed.extend(segments(text))
            continue
        st.wrap_level += 1
        try:
            ran = _parse_into(text, st, depth + 1, f"{reader} <<")
        finally:
            st.wrap_level -= 1
        st.wraps.extend((j, k) for k in ran)
        st.from_input.update(ran)
        out += ran
    return out


def is_shell(words: Sequence[str]) -> bool:
    return bool(words) and lookup(program_name(words[0])) is SHELL


def _reads_shell_code(words: Sequence[str]) -> bool:
    """A shell, or ``source``/``.`` of its input: what it reads is shell code the gate can parse."""
    return is_shell(words) or (bool(words) and program_name(words[0]) in ("source", "."))
