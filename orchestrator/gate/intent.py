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

Wrappers (matched on the basename of argv[0], so ``/usr/bin/env`` counts). For each, the wrapper's
own words AND the command(s) it runs are in ``commands``; the inner command is unwrapped again
(bounded to ``MAX_WRAPPER_DEPTH`` levels) and the reason says "wrapper 'NAME' runs another command".

* shells ``sh bash dash zsh ksh mksh ash fish`` with ``-c`` (also bundled: ``-lc``, ``-ec``; options
  ``-o OPT``/``+o OPT``/``-O OPT``, ``--rcfile F``, ``--init-file F`` skipped): the string is parsed.
  Without ``-c`` (a script or stdin) the shell is not a wrapper.
* ``eval ARGS`` (args joined by a space, parsed); ``sg GROUP [-c] STRING`` (parsed).
* ``exec [-cl] [-a NAME]``, ``command`` (not with ``-v``/``-V``: those only look up), ``builtin``,
  ``nohup``, ``setsid``, ``unbuffer``, ``time`` (``-f FMT``, ``-o FILE``), ``fakeroot``,
  ``proxychains``/``proxychains4`` (``-f FILE``), ``torsocks``, ``catchsegv``.
* ``env``: ``-i``/``-0``/``-v``/``-``, ``-u NAME``, ``-C DIR``, ``NAME=VALUE``; ``-S STRING``: the
  string plus the remaining words is parsed as a shell string (approximation of env's splitting).
* ``nice`` (``-n N``, ``-N``, ``--adjustment=N``), ``ionice`` (``-c``, ``-n``; ``-p``/``-P``/``-u``
  act on processes and run nothing), ``stdbuf`` (``-i/-o/-e MODE``), ``chrt`` (options, then
  PRIORITY; ``-p`` runs nothing), ``taskset`` (options, then MASK; ``-p`` runs nothing),
  ``timeout`` (``-s SIG``, ``-k D``, then DURATION), ``flock`` (``-w``, ``-E``, then FILE, then a
  command or ``-c STRING``), ``script -c STRING``.
* ``watch`` (``-n SECS``; the remaining words are joined and parsed as ``sh -c`` does, or run as an
  argv with ``-x``), ``xargs`` (options incl. ``-I R``, ``-n N``, ``-P N``, ``-d D``, ``-L N``,
  ``-s N``, ``-a F``, ``-E EOF``, attached ``-i``/``-e``/``-l``; no command means echo: not a
  wrapper), ``parallel`` (GNU: options, then the command words up to ``:::``/``::::``, parsed as a
  shell string), ``find … -exec|-execdir|-ok|-okdir CMD … ;|+`` (each such command),
  ``busybox APPLET …``.
* privilege and isolation wrappers: ``sudo`` (options, ``NAME=VALUE``; ``-e -l -v -K -V`` run
  nothing), ``doas`` (``-u USER``; ``-C`` runs nothing), ``su``/``runuser`` (``-c STRING`` parsed;
  ``runuser -u USER CMD…``), ``pkexec`` (``--user U``), ``chroot`` (options, NEWROOT, command),
  ``unshare``, ``nsenter``, ``systemd-run``, ``strace``, ``ltrace``, ``valgrind``.
* bash keywords and builtins that run a command now or later: ``coproc [NAME] CMD`` (also
  ``coproc { …; }``/``coproc (…)``), ``trap ACTION SIGNAL…`` (ACTION parsed; ``-l``/``-p``, one
  operand, ``-``, ``''`` or a number reset signals and run nothing), ``mapfile``/``readarray -C
  CALLBACK`` (parsed), ``compgen -C COMMAND`` (parsed) and ``compgen -W WORDS`` when WORDS holds
  ``$``/a backtick (compgen expands them again: parsed as the words of ``:``), ``alias NAME=VALUE``
  (each VALUE parsed: what the name will run). ``time -p``, ``command -p``, ``builtin eval`` were
  already covered. ``source``/``.``, ``enable -f``, ``bind -x``, ``complete -C/-F/-W``,
  ``compgen -F``, ``fc`` and ``hash -p`` are not wrappers (what they run is not on the command
  line): the risk analyzer rates them high.

``ssh HOST CMD`` is not unwrapped (the command runs elsewhere); ``python -c``/``perl -e`` are
programs, not shell wrappers.

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
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from orchestrator.domain.sanitized import Intent
from orchestrator.gate.commands import scan_shell_options

__all__ = ["MAX_WRAPPER_DEPTH", "WRAPPER_NAMES", "ShellAnalysis", "analyze_argv", "analyze_shell"]

MAX_WRAPPER_DEPTH = 8
"""How many wrappers deep inner commands are still unwrapped."""
_MAX_NESTING = 100
"""Tree depth (plus wrapper levels) walked before giving up: keeps recursion bounded."""
_CACHE_MAX_CHARS = 4096

_LANGUAGE = Language(tree_sitter_bash.language())
_PARSER = Parser(_LANGUAGE)

SIMPLE = "simple command"


@dataclass(frozen=True, slots=True)
class ShellAnalysis:
    """What a command would run. Immutable; equal analyses mean equal meaning."""

    argv: tuple[str, ...] | None
    """Simple: the one command's words; complex: the first simple command's words (None if none)."""
    is_complex: bool
    reason: str
    """'simple command', or the reasons it is complex joined by '; ' (first-found order)."""
    commands: tuple[tuple[str, ...], ...]
    """Every simple command found anywhere, including what wrappers run."""
    parse_ok: bool
    redirects: tuple[tuple[str, str], ...] = ()
    """(operator, target) of every redirection, e.g. ('>', '/dev/sda'), ('2>&', '1'), ('<<<', 'x');
    for a here-document ('<<', body)."""
    flows: tuple[tuple[int, int], ...] = ()
    """(i, j): output of commands[i] feeds commands[j] (pipe, command/process substitution)."""
    wraps: tuple[tuple[int, int], ...] = ()
    """(i, j): wrapper commands[i] runs commands[j] (j inherits i's input)."""
    self_spawning: tuple[str, ...] = ()
    """Functions that spawn themselves (fork-bomb shape)."""
    variables: tuple[str, ...] = ()
    """Names of the variables expanded (``$F``, ``${F}``, ``"${F:-x}"``) in arguments, redirect targets,
    here-documents or assignment values, in first-found order (not those only in a command word)."""
    assignments: tuple[str, ...] = ()
    """Names assigned by shell assignments (``A=1 cmd``, ``A=1``), in first-found order."""

    @property
    def reasons(self) -> tuple[str, ...]:
        """The individual reasons (empty for a simple command)."""
        return () if not self.is_complex else tuple(self.reason.split("; "))

    def to_intent(self) -> Intent:
        return Intent(
            argv=list(self.argv) if self.argv is not None else None,
            is_complex=self.is_complex,
            reason=self.reason,
        )


# --------------------------------------------------------------------------------------------
# walk state


class _State:
    __slots__ = (
        "assignments",
        "bg",
        "commands",
        "flows",
        "parse_ok",
        "pipes",
        "reasons",
        "redirects",
        "reserved",
        "self_spawning",
        "src",
        "unmask",
        "variables",
        "wrap_level",
        "wraps",
    )

    def __init__(self) -> None:
        self.commands: list[tuple[str, ...]] = []
        self.reasons: dict[str, None] = {}
        self.redirects: list[tuple[str, str]] = []
        self.flows: list[tuple[int, int]] = []
        self.wraps: list[tuple[int, int]] = []
        self.unmask: dict[str, str] = {}
        self.reserved = ""
        self.self_spawning: list[str] = []
        self.parse_ok = True
        self.src = b""
        self.wrap_level = 0
        self.bg = 0
        self.pipes = 0
        self.variables: dict[str, None] = {}
        self.assignments: dict[str, None] = {}

    def add(self, words: tuple[str, ...]) -> int:
        self.commands.append(words)
        return len(self.commands) - 1

    def result(self) -> ShellAnalysis:
        if self.unmask:
            self._restore()
        commands = tuple(self.commands)
        reasons = self.reasons
        if not reasons and len(commands) != 1:
            reasons = {"no command" if not commands else "multiple commands": None}
        return ShellAnalysis(
            argv=commands[0] if commands else None,
            is_complex=bool(reasons),
            reason="; ".join(reasons) if reasons else SIMPLE,
            commands=commands,
            parse_ok=self.parse_ok,
            redirects=tuple(self.redirects) if self.redirects else (),
            flows=tuple(dict.fromkeys(self.flows)) if self.flows else (),
            wraps=tuple(self.wraps) if self.wraps else (),
            self_spawning=tuple(dict.fromkeys(self.self_spawning)) if self.self_spawning else (),
            variables=tuple(self.variables) if self.variables else (),
            assignments=tuple(self.assignments) if self.assignments else (),
        )

    def _restore(self) -> None:
        """Put back the characters ``_mask`` replaced."""
        table = str.maketrans(self.unmask)
        self.commands = [tuple(w.translate(table) for w in words) for words in self.commands]
        self.redirects = [(op, target.translate(table)) for op, target in self.redirects]
        self.self_spawning = [name.translate(table) for name in self.self_spawning]
        self.variables = {name.translate(table): None for name in self.variables}
        self.assignments = {name.translate(table): None for name in self.assignments}


# --------------------------------------------------------------------------------------------
# tree-sitter-bash crash guard
#
# tree-sitter-bash 0.25 reads out of bounds (SIGSEGV on Linux) on '{' followed by a 4-byte UTF-8
# character (tree-sitter/tree-sitter-bash#337, open). Before parsing, every character outside the
# BMP is replaced by a distinct BMP private-use (then CJK) character absent from the input; the
# grammar treats both as word characters, and the originals are put back in every word.

_SUPPLEMENTARY = re.compile("[\U00010000-\U0010ffff]")
_PLACEHOLDERS = (range(0xE000, 0xF900), range(0x4E00, 0xA000))


class _Unparseable(Exception):
    """More distinct non-BMP characters than placeholders."""


def _mask(command: str, st: _State) -> str:
    taken = set(st.unmask)
    table: dict[int, str] = {}
    reverse = {original: placeholder for placeholder, original in st.unmask.items()}
    candidates = (chr(cp) for block in _PLACEHOLDERS for cp in block)
    for ch in dict.fromkeys(_SUPPLEMENTARY.findall(command)):
        placeholder = reverse.get(ch)
        if placeholder is None:
            for candidate in candidates:
                if candidate not in taken and candidate not in command and candidate not in st.reserved:
                    placeholder = candidate
                    break
            else:
                raise _Unparseable
            taken.add(placeholder)
            st.unmask[placeholder] = ch
        table[ord(ch)] = placeholder
    return command.translate(table)


def _position(data: bytes, row: int, col: int) -> str:
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
_GLOB_IN_WORD = re.compile(r"(?<!\\)[*?\[{]")


def _unescape_word_match(m: re.Match[str]) -> str:
    ch = m.group(1)
    return "" if ch == "\n" else ch


def _unescape_word(text: str) -> str:
    return _WORD_ESCAPE.sub(_unescape_word_match, text) if "\\" in text else text


def _unescape_dq(text: str) -> str:
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


def _unescape_ansi(text: str) -> str:
    return _ANSI_ESCAPE.sub(_ansi_match, text) if "\\" in text else text


def _text(node: Node) -> str:
    raw = node.text
    return raw.decode("utf-8", "replace") if raw is not None else ""


# --------------------------------------------------------------------------------------------
# words

_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})


