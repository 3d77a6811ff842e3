"""Command patterns for denylists, allowlists and rules: ``"rm -rf"``, ``"git push --force"``, ``"mkfs*"``.

A pattern is split like a shell would (``shlex``) into a program, flags and positionals:

* **program** - the basename of argv[0] (``/bin/rm`` and ``\\rm`` are ``rm``); the pattern's program
  may be an ``fnmatch`` glob (``mkfs*``, ``python3*``), case-sensitive. ``CommandPattern.program`` is
  the name to index on, or ``"*"`` for a glob.
* **flags** - every flag of the pattern must be present in the command, in any spelling: bundled or
  separate short flags (``-rf`` = ``-fr`` = ``-r -f`` = ``-rfv``), long flags (``--force``, a value
  after ``=`` is ignored), unambiguous GNU-style abbreviations of the program's long flags
  (``--recur``), and the equivalences of the program table. Flags not in the table must be spelled
  the same (a short flag stays case-sensitive: ``-r`` is not ``-R`` unless the table says so).
* **positionals** - the pattern's positionals must be a prefix of the command's positionals (words
  that are not flags, and not values of options that take one; ``--`` ends flags).
  Positionals are compared literally (``rm -rf /*`` means the literal word ``/*``).

Programs with subcommands (``git``): the first positional selects a second table (``git push``), the
global options before it (``-C DIR``, ``-c K=V``…) are skipped. For ``git push`` a ``+refspec``
positional counts as ``--force``.

Every program's spellings come from the one program table (``gate.programs``): bundled or separate
short flags, long flags and their unique abbreviations, options that take a value (so it is not a
positional), the equivalences (``-r`` = ``-R`` = ``--recursive`` for rm, ``git branch -D`` = ``--delete
--force``), and subcommands (git). A program missing from the table has no value options: every
``-x`` is a flag spelled as written.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from orchestrator.gate.programs import SHELL, Program, lookup, scan
from orchestrator.gate.programs import program_name as _program_name
from orchestrator.gate.programs.scanner import resolve_long as _resolve_long

__all__ = [
    "CommandPattern",
    "ParsedCommand",
    "ShellInvocation",
    "parse_command",
    "program_name",
    "resolve_long",
    "scan_shell_options",
]

_GLOB_CHARS = frozenset("*?[")


def _program_for(key: str) -> Program | None:
    """The table entry for ``"sed"`` or, for a subcommand, ``"git push"``."""
    head, _, sub = key.partition(" ")
    program = lookup(head)
    if sub and program is not None and program.subcommands is not None:
        return program.subcommands.get(sub)
    return program if not sub else None


def resolve_long(key: str, name: str) -> tuple[str, ...]:
    """The canonical names of long option ``name`` (no ``=value``) for ``key`` (``"sed"``,
    ``"git diff"``): exact spellings, then unambiguous abbreviations; ``(name,)`` if unknown."""
    program = _program_for(key)
    return (name,) if program is None else _resolve_long(program, name)


def program_name(words: Sequence[str]) -> str:
    """Basename of argv[0] with quotes and backslashes removed: ``/bin/rm`` → ``rm``, ``\\rm`` → ``rm``."""
    return _program_name(words[0]) if words else ""


class ShellInvocation(NamedTuple):
    """What a shell's (``sh``, ``bash``, ``zsh``, ``fish``…) options say about its command line.

    ``operand`` is the index of the first word after the options - the ``-c`` string when ``dash_c``
    or ``long_command``, else the script - or None when there is none. ``dash_c``: a short option
    bundle with ``c`` (``-c``, ``-ec``); ``long_command``: fish's ``--command``; ``dash_s``: a short
    bundle with ``s`` (commands from stdin); ``info``: ``--version`` or ``--help``.
    """

    operand: int | None
    dash_c: bool
    long_command: bool
    dash_s: bool
    info: bool


def scan_shell_options(words: Sequence[str]) -> ShellInvocation:
    """Scan the options of the shell command ``words`` (``words[0]`` is the shell) with the shell's
    entry in the program table."""
    found = scan(SHELL, words)
    end = found.end
    return ShellInvocation(
        end if end < len(words) else None,
        found.has("-c"),
        found.has("--command"),
        found.has("-s"),
        found.info,
    )


@dataclass(frozen=True, slots=True)
class ParsedCommand:
    """A command's words split into program, canonical flags and positionals."""

    program: str
    flags: frozenset[str]
    positionals: tuple[str, ...]


