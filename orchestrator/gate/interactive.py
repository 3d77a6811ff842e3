"""Which session commands start an interactive shell or REPL: what a profile with
``sessions.interactive_shells: false`` refuses (a command typed into such a shell never meets the gate:
the known limit of sessions, so tenants that need one-shot commands only can forbid them).

Built on the gate's own analysis (the same parser and program tables that decide commands): every simple
command found anywhere in the string — through wrappers (``env``, ``exec``, ``timeout``, ``xargs``,
``find -exec`` ...), nested shell strings, reserved words and redirections — is asked whether it runs code
read from its input (``scripts.reads_code_from_input``: a shell without ``-c`` or a script, ``python3``,
``python3 -``, ``bash /dev/stdin``, ``-i``). What the gate could not see (a computed program name, a parse
failure, code it does not read) counts as interactive: fail closed. Programs that are REPLs but not in the
gate's tables are a table here, each with the options after which it runs something given instead.

Not closable by a list, and documented as the limit: a program that reads commands in its own way (an
editor, ``awk``, a loop ``while read l; do eval "$l"; done``) — only an allowlist policy bounds those.
"""

from __future__ import annotations

import re

from orchestrator.gate.analysis import ShellAnalysis
from orchestrator.gate.intent import analyze_argv
from orchestrator.gate.programs import program_name
from orchestrator.gate.scripts import reads_code_from_input

#: REPLs outside the gate's program tables -> options that make them run something given (then they are not)
OTHER_REPLS: dict[str, frozenset[str]] = {
    "irb": frozenset(),
    "pry": frozenset(),
    "ghci": frozenset({"-e"}),
    "gdb": frozenset({"-batch", "--batch", "-x"}),
    "lldb": frozenset({"-b", "--batch"}),
    "psql": frozenset({"-c", "-f", "--command", "--file"}),
    "mysql": frozenset({"-e", "--execute"}),
    "sqlite3": frozenset(),
    "redis-cli": frozenset(),
    "R": frozenset({"-e", "-f", "--file"}),
    "erl": frozenset({"-eval", "-noshell"}),
    "iex": frozenset(),
    "jshell": frozenset(),
    "clojure": frozenset({"-e", "-M", "-X"}),
    "scala": frozenset({"-e"}),
    "sbcl": frozenset({"--script", "--eval"}),
}


#: what the gate could not see that is code given on the command line (``python3 -c CODE``, ``node -e "$X"``):
#: not a prompt; anything else unseen counts as one
_GIVEN_CODE = re.compile(r"^'\S+ -\S*' runs \S+ code (the gate cannot read|that cannot be analyzed)$")


def _other_repl(words: tuple[str, ...]) -> bool:
    name = program_name(words[0]) if words else ""
    given = OTHER_REPLS.get(name)
    if given is None:
        return False
    return not any(w in given or any(w.startswith(g + "=") for g in given) for w in words[1:])


def starts_interactive_shell(analysis: ShellAnalysis) -> str | None:
    """Why the analysed command starts an interactive shell or REPL (a program name, or what the gate
    could not see), or None."""
    blind = [reason for reason in analysis.unseen if not _GIVEN_CODE.match(reason)]
    if blind:
        return blind[0]
    for words in analysis.commands:
        if not words:
            continue
        found = reads_code_from_input(words)
        if found is not None:
            return found
        if _other_repl(words):
            return program_name(words[0])
    return None


def is_interactive_shell(argv: tuple[str, ...] | list[str]) -> bool:
    """:func:`starts_interactive_shell` of an argv (``bash -c STRING`` is analysed as that string)."""
    return starts_interactive_shell(analyze_argv(list(argv))) is not None