class _Subs:
    """Commands found in substitutions inside one command's words: they feed it (or it feeds them)."""

    __slots__ = ("into", "out_of")

    def __init__(self) -> None:
        self.into: list[int] = []
        self.out_of: list[int] = []


def _scan(node: Node, st: _State, depth: int, subs: _Subs) -> None:
    """Walk the substitutions inside an expansion or word part."""
    if depth > _MAX_NESTING:
        st.reasons["nesting too deep"] = None
        return
    t = node.type
    if t in _SUBSTITUTIONS:
        found = _visit(node, st, depth + 1)
        first = node.children[0].type if node.child_count else ""
        (subs.out_of if first == ">(" else subs.into).extend(found)
        return
    if t in _EXPANSION_NODES:
        _expansion(node, st)
    elif t in _STATEMENTS:
        # a statement where a word should be (``coproc (rm -rf /)``): its commands run
        subs.into.extend(_visit(node, st, depth + 1))
        return
    for child in node.children:
        if child.is_named:
            _scan(child, st, depth + 1, subs)


def _literal(node: Node, st: _State, depth: int, subs: _Subs) -> str | None:
    """The unquoted value of a word node, or None if it contains an expansion."""
    t = node.type
    if t in ("word", "number"):
        return _unescape_word(_text(node))
    if t == "raw_string":
        return _text(node)[1:-1]
    if t in ("string", "translated_string"):
        dynamic = False
        for child in node.children:
            if child.is_named and child.type != "string_content":
                dynamic = True
                _scan(child, st, depth + 1, subs)
        if dynamic:
            return None
        text = _text(node)
        return _unescape_dq(text[2:-1] if text.startswith("$") else text[1:-1])
    if t == "ansi_c_string":
        return _unescape_ansi(_text(node)[2:-1])
    if t == "concatenation":
        parts: list[str] = []
        dynamic = False
        for child in node.children:
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
                parts.append(_text(child))
                if child.type == "subscript":
                    _scan(child, st, depth + 1, subs)
            else:
                value = _literal(child, st, depth + 1, subs)
                if value is None:
                    dynamic = True
                else:
                    parts.append(value)
        return None if dynamic else "".join(parts)
    if not node.is_named or t in ("variable_name", "word_content"):
        return _text(node)
    # expansions, substitutions, brace expressions, anything else: dynamic
    _scan(node, st, depth, subs)
    return None


