"""Checks of programs that run code: shells, interpreters, awk programs and sed scripts.

Everything about their command lines comes from the program table (``gate.programs.interpreters``):
which options carry code, load code or run a module, which only print information, where the
script operand is. One scanner reads them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from orchestrator.gate.commands import scan_shell_options
from orchestrator.gate.findings import HIGH, MEDIUM, Check, Finding
from orchestrator.gate.programs import Runs, lookup, scan
from orchestrator.gate.scripts import awk_program, sed_script, stdin_script


def shell_script(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """A shell with a script operand runs a file; without ``-c``/a script it reads commands from its
    input (interactive with a terminal). ``-c`` strings are analyzed by the intent (not here);
    stdin fed by a pipe or a here-document is judged by the data-flow checks."""
    invocation = scan_shell_options(words)
    if invocation.dash_c:
        return
    if invocation.operand is not None:
        if not stdin_script(words[invocation.operand]):
            out.append(Finding(HIGH, f"{prog} runs a script file"))
    elif not invocation.info:
        out.append(Finding(HIGH, f"{prog} runs commands from its input (interactive or stdin)"))


def interpreter(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """Code given on the command line, code or modules loaded, a module run (medium, like pytest; high
    next to an information option: ``python3 -m x --version`` must not pass for ``--version``), a
    script file, or code from its input."""
    program = lookup(prog)
    assert program is not None
    found = scan(program, words)
    if program.whole:
        if len(words) > 1 and all(h.opt is not None and h.opt.info for h in found.hits) and not found.positionals:
            return
        out.append(Finding(HIGH, f"{prog} runs code (any command but --version)"))
        return
    for hit in found.hits:
        runs = hit.opt.runs if hit.opt is not None else None
        if runs is Runs.CODE:
            out.append(Finding(HIGH, f"{prog} {hit.spelling} runs code given on the command line"))
            return
        if runs is Runs.LOAD:
            out.append(Finding(HIGH, f"{prog} {hit.spelling} runs or loads code from a module or file"))
            return
        if runs is Runs.MODULE:
            after = words[found.end :]
            index = {s for o in program.options if o.info for s in o.spellings}
            if found.info or any(word in index for word in after):
                out.append(
                    Finding(HIGH, f"{prog} {hit.spelling} runs a module (an information option does not stop it)")
                )
            else:
                out.append(Finding(MEDIUM, f"{prog} {hit.spelling} runs a module"))
            return
    if found.end < len(words):
        if words[found.end] == "-":
            out.append(Finding(HIGH, f"{prog} runs code from its input (interactive or stdin)"))
        else:
            out.append(Finding(HIGH, f"{prog} runs a script file"))
    elif not found.info:
        out.append(Finding(HIGH, f"{prog} runs code from its input (interactive or stdin)"))


def _w_exec(value: str) -> bool:
    """Whether awk's ``-W`` value asks for ``exec FILE``: mawk reads a comma-separated list of
    abbreviations in any case (``-We f``, ``-W E f``, ``-W i,ex f``), gawk a long option's prefix."""
    return any(
        item and "exec".startswith(item)
        for item in (part.split("=", 1)[0].strip().lower() for part in value.split(","))
    )


def _awk(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """Program files/libraries (``-f``, ``-E``, ``-i``, ``-l``, ``-W exec``) are unknown code: HIGH.
    Program text (``-e``/``--source`` or the first operand) is HIGH when it calls ``system``, pipes
    to or from a command, redirects ``print`` into a file or uses ``@``; not with ``--sandbox``."""
    program = lookup(prog)
    found = scan(program, words)
    programs: list[str] = []
    loaded: str | None = None
    for hit in found.hits:
        if hit.opt is None or hit.value is None:
            continue
        if hit.opt.runs is Runs.CODE:
            programs.append(hit.value)
        elif loaded is None and (hit.opt.runs is Runs.LOAD or (hit.opt.name == "-W" and _w_exec(hit.value))):
            loaded = hit.opt.spellings[0]
    if loaded is not None:
        out.append(Finding(HIGH, f"{prog} {loaded} runs a program file or library"))
    elif not programs and found.end < len(words):
        programs.append(words[found.end])
    if found.has("--sandbox"):
        return
    for text in programs:
        for what in awk_program(text):
            out.append(Finding(HIGH, f"{prog} program {what}"))


def _sed(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """The script (``-e`` values, or the first operand without ``-e``/``-f``): ``e`` and ``s///e``
    run commands, ``w`` writes files; a script the reader cannot follow is high too."""
    found = scan(lookup(prog), words)
    if found.has("--sandbox"):
        return
    scripts = [h.value for h in found.hits if h.opt is not None and h.opt.runs is Runs.CODE and h.value is not None]
    named = any(h.opt is not None and h.opt.runs in (Runs.CODE, Runs.LOAD) for h in found.hits)
    if not named and found.positionals:
        scripts.append(words[found.positionals[0]])
    if not scripts:
        return
    findings, ok = sed_script("\n".join(scripts))
    for what in findings:
        out.append(Finding(HIGH, f"{prog} script {what}"))
    if not ok and not findings:
        out.append(Finding(HIGH, f"{prog} script could not be analyzed"))


CHECKS: dict[str, Check] = {"awk": _awk, "sed": _sed}
