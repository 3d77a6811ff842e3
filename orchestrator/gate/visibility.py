"""After the walk: variables that change what runs, code read from input, and which programs are opaque."""

from __future__ import annotations

import re

from orchestrator.gate.env_keys import changes_programs
from orchestrator.gate.programs import SHELL, lookup, program_name
from orchestrator.gate.scripts import reads_code_from_input
from orchestrator.gate.walkstate import FROM_FILE, WalkState

_ASSIGNING = frozenset({"env", "export", "declare", "typeset", "local", "readonly", "sudo"})
_NAME_EQ = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=")


def _assigned_names(st: WalkState) -> dict[str, None]:
    """Variables the command sets for what it runs: ``A=1 cmd``, ``A=1``, ``export A=1``, ``env A=1 cmd``."""
    names = dict(st.assignments)
    for words in st.commands:
        if words and program_name(words[0]) in _ASSIGNING:
            for word in words[1:]:
                m = _NAME_EQ.match(word)
                if m is not None:
                    names[m.group(1)] = None
    return names


def finish(st: WalkState) -> None:
    """What the gate cannot see of each command once the walk is done: code a shell or interpreter
    reads from its input; programs it does not know (opaque) with their operands."""
    for name in _assigned_names(st):
        if changes_programs(name):
            st.blind(f"'{name}' set by the command changes what programs run or load", complex_too=False)
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