def _has_glob(node: Node) -> bool:
    """An unquoted glob/brace character in a command word (pathname or brace expansion)."""
    t = node.type
    if t == "word":
        return _GLOB_IN_WORD.search(_text(node)) is not None
    if t == "concatenation":
        return any(_has_glob(child) for child in node.children)
    return False


# --------------------------------------------------------------------------------------------
# expansions that evaluate code
#
# bash evaluates arithmetic recursively: a variable's value is itself an arithmetic expression, and an
# array subscript in it (``a[$(cmd)]``) is expanded, which runs ``cmd``. So ``$((X))``, ``${a[X]}``,
# ``${S:X}``, ``let X``, ``declare -i v=X``, ``[[ X -eq 1 ]]``, ``${!X}`` (indirection to
# ``a[$(cmd)]``) and a subscripted name given to a builtin (``read 'a[$(cmd)]'``) run code taken
# from the environment; ``${X@P}`` expands a prompt string (``$(…)`` included). They make a command
# complex with the reason ``expansion that can evaluate code (KIND)``. Plain ``$X``/``${X}``/
# ``${X:-d}`` only record the name in ``variables``.

EVAL_REASON = "expansion that can evaluate code"
_EXPANSION_NODES = frozenset({"simple_expansion", "expansion", "arithmetic_expansion", "subscript", "array"})
_STATEMENTS = frozenset(
    {"subshell", "compound_statement", "command", "pipeline", "list", "redirected_statement", "negated_command"}
)
_NUMBER = re.compile(r"[-+]?(?:0[xX][0-9a-fA-F]+|\d+#[0-9A-Za-z@_]+|\d+)")
_NAME_NODES = frozenset({"variable_name", "special_variable_name"})
_ARITH_NAMES = frozenset(
    {"variable_name", "special_variable_name", "simple_expansion", "expansion", "command_substitution", "subscript"}
)
_SUBSCRIPTED = re.compile(r"\s*[A-Za-z_][A-Za-z0-9_]*\[(?!\s*(?:[-+]?\d+|[@*])\s*\](?:\+?=|$))")
"""A variable name with a subscript that is not a plain number, ``@`` or ``*``."""
_ARITH_TEST_OPERATORS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})


def _evaluates(st: _State, kind: str) -> None:
    st.reasons[f"{EVAL_REASON} ({kind})"] = None


def _numeric(node: Node) -> bool:
    return (
        node.type in ("number", "word", "variable_name", "unary_expression")
        and _NUMBER.fullmatch(_text(node).replace(" ", "")) is not None
    )


def _arith_uses_names(node: Node) -> bool:
    """Whether an arithmetic expression refers to a variable (whose value bash evaluates too)."""
    stack = list(node.children)
    while stack:
        child = stack.pop()
        t = child.type
        if t in _ARITH_NAMES:
            if t == "variable_name" and _NUMBER.fullmatch(_text(child)):
                continue
            return True
        if t == "word" and not _NUMBER.fullmatch(_text(child)):
            return True
        if t == "do_group":
            continue
        stack.extend(child.children)
    return False


def _note_name(node: Node, st: _State) -> None:
    name = _text(node)
    if name == "_" or _IDENTIFIER.fullmatch(name):
        st.variables[name] = None


def _subscript_evaluates(node: Node) -> bool:
    index = [c for c in node.children if c.is_named and c.type not in _NAME_NODES]
    if not index:
        return False
    single = index[0] if len(index) == 1 else None
    return single is None or not (_numeric(single) or (single.type == "word" and _text(single) in ("@", "*")))


def _expansion(node: Node, st: _State) -> None:
    """Record the variable a ``$X``/``${…}`` expands, or why the expansion can evaluate code."""
    t = node.type
    if t == "simple_expansion":
        for child in node.children:
            if child.type in _NAME_NODES:
                _note_name(child, st)
        return
    if t == "arithmetic_expansion":
        if _arith_uses_names(node):
            _evaluates(st, "arithmetic expansion")
        return
    if t == "subscript":
        if _subscript_evaluates(node):
            _evaluates(st, "array subscript")
        return
    if t == "array":
        # a=([X]=1): an indexed array's subscripts are arithmetic too
        for child in node.children:
            text = _text(child)
            if text.startswith("[") and "]=" in text:
                index = text[1 : text.index("]=")].strip()
                if not _NUMBER.fullmatch(index):
                    _evaluates(st, "array subscript")
                    return
        return
    children = node.children
    n = len(children)
    named = False
    for k in range(n):
        child = children[k]
        ct = child.type
        if child.is_named:
            if not named and ct in _NAME_NODES:
                named = True
                _note_name(child, st)
            elif not named and ct == "subscript":
                named = True
                for part in child.children:
                    if part.type == "variable_name":
                        _note_name(part, st)
                        break
            continue
        if ct == "@" and k + 1 < n and children[k + 1].type != "}":
            _evaluates(st, "${…@op} transformation")
        elif ct == "!" and k == 1 and n > 2:
            after = children[3].type if n > 3 else "}"
            target = children[2]
            listing = after in ("*", "@") or (
                target.type == "subscript"
                and not _subscript_evaluates(target)
                and _text(target).endswith(("[@]", "[*]"))
            )
            if not listing:
                _evaluates(st, "${!…} indirection")
        elif ct == ":":
            for operand in children[k + 1 :]:
                if operand.is_named and not _numeric(operand):
                    _evaluates(st, "substring offset")
                    break


def _note_assignment(node: Node, st: _State) -> None:
    for child in node.children:
        if child.type == "variable_name":
            st.assignments[_text(child)] = None
            return
        if child.type == "subscript":
            for part in child.children:
                if part.type == "variable_name":
                    st.assignments[_text(part)] = None
                    return
            return


_DECLARES = frozenset({"declare", "typeset", "local"})
_NAME_BUILTINS = frozenset(
    {"declare", "typeset", "local", "export", "readonly", "unset", "read", "mapfile", "readarray", "getopts", "wait"}
    | {"test", "printf", "[", "let"}
)


