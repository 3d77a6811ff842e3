"""The program table as a document (``docs/programs.md``): ``python -m orchestrator.gate.programs.describe``.

A test keeps the committed document equal to this output, so the document cannot drift from the table.
"""

from __future__ import annotations

from orchestrator.gate.programs import PROGRAMS, Family, Program, Runs
from orchestrator.gate.programs.interpreters import PATTERNS as INTERPRETER_PATTERNS
from orchestrator.gate.programs.launchers import LOADER_NAMES
from orchestrator.gate.programs.tools import PATTERNS as TOOL_PATTERNS

_RUNS_WORDS = {
    Runs.ARGV: "an argv",
    Runs.PROGRAM: "a program",
    Runs.SHELL: "a shell string",
    Runs.SPLIT: "a string split into words",
    Runs.CODE: "code",
    Runs.LOAD: "code loaded from a file or module",
    Runs.MODULE: "a module",
    Runs.PIPE: "a command when it starts with | or !",
    Runs.EXPANDS: "words expanded again",
    Runs.ACTION: "a command in exec=CMD",
    Runs.BINDS: "binds a command name",
}
_HEADER = """# The program table

Generated from `orchestrator/gate/programs/` by `python -m orchestrator.gate.programs.describe`; a test
keeps this file equal to that output. Every analyzer of the gate reads command lines through this one
table and its one option scanner: command patterns (`rm -rf` in any spelling), the wrappers' inner
commands, risk, and what the gate cannot see.

A program in no table is **opaque**: an allowlist entry naming it may allow it, but a denylisted program
among its words makes the gate ask. A wrapper with an option the table does not know before its
command cannot have its command located: the gate says so and asks (and matches the denylist on the
words as they are).
"""


def _where(program: Program) -> str:
    command = program.command
    if command is None:
        return ""
    parts = [command.where.value]
    if command.skip:
        parts.append(f"after {command.skip} operand{'s' if command.skip > 1 else ''}")
    if command.assignments:
        parts.append("NAME=VALUE first")
    if command.via_shell:
        parts.append(f"given to {' '.join(command.via_shell)}")
    if command.string_option:
        parts.append(f"or {'/'.join(command.string_option)} STRING")
    if command.until:
        parts.append(f"up to {' '.join(command.until)}")
    if command.starts:
        parts.append(f"{'/'.join(command.starts)} … {' or '.join(command.ends)}")
    if command.handler:
        parts.append(f"locator `{command.handler}`")
    if command.default is not None:
        shell = " ".join(command.default)
        parts.append(
            f"none: `{shell}` reading its input"
            + (f" (with {'/'.join(command.default_with)})" if command.default_with else "")
        )
    return "; ".join(parts)


def _running_options(program: Program) -> str:
    out = []
    for opt in program.options:
        if opt.runs is not None:
            out.append(f"`{'`/`'.join(opt.spellings)}` ({_RUNS_WORDS[opt.runs]})")
    return ", ".join(out)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown() -> str:
    lines = [_HEADER]
    for family in Family:
        members = [p for p in PROGRAMS if p.family is family]
        lines.append(f"\n## {family.name.lower()}: {family.value}\n")
        lines.append("| names | what | its command | options whose value runs | findings |")
        lines.append("|---|---|---|---|---|")
        for program in members:
            findings = "; ".join(f"{level.label}: {what}" for level, what in program.findings)
            check = f" (check `{program.check}`)" if program.check else ""
            names = " ".join(f"`{n}`" for n in program.names)
            lines.append(
                f"| {_cell(names)} | {_cell(program.summary)} | {_cell(_where(program))} |"
                f" {_cell(_running_options(program))} | {_cell(findings + check)} |"
            )
            for name, sub in sorted((program.subcommands or {}).items()):
                running = _running_options(sub)
                risky = ", ".join(f"`{o.spellings[0]}` ({o.risk[1]})" for o in sub.options if o.risk is not None)
                if running or risky:
                    lines.append(f"| `{program.names[0]} {name}` | subcommand | | {_cell(running)} | {_cell(risky)} |")
    patterns = [*(p for p, _ in INTERPRETER_PATTERNS), *(p for p, _ in TOOL_PATTERNS), LOADER_NAMES]
    lines.append("\n## Names matched as patterns\n")
    lines.extend(f"- `{pattern}`" for pattern in patterns)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