def parse_command(words: Sequence[str], program: str | None = None) -> ParsedCommand:
    """Split ``words`` (argv) into program, canonical flags and positionals (see the module doc)."""
    prog = program_name(words) if program is None else program
    found = scan(lookup(prog), words)
    return ParsedCommand(prog, found.flags, tuple(words[i] for i in found.positionals))


_SYMBOLIC_CLAUSE = re.compile(r"([ugoa]*)([+=])([rwx]*)")
_WHO_BITS = {"u": 0o700, "g": 0o070, "o": 0o007}
_PERM_BITS = {"r": 0o444, "w": 0o222, "x": 0o111}


def _mode(word: str) -> str:
    """A chmod mode as octal digits when it sets plain permissions (``0777``, ``a=rwx``,
    ``u=rwx,go+rwx`` → ``777``); anything else as written."""
    if word.isdigit() and all(ch in "01234567" for ch in word):
        return format(int(word, 8), "o")
    bits = 0
    for clause in word.split(","):
        m = _SYMBOLIC_CLAUSE.fullmatch(clause)
        if m is None:
            return word
        who = m.group(1).replace("a", "ugo") or "ugo"
        mask = sum(_WHO_BITS[w] for w in set(who))
        bits |= mask & sum(_PERM_BITS[p] for p in set(m.group(3)))
    return format(bits, "o")


_OPERAND_FORMS: dict[str, Callable[[str], str]] = {"mode": _mode}
"""How a program's first operand is compared (``Program.first_operand``)."""


@dataclass(frozen=True, slots=True)
class CommandPattern:
    """A command pattern such as ``"rm -rf"``; see the module docstring for the matching rules."""

    text: str
    _program: str = field(init=False, repr=False, compare=False)
    _glob: bool = field(init=False, repr=False, compare=False)
    _flags: frozenset[str] = field(init=False, repr=False, compare=False)
    _positionals: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _words: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            words = shlex.split(self.text)
        except ValueError as err:
            raise ValueError(f"invalid command pattern {self.text!r}: {err}") from None
        if not words:
            raise ValueError("command pattern is empty")
        prog = program_name(words)
        if not prog:
            raise ValueError(f"invalid command pattern {self.text!r}: no program name")
        glob = any(ch in _GLOB_CHARS for ch in prog)
        parsed = parse_command(words, prog)
        object.__setattr__(self, "_program", prog)
        object.__setattr__(self, "_glob", glob)
        object.__setattr__(self, "_flags", parsed.flags)
        object.__setattr__(self, "_positionals", parsed.positionals)
        object.__setattr__(self, "_words", tuple(words))

    @classmethod
    def parse(cls, text: str) -> CommandPattern:
        """Parse a pattern; raises ValueError (with the pattern in the message) when it is empty or
        cannot be split."""
        return cls(text)

    @property
    def program(self) -> str:
        """The program name this pattern keys on, or ``"*"`` when the program is a glob."""
        return "*" if self._glob else self._program

    @property
    def program_glob(self) -> str:
        """The program as written in the pattern (a name or an fnmatch glob)."""
        return self._program

    @property
    def flags(self) -> frozenset[str]:
        return self._flags

    @property
    def positionals(self) -> tuple[str, ...]:
        return self._positionals

    def program_matches(self, program: str) -> bool:
        if self._glob:
            return fnmatch.fnmatchcase(program, self._program)
        return program == self._program

    def matches(self, words: Sequence[str]) -> bool:
        """Whether the command ``words`` (an argv) matches this pattern."""
        if not words or not self.program_matches(program_name(words)):
            return False
        if not self._flags and not self._positionals:
            return True
        return self.matches_parsed(parse_command(words))

    def matches_parsed(self, parsed: ParsedCommand) -> bool:
        """Like ``matches`` for a command already split with ``parse_command``."""
        if not self.program_matches(parsed.program):
            return False
        flags = self._flags
        if self._glob and flags:
            # a glob pattern's flags are read with the matched program's table
            flags = parse_command(self._words, parsed.program).flags
        if not flags <= parsed.flags:
            return False
        size = len(self._positionals)
        if size == 0:
            return True
        theirs = parsed.positionals[:size]
        if len(theirs) < size:
            return False
        program = lookup(parsed.program)
        form = _OPERAND_FORMS.get(program.first_operand) if program is not None else None
        if form is not None:
            return form(theirs[0]) == form(self._positionals[0]) and theirs[1:] == self._positionals[1:]
        return theirs == self._positionals