def _builtin_evaluates(words: tuple[str, ...], st: _State, depth: int) -> None:
    """``let``, ``declare -i``/``-n`` and subscripted names given to builtins evaluate code; the
    command substitutions in a literal subscript (``export 'a[$(cmd)]=1'``) run and are analyzed."""
    name = words[0]
    if name not in _NAME_BUILTINS:
        return
    for word in words[1:]:
        start = word.find("[")
        end = word.rfind("]")
        if 0 <= start < end and ("$(" in word or "`" in word):
            _parse_into(f": {word[start + 1 : end]}", st, depth + 1, name)
    if name == "let":
        _evaluates(st, "let")
        return
    if name in _DECLARES and any(
        w[:1] in "-+" and len(w) > 1 and "=" not in w and ("i" in w or "n" in w) for w in words[1:]
    ):
        _evaluates(st, f"{name} -i/-n")
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
        if _SUBSCRIPTED.match(word.lstrip("\"'")):
            _evaluates(st, f"subscripted variable name given to {name}")
            return


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


def _visit(node: Node, st: _State, depth: int) -> list[int]:
    """Record the commands inside ``node``; return their indices."""
    t = node.type
    if t == "command":
        return _command(node, st, depth)
    if depth > _MAX_NESTING:
        st.reasons["nesting too deep"] = None
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
        if t == "c_style_for_statement" and _arith_uses_names(node):
            _evaluates(st, "arithmetic for")
    elif t in _SIMPLE_REASONS:
        st.reasons[_SIMPLE_REASONS[t]] = None
        if t == "variable_assignment":
            _note_assignment(node, st)
    elif t in _EXPANSION_NODES:
        _expansion(node, st)
    out: list[int] = []
    for child in node.children:
        if child.is_named:
            out += _visit(child, st, depth + 1)
    return out


def _container(node: Node, st: _State, depth: int) -> list[int]:
    """A statement sequence: program, subshell, group, do-group, substitution body."""
    t = node.type
    if t == "subshell":
        st.reasons["subshell"] = None
    elif t == "compound_statement":
        first = node.children[0].type if node.child_count else "{"
        st.reasons["arithmetic command" if first == "((" else "command group ({ })"] = None
        if first == "((" and _arith_uses_names(node):
            _evaluates(st, "arithmetic command")
    elif t == "command_substitution":
        st.reasons["command substitution"] = None
    elif t == "process_substitution":
        st.reasons["process substitution"] = None
    out: list[int] = []
    seen_statement = False
    separator = ""
    for child in node.children:
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
    return out


def _pipeline(node: Node, st: _State, depth: int) -> list[int]:
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


def _list(node: Node, st: _State, depth: int) -> list[int]:
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


def _redirected(node: Node, st: _State, depth: int) -> list[int]:
    body: list[int] = []
    subs = _Subs()
    for child in node.children:
        if child.type in _REDIRECTS:
            _redirect(child, st, depth + 1, subs)
        elif child.is_named and child.type != "comment":
            body += _visit(child, st, depth + 1)
    st.flows.extend((s, b) for s in subs.into for b in body)
    st.flows.extend((b, s) for s in subs.out_of for b in body)
    return body + subs.into + subs.out_of


def _redirect(node: Node, st: _State, depth: int, subs: _Subs) -> None:
    t = node.type
    if t == "heredoc_redirect":
        st.reasons["here-document"] = None
        op = "<<"
        body = ""
        for child in node.children:
            ct = child.type
            if ct in ("<<", "<<-"):
                op = ct
            elif ct == "heredoc_body":
                body = _text(child)
                _scan(child, st, depth + 1, subs)
            elif ct in _REDIRECTS:
                _redirect(child, st, depth + 1, subs)
            elif child.is_named and ct not in ("heredoc_start", "heredoc_end"):
                _scan(child, st, depth + 1, subs)
        st.redirects.append((op, body))
        return
    if t == "herestring_redirect":
        st.reasons["here-string"] = None
        target = ""
        for child in node.children:
            if child.is_named:
                value = _literal(child, st, depth + 1, subs)
                target = _text(child) if value is None else value
        st.redirects.append(("<<<", target))
        return
    st.reasons["redirection"] = None
    op = ""
    target = ""
    for child in node.children:
        if child.type == "file_descriptor":
            op = _text(child) + op
        elif not child.is_named:
            op += child.type
        else:
            value = _literal(child, st, depth + 1, subs)
            target = _text(child) if value is None else value
    st.redirects.append((op, target))


def _function(node: Node, st: _State, depth: int) -> list[int]:
    st.reasons["function definition"] = None
    name = ""
    out: list[int] = []
    bg, pipes = st.bg, st.pipes
    for child in node.children:
        if not child.is_named:
            continue
        if not name and child.type == "word":
            name = _unescape_word(_text(child))
        else:
            out += _visit(child, st, depth + 1)
    calls = sum(1 for i in out if st.commands[i] and st.commands[i][0] == name)
    if name and (calls >= 2 or (calls == 1 and (st.bg > bg or st.pipes > pipes))):
        st.self_spawning.append(name)
    return out


def _test(node: Node, st: _State, depth: int) -> list[int]:
    first = node.children[0].type if node.child_count else "[["
    st.reasons[f"test expression ({first} {']]' if first == '[[' else ']'})"] = None
    subs = _Subs()
    _scan(node, st, depth, subs)
    stack = list(node.children)
    while stack:
        child = stack.pop()
        if child.type in ("binary_expression", "unary_expression"):
            operator = next((c for c in child.children if c.type == "test_operator"), None)
            op = _text(operator) if operator is not None else ""
            operands = [c for c in child.children if c.is_named and c.type != "test_operator"]
            if op in _ARITH_TEST_OPERATORS and first == "[[" and not all(_numeric(o) for o in operands):
                _evaluates(st, "arithmetic comparison in [[ ]]")
            elif op == "-v" and any(_SUBSCRIPTED.match(_text(o).strip("'\"")) for o in operands):
                _evaluates(st, "subscripted variable name given to -v")
        stack.extend(c for c in child.children if c.is_named)
    return subs.into + subs.out_of


