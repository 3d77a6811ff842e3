"""After the walk: variables that change what runs, code read from input, and which programs are opaque."""

from __future__ import annotations

import functools
import re

from orchestrator.gate.env_keys import changes_programs
from orchestrator.gate.programs import SHELL, Program, lookup, program_name
from orchestrator.gate.scripts import reads_code_from_input
from orchestrator.gate.walkstate import FROM_FILE, WalkState


@functools.cache
def _has_dangerous_options(program: Program) -> bool:
    """Options that run a program or write a file (``rg --pre``, ``sort --compress-program``,
    ``git log --output``): an argument the gate cannot see could be one."""
    subs = program.subcommands.values() if program.subcommands is not None else ()
    return any(o.runs is not None or o.risk is not None for p in (program, *subs) for o in p.options)


def computed_options(words: tuple[str, ...], dynamic: tuple[bool, ...], st: WalkState) -> None:
    """An argument computed at run time (``rg ${x:---pre=sudo} .``, ``sort "$OPTS" f``), before ``--``,
    of a program whose options run programs or write files: what it runs is not seen."""
    if not words or dynamic[0] or not any(dynamic[1:]):
        return
    program = lookup(program_name(words[0]))
    if program is None or not _has_dangerous_options(program):
        return
    for word, computed in zip(words[1:], dynamic[1:], strict=True):
        if word == "--":
            return
        if computed:
            st.blind(
                f"an argument of '{program_name(words[0])}' is computed at run time and could be one of its"
                " options that run programs or write files",
                complex_too=False,
            )
            return


_ASSIGNING = frozenset({"env", "export", "declare", "typeset", "local", "readonly", "sudo"})
_SETTING = frozenset({"read", "mapfile", "readarray", "getopts", "export", "declare", "typeset"})
"""Builtins that set (or export) a variable named by a plain word: ``read BASH_ENV``, ``printf -v PS4 …``."""
_NAME_EQ = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _assigned_names(st: WalkState) -> dict[str, None]:
    """Variables the command sets for what it runs: ``A=1 cmd``, ``A=1``, ``export A=1``, ``env A=1 cmd``,
    ``for A in …``, ``read A``, ``printf -v A``, ``export A``."""
    names = dict(st.assignments)
    for words in st.commands:
        if not words:
            continue
        program = program_name(words[0])
        if program == "printf":
            names.update(dict.fromkeys(_printf_target(words)))
            continue
        for word in words[1:]:
            m = _NAME_EQ.match(word) if program in _ASSIGNING else None
            if m is not None:
                names[m.group(1)] = None
            elif program in _SETTING and _NAME.fullmatch(word):
                names[word] = None
    return names


def _printf_target(words: tuple[str, ...]) -> list[str]:
    """The variable ``printf -v NAME`` (or ``-vNAME``) sets; its format and arguments set nothing."""
    for i, word in enumerate(words[1:], start=1):
        if word == "-v":
            return list(words[i + 1 : i + 2])
        if word.startswith("-v"):
            return [word[2:]]
        if not word.startswith("-") or word == "--":
            break
    return []


def _keyword_mode(st: WalkState) -> bool:
    """``set -k`` (``-o keyword``): NAME=VALUE arguments anywhere go into the environment of a command."""
    for words in st.commands:
        if words and words[0] == "set":
            flags = [w for w in words[1:] if w[:1] in "-+" and not w.startswith("--")]
            if any(w.startswith("-") and "k" in w for w in flags) or ("keyword" in words and "-o" in words):
                return True
    return False


def finish(st: WalkState) -> None:
    """What the gate cannot see of each command once the walk is done: code a shell or interpreter
    reads from its input; programs it does not know (opaque) with their operands."""
    for name in _assigned_names(st):
        if changes_programs(name):
            st.blind(f"'{name}' set by the command changes what programs run or load", complex_too=False)
    if _keyword_mode(st):
        st.blind("set -k: NAME=VALUE arguments change the environment of what runs", complex_too=False)
    fed = {j for _, j in st.flows}
    inherited: dict[int, str | None] = {}
    for i, j in st.wraps:
        if i in st.stdin and j not in st.stdin and j not in st.from_input:
            inherited[j] = st.stdin[i]
    for j, words in enumerate(st.commands):
        if not words:
            continue
        name = program_name(words[0])
        program = lookup(name)
        if program is None:
            if "$" not in words[0] and "`" not in words[0]:
                st.opaque.append((name, words[1:]))
            continue
        reader = reads_code_from_input(words)
        if reader is None:
            continue
        source = st.stdin.get(j, inherited.get(j, "" if j not in fed else None))
        if source == FROM_FILE or (source and (program is SHELL or name in ("source", "."))):
            continue  # a script file, or a here-document parsed as what the shell runs
        if j in fed:
            st.blind(
                f"'{reader}' runs code it is fed (pipe or substitution), which the gate does not see", complex_too=False
            )
        elif source is None:
            st.blind(f"'{reader}' runs code from a here-document or here-string with expansions", complex_too=False)
        elif source:
            st.blind(
                f"'{reader}' runs {program.language} code from a here-document, which the gate does not read",
                complex_too=False,
            )
        else:
            st.blind(f"'{reader}' reads the code it runs from its input (interactive or stdin)", complex_too=False)
