"""Which commands are interactive shells or REPLs: what a profile with ``sessions.interactive_shells: false``
refuses to open as a session (a command typed into such a shell never meets the gate: the known limit of
sessions, so tenants that need one-shot commands only can forbid them).

Knowledge as data: each program, whether a first non-option argument is a script it runs instead of its
prompt, and the options after which it runs something given. A program not listed is not a REPL here.
"""

from __future__ import annotations

import posixpath
import re
import shlex

#: program -> (a positional argument is a script to run, options that run something given)
REPLS: dict[str, tuple[bool, frozenset[str]]] = {
    **dict.fromkeys(("sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "fish"), (True, frozenset({"-c"}))),
    **dict.fromkeys(("python", "python2", "python3", "pypy", "pypy3"), (True, frozenset({"-c", "-m"}))),
    **dict.fromkeys(("node", "nodejs"), (True, frozenset({"-e", "--eval", "-p", "--print"}))),
    **dict.fromkeys(("ruby", "perl", "lua", "php", "julia"), (True, frozenset({"-e", "-E", "-r"}))),
    "psql": (False, frozenset({"-c", "-f", "--command", "--file"})),
    "mysql": (False, frozenset({"-e", "--execute"})),
    **dict.fromkeys(("irb", "pry", "ghci", "gdb", "lldb"), (False, frozenset())),
}
#: options that force the prompt even with a script
FORCE_INTERACTIVE = frozenset({"-i", "--interactive"})
#: commands that run the next words as a command (their own options skipped)
WRAPPERS = frozenset({"env", "exec", "command", "nice", "nohup", "stdbuf", "setsid", "timeout", "busybox"})
_VERSIONED = re.compile(r"^(python|pypy|ruby|perl|lua|php|node)[0-9.]+$")
_OPERATORS = frozenset({";", "&&", "||", "|", "&", "(", ")", ";;", "|&"})


def _program(word: str) -> str:
    name = posixpath.basename(word)
    match = _VERSIONED.match(name)
    return match.group(1) if match else name


def _simple_commands(text: str) -> list[list[str]]:
    lexer = shlex.shlex(text.replace("\n", ";"), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    for token in lexer:
        if token in _OPERATORS:
            commands.append([])
        else:
            commands[-1].append(token)
    return [c for c in commands if c]


def _starts_repl(words: list[str]) -> bool:
    while words and (("=" in words[0] and not words[0].startswith("-")) or _program(words[0]) in WRAPPERS):
        words = words[1:]
        while words and (words[0].startswith("-") or words[0][:1].isdigit()):  # e.g. env -i, timeout 5
            words = words[1:]
    if not words or _program(words[0]) not in REPLS:
        return False
    takes_script, runs_given = REPLS[_program(words[0])]
    args = words[1:]
    if any(arg in FORCE_INTERACTIVE for arg in args):
        return True
    for arg in args:
        if arg in runs_given or any(arg.startswith(o) for o in runs_given if len(o) == 2 and o != "-i"):
            return False
        if arg == "-" or (takes_script and not arg.startswith("-")):
            return arg == "-"  # '-': the program reads its commands from stdin (the session's input)
    return True


def is_interactive_shell(argv: tuple[str, ...] | list[str]) -> bool:
    """Whether ``argv`` (``bash -c STRING`` for a shell string) starts an interactive shell or REPL in any
    of its simple commands. A shell string that cannot be split counts as one (fail closed)."""
    words = list(argv)
    if len(words) == 3 and _program(words[0]) in ("bash", "sh") and words[1] == "-c":
        try:
            return any(_starts_repl(command) for command in _simple_commands(words[2]))
        except ValueError:
            return True
    return _starts_repl(words)