def _command(node: Node, st: _State, depth: int) -> list[int]:
    """A simple command (also ``export``/``declare``/``local``/``readonly``/``unset``)."""
    if depth > _MAX_NESTING:
        st.reasons["nesting too deep"] = None
        return []
    subs = _Subs()
    words: list[str] = []
    dynamic: list[bool] = []
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
                for name in list(st.variables)[known:]:
                    del st.variables[name]  # a computed program name is its own (high) finding
            words.append(_text(inner) if value is None else value)
            dynamic.append(value is None)
            word_start = inner.start_byte
            last_end = child.end_byte
        elif t == "variable_assignment" and index < 0:
            st.reasons["variable assignment"] = None
            _note_assignment(child, st)
            _scan(child, st, depth + 1, subs)
        elif t in _REDIRECTS:
            _redirect(child, st, depth + 1, subs)
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
            if start - last_end > 1 and last_end >= 0 and src[last_end:start].replace(b"\\\n", b"").strip(b" \t"):
                _skipped(child, st)
            value = _literal(child, st, depth + 1, subs)
            joined = start == last_end or (start - last_end == 2 and src[last_end:start] == b"\\\n")
            if joined and words:
                # no blank between two nodes: one word for the shell (the grammar split it)
                if dynamic[-1] or value is None:
                    words[-1] = src[word_start : child.end_byte].decode("utf-8", "replace")
                    dynamic[-1] = True
                else:
                    words[-1] += value
            else:
                words.append(_text(child) if value is None else value)
                dynamic.append(value is None)
                word_start = start
            last_end = child.end_byte
    if index < 0:
        return subs.into + subs.out_of
    command = tuple(words)
    st.commands[index] = command
    _builtin_evaluates(command, st, depth)
    out = [index]
    if command[0] in _WRAPPER_BASENAMES or "/" in command[0]:
        out += _unwrap(index, command, tuple(dynamic), st, depth)
    if subs.into or subs.out_of:
        st.flows.extend((s, index) for s in subs.into)
        st.flows.extend((index, s) for s in subs.out_of)
        out += subs.into
        out += subs.out_of
    return out


def _skipped(node: Node, st: _State) -> None:
    """The grammar skipped text before ``node`` without an ERROR node: as unreliable as one."""
    st.parse_ok = False
    st.reasons[f"parse error at {_position(st.src, *node.start_point)}"] = None


_DECLARATION_KEYWORDS = frozenset({"export", "declare", "local", "readonly", "typeset", "unset", "unsetenv"})


def _declaration(node: Node, st: _State, depth: int) -> list[int]:
    return _command(node, st, depth)


_HANDLERS: dict[str, Callable[[Node, _State, int], list[int]]] = {
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


def _error_position(root: Node, data: bytes) -> str:
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            return _position(data, *node.start_point)
        if node.has_error:
            stack.extend(reversed(node.children))
    return _position(data, *root.end_point)


_PLAIN = re.compile(r"""[ \t]*(?:(?:[\w@%+=:,./-]|'[^']*'|"[^"$`\\]*")+(?:[ \t]+|$))*""", re.ASCII)
"""Only literal words: unquoted characters shlex leaves unquoted, '…' and "…" without $ ` \\."""
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT_START = re.compile(r"[ \t]*[A-Za-z_][A-Za-z0-9_]*\+?=")
_RESERVED = frozenset(
    {"if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done"}
    | {"function", "in", "coproc", "time", "!", "{", "}", "[[", "]]"}
)


def _plain_words(command: str) -> tuple[str, ...] | None:
    """The words of a string made only of literal words (the shape ``shlex.join`` produces), or None.

    For these bash's reading is unambiguous, so they are a second opinion where tree-sitter-bash has
    grammar gaps (it rejects ``l%`` and ``a ==``, and reads ``7=`` as an assignment)."""
    if _PLAIN.fullmatch(command) is None or _ASSIGNMENT_START.match(command):
        return None
    words = tuple(shlex.split(command))
    if not words or words[0] in _RESERVED:
        return None
    return words


def _bad_assignment(root: Node) -> bool:
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
            if name is not None and name.type == "variable_name" and not _IDENTIFIER.fullmatch(_text(name)):
                return True
        return False
    return False


def _parse_into(command: str, st: _State, depth: int, context: str | None) -> list[int]:
    if _SUPPLEMENTARY.search(command) is not None:
        try:
            command = _mask(command, st)
        except _Unparseable:
            st.parse_ok = False
            st.reasons["too many distinct characters outside the BMP: cannot be analyzed"] = None
            return []
    data = command.encode("utf-8", "surrogatepass")
    tree = _PARSER.parse(data)
    root = tree.root_node
    # text the tree does not cover was skipped by the parser without an ERROR node (``- A=1``)
    skipped = root.start_byte > len(data) - len(data.lstrip()) or root.end_byte < len(data.rstrip())
    if root.has_error or skipped or _bad_assignment(root):
        words = _plain_words(command)
        if words is not None:
            index = st.add(words)
            _builtin_evaluates(words, st, depth)
            return [index, *_unwrap(index, words, (False,) * len(words), st, depth)]
    if root.has_error or skipped:
        st.parse_ok = False
        where = _error_position(root, data) if root.has_error else "1:1"
        suffix = f" in the command run by '{context}'" if context else ""
        st.reasons[f"parse error at {where}{suffix}"] = None
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


def _analyze_shell(command: str) -> ShellAnalysis:
    st = _State()
    st.reserved = command
    if _CONTROL.search(command):
        st.reasons[CONTROL_REASON] = None
    _parse_into(command, st, 0, None)
    return st.result()


@functools.lru_cache(maxsize=2048)
def _analyze_shell_cached(command: str) -> ShellAnalysis:
    return _analyze_shell(command)


def analyze_shell(command: str) -> ShellAnalysis:
    """Parse a shell string (as ``sh -c`` would get it) and describe what it runs."""
    if len(command) <= _CACHE_MAX_CHARS:
        return _analyze_shell_cached(command)
    return _analyze_shell(command)


def analyze_argv(argv: Sequence[str]) -> ShellAnalysis:
    """An argv executed as is (no shell): simple unless argv[0] is a wrapper."""
    st = _State()
    if argv:
        words = tuple(argv)
        if any(_CONTROL.search(word) for word in words):
            st.reasons[CONTROL_REASON] = None  # as for the same words in a shell string (parity)
        st.reserved = "\x00".join(words)
        index = st.add(words)
        _builtin_evaluates(words, st, 0)
        _unwrap(index, words, (False,) * len(words), st, 0)
    return st.result()


# --------------------------------------------------------------------------------------------
# wrappers

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


class _Argv(NamedTuple):
    """The wrapper's words[start:end] run as an argv."""

    start: int
    end: int


class _Sh(NamedTuple):
    """A shell string the wrapper runs; None when it contains an expansion (cannot be analyzed)."""

    text: str | None


_Inner = _Argv | _Sh
_Unwrapped = tuple[str, list[_Inner]] | None


@dataclass(frozen=True, slots=True)
class _Spec:
    """Option grammar of a prefix wrapper: ``NAME [options] [NAME=VALUE…] [positionals] CMD…``."""

    short_arg: str = ""
    """Short options that take a value (attached or as the next word)."""
    short_opt_arg: str = ""
    """Short options with an optional, attached-only value (xargs -i[R])."""
    long_arg: frozenset[str] = frozenset()
    """Long options that take a value as the next word when not given with '='."""
    no_exec: str = ""
    """Short options that make the wrapper run no command (e.g. ``-p`` pid mode)."""
    no_exec_long: frozenset[str] = frozenset()
    shell_short: str = ""
    """Short option whose value is a shell string to parse (su -c)."""
    shell_long: frozenset[str] = frozenset()
    numeric: bool = False
    """``-N`` numeric options (nice -10)."""
    assignments: bool = False
    """NAME=VALUE words may precede the command (env, sudo)."""
    skip: int = 0
    """Positional words before the command (timeout DURATION, chrt PRIORITY, flock FILE)."""
    join: bool = False
    """The command words are joined with spaces and run by a shell (watch)."""
    join_unless: str = ""
    """Short option that turns ``join`` off (watch -x)."""


def _parse_options(
    spec: _Spec, words: tuple[str, ...], dynamic: tuple[bool, ...]
) -> tuple[int, tuple[str, bool] | None, bool, set[str]] | None:
    """Skip options. Returns (index of the first non-option word, shell string value (text,
    dynamic) if a shell option was seen, whether options ended with '--', short letters seen),
    or None when an option means nothing is run."""
    n = len(words)
    i = 1
    shell: tuple[str, bool] | None = None
    seen: set[str] = set()
    dashdash = False
    while i < n:
        w = words[i]
        if w == "--":
            i += 1
            dashdash = True
            break
        if len(w) < 2 or w[0] != "-":
            break
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            if name in spec.no_exec_long:
                return None
            if name in spec.shell_long:
                if eq:
                    shell = (value, dynamic[i])
                elif i + 1 < n:
                    shell = (words[i + 1], dynamic[i + 1])
                    i += 1
            elif not eq and name in spec.long_arg:
                i += 1
            i += 1
            continue
        if spec.numeric and w[1:].lstrip("+-").isdigit():
            i += 1
            continue
        j = 1
        while j < len(w):
            ch = w[j]
            seen.add(ch)
            if ch in spec.no_exec:
                return None
            if ch == spec.shell_short and ch:
                rest = w[j + 1 :]
                if rest:
                    shell = (rest, dynamic[i])
                elif i + 1 < n:
                    i += 1
                    shell = (words[i], dynamic[i])
                break
            if ch in spec.short_arg:
                if not w[j + 1 :]:
                    i += 1
                break
            if ch in spec.short_opt_arg:
                break
            j += 1
        i += 1
    return i, shell, dashdash, seen


def _prefix_wrapper(spec: _Spec) -> Callable[[str, tuple[str, ...], tuple[bool, ...]], _Unwrapped]:
    def unwrap(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
        parsed = _parse_options(spec, words, dynamic)
        if parsed is None:
            return None
        i, shell, _, seen = parsed
        n = len(words)
        if shell is not None:
            return label, [_Sh(None if shell[1] else shell[0])]
        if spec.assignments:
            while i < n and _ASSIGNMENT.match(words[i]):
                i += 1
        i += spec.skip
        if i >= n:
            return None
        if spec.join and not (spec.join_unless and spec.join_unless in seen):
            return label, [_joined(words, dynamic, i, n)]
        return label, [_Argv(i, n)]

    return unwrap


def _joined(words: tuple[str, ...], dynamic: tuple[bool, ...], start: int, end: int) -> _Inner:
    if any(dynamic[start:end]):
        return _Sh(None)
    return _Sh(" ".join(words[start:end]))


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "rbash", "yash", "posh"})


