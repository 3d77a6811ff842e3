"""After the walk: what each command reads as code from its input, and which programs are opaque."""

from __future__ import annotations

from orchestrator.gate.programs import SHELL, Family, lookup, program_name
from orchestrator.gate.scripts import reads_code_from_input
from orchestrator.gate.walkstate import FROM_FILE, WalkState


def finish(st: WalkState) -> None:
    """What the gate cannot see of each command once the walk is done: code a shell or interpreter
    reads from its input; programs it does not know (opaque) with their operands."""
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
        if program.family is Family.TOOL or (program.family is Family.BUILTIN and program.command is None):
            continue
        reader = reads_code_from_input(words)
        if reader is None:
            continue
        source = st.stdin.get(j, inherited.get(j, "" if j not in fed else None))
        if source == FROM_FILE or (source and program is SHELL):
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