def _shell(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    scan = scan_shell_options(words)
    i = scan.operand
    if not (scan.dash_c or scan.long_command) or i is None:
        return None
    return f"{label} -c", [_Sh(None if dynamic[i] else words[i])]


def _eval(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    if len(words) < 2:
        return None
    return label, [_joined(words, dynamic, 1, len(words))]


def _command_builtin(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    i = 1
    n = len(words)
    while i < n and words[i].startswith("-") and len(words[i]) > 1:
        if words[i] == "--":
            i += 1
            break
        if "v" in words[i] or "V" in words[i]:
            return None
        i += 1
    return (label, [_Argv(i, n)]) if i < n else None


_ENV_SPEC = _Spec(
    short_arg="uCS",
    long_arg=frozenset({"--unset", "--chdir", "--split-string"}),
    assignments=True,
)


def _env(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    n = len(words)
    i = 1
    split: tuple[str, bool] | None = None
    while i < n:
        w = words[i]
        if w == "--":
            i += 1
            break
        if w == "-":
            i += 1
            continue
        if len(w) < 2 or w[0] != "-":
            break
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            if name == "--split-string":
                if eq:
                    split = (value, dynamic[i])
                elif i + 1 < n:
                    i += 1
                    split = (words[i], dynamic[i])
            elif not eq and name in _ENV_SPEC.long_arg:
                i += 1
            i += 1
            continue
        j = 1
        while j < len(w):
            ch = w[j]
            if ch in "uCS":
                rest = w[j + 1 :]
                if not rest and i + 1 < n:
                    i += 1
                    rest = words[i]
                if ch == "S":
                    split = (rest, dynamic[i])
                break
            j += 1
        i += 1
    while i < n and _ASSIGNMENT.match(words[i]):
        i += 1
    if split is not None:
        if split[1] or any(dynamic[i:]):
            return label, [_Sh(None)]
        rest = " ".join(_quote(w) for w in words[i:])
        return label, [_Sh(f"{split[0]} {rest}" if rest else split[0])]
    return (label, [_Argv(i, n)]) if i < n else None


_SAFE_WORD = re.compile(r"[\w@%+=:,./-]+", re.ASCII)


def _quote(word: str) -> str:
    if word and _SAFE_WORD.fullmatch(word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


def _su(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    """su / runuser: ``-c STRING`` anywhere (options are permuted); runuser ``-u USER CMD…``."""
    n = len(words)
    i = 1
    user_mode = False
    while i < n:
        w = words[i]
        if w == "--":
            i += 1
            break
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            if name in ("--command", "--session-command"):
                text, dyn = (value, dynamic[i]) if eq else (words[i + 1], dynamic[i + 1]) if i + 1 < n else ("", False)
                return label, [_Sh(None if dyn else text)]
            if not eq and name in ("--shell", "--group", "--supp-group", "--whitelist-environment", "--user"):
                user_mode = user_mode or name == "--user"
                i += 1
            i += 1
            continue
        if len(w) >= 2 and w[0] == "-":
            j = 1
            while j < len(w):
                ch = w[j]
                if ch == "c":
                    rest = w[j + 1 :]
                    if rest:
                        return label, [_Sh(None if dynamic[i] else rest)]
                    if i + 1 < n:
                        return label, [_Sh(None if dynamic[i + 1] else words[i + 1])]
                    return None
                if ch in "sgGwu":
                    if ch == "u" and label == "runuser":
                        user_mode = True
                    if not w[j + 1 :]:
                        i += 1
                    break
                j += 1
            i += 1
            continue
        if user_mode:
            break
        i += 1  # su [USER] [ARGS]: arguments go to the shell, look on for -c
    if user_mode and i < n:
        return label, [_Argv(i, n)]
    return None


def _find(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    inners: list[_Inner] = []
    n = len(words)
    i = 1
    while i < n:
        if words[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            start = i + 1
            end = start
            while end < n and words[end] not in (";", "+"):
                end += 1
            if end > start:
                inners.append(_Argv(start, end))
            i = end + 1
        else:
            i += 1
    return (f"{label} -exec", inners) if inners else None


def _sg(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    i = 2
    if i < len(words) and words[i] == "-c":
        i += 1
    if i >= len(words):
        return None
    return label, [_joined(words, dynamic, i, len(words))]


def _parallel(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    parsed = _parse_options(_PARALLEL_SPEC, words, dynamic)
    if parsed is None:
        return None
    i = parsed[0]
    end = i
    n = len(words)
    while end < n and words[end] not in (":::", "::::", ":::+", "::::+"):
        end += 1
    if end <= i:
        return None
    return label, [_joined(words, dynamic, i, end)]


_FLOCK_SPEC = _Spec(short_arg="wE", long_arg=frozenset({"--timeout", "--wait", "--conflict-exit-code"}))


def _flock(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    """``flock [options] FILE CMD…`` or ``flock [options] FILE -c STRING`` (``flock FD`` runs nothing)."""
    parsed = _parse_options(_FLOCK_SPEC, words, dynamic)
    if parsed is None:
        return None
    i = parsed[0] + 1
    n = len(words)
    if i >= n:
        return None
    if words[i] in ("-c", "--command"):
        return (label, [_Sh(None if dynamic[i + 1] else words[i + 1])]) if i + 1 < n else None
    return label, [_Argv(i, n)]


def _coproc(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    """``coproc [NAME] COMMAND``: a NAME only before a compound command (``coproc N { …; }``)."""
    n = len(words)
    i = 1
    if i < n and words[i] == "{" and not dynamic[i]:
        i += 1
    elif i + 1 < n and words[i + 1] == "{" and not dynamic[i + 1]:
        i += 2
    if i >= n:
        return None
    if dynamic[i] and words[i].startswith("("):
        return label, []  # ``coproc (…)``: the subshell's commands are recorded with the words
    return label, [_Argv(i, n)]


def _trap(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    """``trap [--] ACTION SIGNAL…``: ACTION is a command string run later (``-l``/``-p`` run nothing;
    one operand, ``-``, an empty string or a number as ACTION reset signals)."""
    n = len(words)
    i = 1
    while i < n and len(words[i]) > 1 and words[i][0] == "-":
        if words[i] == "--":
            i += 1
            break
        if any(ch in words[i] for ch in "lpP"):
            return None
        i += 1
    if n - i < 2:
        return None
    action = words[i]
    if not dynamic[i] and (action in ("-", "") or action.isdigit()):
        return None
    return label, [_Sh(None if dynamic[i] else action)]


def _option_values(words: tuple[str, ...], dynamic: tuple[bool, ...], with_value: str) -> list[tuple[str, str, bool]]:
    """(letter, value, dynamic) of the short options of a builtin, up to the first operand or ``--``."""
    out: list[tuple[str, str, bool]] = []
    n = len(words)
    i = 1
    while i < n:
        w = words[i]
        if w == "--" or len(w) < 2 or w[0] != "-":
            break
        for j in range(1, len(w)):
            ch = w[j]
            if ch in with_value:
                if w[j + 1 :]:
                    out.append((ch, w[j + 1 :], dynamic[i]))
                elif i + 1 < n:
                    i += 1
                    out.append((ch, words[i], dynamic[i]))
                break
        i += 1
    return out


def _mapfile(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    """``mapfile``/``readarray -C CALLBACK``: the callback is evaluated as a command string."""
    inners: list[_Inner] = [
        _Sh(None if dyn else value) for ch, value, dyn in _option_values(words, dynamic, "dnOsuCc") if ch == "C"
    ]
    return (f"{label} -C", inners) if inners else None


def _compgen(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    """``compgen -C COMMAND`` runs COMMAND; ``-W WORDLIST`` expands the words again (``$(…)`` runs)."""
    inners: list[_Inner] = []
    for ch, value, dyn in _option_values(words, dynamic, "AGWXPSFCo"):
        if ch == "C":
            inners.append(_Sh(None if dyn else value))
        elif ch == "W" and (dyn or "$" in value or "`" in value):
            inners.append(_Sh(None if dyn else f": {value}"))
    return (label, inners) if inners else None


def _alias(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    """``alias NAME=VALUE…``: each VALUE is the command string the name will run."""
    inners: list[_Inner] = []
    for i in range(1, len(words)):
        name, eq, value = words[i].partition("=")
        if eq and name and not name.startswith("-") and (value or dynamic[i]):
            inners.append(_Sh(None if dynamic[i] else value))
    return (label, inners) if inners else None


def _busybox(label: str, words: tuple[str, ...], dynamic: tuple[bool, ...]) -> _Unwrapped:
    if len(words) < 2 or words[1].startswith("-"):
        return None
    return label, [_Argv(1, len(words))]


_PARALLEL_SPEC = _Spec(
    short_arg="aCdEIjLnNPSX",
    long_arg=frozenset(
        {
            "--arg-file",
            "--colsep",
            "--delimiter",
            "--delay",
            "--timeout",
            "--joblog",
            "--results",
            "--tmpdir",
            "--workdir",
            "--env",
            "--sshlogin",
            "--basefile",
            "--jobs",
            "--max-args",
            "--max-replace-args",
            "--max-lines",
            "--retries",
            "--halt",
            "--load",
            "--memfree",
            "--tagstring",
            "--sshloginfile",
        }
    ),
)

_XARGS_SPEC = _Spec(
    short_arg="IndPLsaE",
    short_opt_arg="iel",
    long_arg=frozenset(
        {
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--max-lines",
            "--max-chars",
            "--process-slot-var",
        }
    ),
)

_PREFIX_SPECS: dict[str, _Spec] = {
    "exec": _Spec(short_arg="a"),
    "builtin": _Spec(),
    "nohup": _Spec(),
    "setsid": _Spec(),
    "unbuffer": _Spec(),
    "fakeroot": _Spec(short_arg="lsi", long_arg=frozenset({"--lib", "--faked"})),
    "proxychains": _Spec(short_arg="f"),
    "proxychains4": _Spec(short_arg="f"),
    "torsocks": _Spec(short_arg="uapP", long_arg=frozenset({"--user", "--pass", "--address", "--port"})),
    "catchsegv": _Spec(),
    "time": _Spec(short_arg="fo", long_arg=frozenset({"--format", "--output"})),
    "nice": _Spec(short_arg="n", long_arg=frozenset({"--adjustment"}), numeric=True),
    "ionice": _Spec(
        short_arg="cn",
        long_arg=frozenset({"--class", "--classdata"}),
        no_exec="pPu",
        no_exec_long=frozenset({"--pid", "--pgid", "--uid"}),
    ),
    "stdbuf": _Spec(short_arg="ioe", long_arg=frozenset({"--input", "--output", "--error"})),
    "chrt": _Spec(
        short_arg="TPD",
        long_arg=frozenset({"--sched-runtime", "--sched-period", "--sched-deadline"}),
        no_exec="p",
        no_exec_long=frozenset({"--pid"}),
        skip=1,
    ),
    "taskset": _Spec(no_exec="p", no_exec_long=frozenset({"--pid"}), skip=1),
    "timeout": _Spec(short_arg="sk", long_arg=frozenset({"--signal", "--kill-after"}), skip=1),
    "script": _Spec(
        short_arg="EIOBTmo",
        short_opt_arg="t",
        long_arg=frozenset({"--echo", "--log-in", "--log-out", "--log-io", "--log-timing", "--logging-format"}),
        shell_short="c",
        shell_long=frozenset({"--command"}),
        skip=10**6,  # without -c script runs an interactive shell: nothing to unwrap
    ),
    "watch": _Spec(
        short_arg="nq",
        long_arg=frozenset({"--interval", "--equexit"}),
        join=True,
        join_unless="x",
    ),
    "xargs": _XARGS_SPEC,
    "sudo": _Spec(
        short_arg="CDgprtTUu",
        long_arg=frozenset(
            {
                "--close-from",
                "--chdir",
                "--group",
                "--prompt",
                "--role",
                "--type",
                "--command-timeout",
                "--other-user",
                "--user",
                "--host",
            }
        ),
        no_exec="elvKVh",
        no_exec_long=frozenset({"--edit", "--list", "--validate", "--remove-timestamp", "--version", "--help"}),
        assignments=True,
    ),
    "doas": _Spec(short_arg="ua", no_exec="C"),
    "pkexec": _Spec(long_arg=frozenset({"--user"})),
    "chroot": _Spec(long_arg=frozenset({"--userspec", "--groups"}), skip=1),
    "unshare": _Spec(
        short_arg="SGRw",
        long_arg=frozenset(
            {
                "--setuid",
                "--setgid",
                "--root",
                "--wd",
                "--setgroups",
                "--map-user",
                "--map-group",
                "--map-users",
                "--map-groups",
                "--propagation",
                "--monotonic",
                "--boottime",
            }
        ),
    ),
    "nsenter": _Spec(
        short_arg="tSG",
        short_opt_arg="mutinpUCTrw",
        long_arg=frozenset({"--target", "--setuid", "--setgid"}),
    ),
    "systemd-run": _Spec(
        short_arg="upMHE",
        long_arg=frozenset(
            {
                "--unit",
                "--property",
                "--machine",
                "--host",
                "--setenv",
                "--description",
                "--slice",
                "--uid",
                "--gid",
                "--nice",
                "--working-directory",
                "--on-active",
                "--on-boot",
                "--on-startup",
                "--on-unit-active",
                "--on-unit-inactive",
                "--on-calendar",
                "--timer-property",
                "--path-property",
                "--socket-property",
                "--service-type",
            }
        ),
    ),
    "strace": _Spec(short_arg="abeEIoOpPsSuUX", no_exec=""),
    "ltrace": _Spec(short_arg="aADeFlnopsuwx"),
    "valgrind": _Spec(),
}

_WRAPPERS: dict[str, Callable[[str, tuple[str, ...], tuple[bool, ...]], _Unwrapped]] = {
    **{name: _prefix_wrapper(spec) for name, spec in _PREFIX_SPECS.items()},
    **dict.fromkeys(_SHELLS, _shell),
    "eval": _eval,
    "command": _command_builtin,
    "env": _env,
    "su": _su,
    "runuser": _su,
    "find": _find,
    "sg": _sg,
    "parallel": _parallel,
    "busybox": _busybox,
    "flock": _flock,
    "coproc": _coproc,
    "trap": _trap,
    "mapfile": _mapfile,
    "readarray": _mapfile,
    "compgen": _compgen,
    "alias": _alias,
}

WRAPPER_NAMES: frozenset[str] = frozenset(_WRAPPERS)
"""Basenames of argv[0] that run another command."""
_WRAPPER_BASENAMES = WRAPPER_NAMES


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _unwrap(index: int, words: tuple[str, ...], dynamic: tuple[bool, ...], st: _State, depth: int) -> list[int]:
    """If ``words`` is a wrapper, record the command(s) it runs (recursively); return their indices."""
    if not words or dynamic[0]:
        return []
    name = _basename(words[0])
    handler = _WRAPPERS.get(name)
    if handler is None:
        return []
    unwrapped = handler(name, words, dynamic)
    if unwrapped is None:
        return []
    label, inners = unwrapped
    st.reasons[f"wrapper '{label}' runs another command"] = None
    if st.wrap_level >= MAX_WRAPPER_DEPTH or depth > _MAX_NESTING:
        st.reasons["wrapper nesting too deep"] = None
        return []
    st.wrap_level += 1
    out: list[int] = []
    try:
        for inner in inners:
            if isinstance(inner, _Argv):
                start, end = inner
                inner_words = words[start:end]
                inner_dynamic = dynamic[start:end]
                j = st.add(inner_words)
                st.wraps.append((index, j))
                if inner_dynamic[0]:
                    st.reasons["expansion in command word"] = None
                _builtin_evaluates(inner_words, st, depth + 1)
                out.append(j)
                out += _unwrap(j, inner_words, inner_dynamic, st, depth + 1)
            else:
                text = inner.text
                if text is None:
                    st.reasons[f"'{label}' runs a command string that cannot be analyzed"] = None
                    continue
                found = _parse_into(text, st, depth + 1, label)
                st.wraps.extend((index, j) for j in found)
                out += found
    finally:
        st.wrap_level -= 1
    return out
