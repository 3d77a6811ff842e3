"""The shape of the program table: what the gate knows about one program, as data.

A :class:`Program` says how its command line reads (its options, whether options may follow operands,
numeric and ``+`` options, subcommands), what runs because of it (:class:`Command`: where the command
it runs is found; options whose value is run: :attr:`Opt.runs`) and what the risk analyzer should say
about it (:attr:`Program.findings`, :attr:`Opt.risk`, :attr:`Program.check`). The scanner
(``programs.scanner``) reads every command line with this one description; no analyzer keeps its own
option table.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.domain.sanitized import RiskLevel


class Takes(enum.IntEnum):
    """Whether an option takes a value."""

    NONE = 0
    VALUE = 1
    """A required value: attached (``-ofile``, ``--output=file``) or the next word."""
    ATTACHED = 2
    """An optional value, attached only (``xargs -i[R]``, ``--color[=WHEN]``)."""


class Runs(enum.Enum):
    """What a program does with a value (or operand) that it executes."""

    ARGV = "argv"
    """Words run as a program and its arguments."""
    PROGRAM = "program"
    """One program name or path, run with arguments the gate does not see (``sort --compress-program``)."""
    SHELL = "shell"
    """A shell command string: parsed and analyzed like any other."""
    SPLIT = "split"
    """A string split into words, then the remaining operands appended (``env -S``)."""
    CODE = "code"
    """Code in the program's own language (``python -c``): the gate reads it only where
    ``Program.language`` has a reader (awk, sed)."""
    LOAD = "load"
    """A file, module or library loaded as code (``perl -M``, ``node -r``, ``awk -f``, ``ld.so --preload``)."""
    MODULE = "module"
    """An importable module run by name (``python -m``)."""
    PIPE = "pipe"
    """A file name, or a shell command when it starts with ``|`` or ``!`` (``strace -o '|cmd'``)."""
    EXPANDS = "expands"
    """Words expanded again by the shell: a substitution in them runs (``compgen -W``)."""
    BINDS = "binds"
    """Binds a command name to a program or shared object (``hash -p PATH NAME``, ``enable -f LIB``):
    later commands by that name run what the gate does not see as them."""
    ACTION = "action"
    """An action that runs a shell command when it is ``exec=CMD`` (``tar --checkpoint-action``)."""


@dataclass(frozen=True, slots=True)
class Opt:
    """One option, in all its spellings (``("-o", "--output")``)."""

    spellings: tuple[str, ...]
    takes: Takes = Takes.NONE
    runs: Runs | None = None
    """The value is run (see :class:`Runs`)."""
    risk: tuple[RiskLevel, str] | None = None
    """A finding whenever the option is given: (level, what it does), e.g. (HIGH, "writes a file")."""
    stop: bool = False
    """With this option the program runs no command (``sudo -l``, ``chrt -p``, ``env --help``)."""
    info: bool = False
    """The option only prints information (``--version``)."""
    ends: bool = False
    """The option ends option parsing: what follows belongs to it (``python -c CODE ARGS``, ``python -m``)."""
    placeholder: bool = False
    """The value is a placeholder replaced by input (``xargs -I R``): a command word containing it is computed."""
    value_means: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """Values that give the option another meaning too (rm ``--interactive=never`` is ``--force``)."""
    glued: bool = False
    """A multi-letter short spelling whose value may follow in the same word, with or without ``=``
    (zip ``-TTcmd``, ``-TT=cmd``)."""
    means: tuple[str, ...] = ()
    """Canonical names when not just :attr:`name` (``git branch -D`` = ``--delete --force``)."""
    name: str = field(init=False)
    """The canonical name: the first long spelling, else the first spelling."""

    def __post_init__(self) -> None:
        longs = [s for s in self.spellings if s.startswith("--")]
        object.__setattr__(self, "name", longs[0] if longs else self.spellings[0])
        if not self.means:
            object.__setattr__(self, "means", (self.name,))


class Locate(enum.Enum):
    """Where the command a program runs is found on its command line."""

    AFTER_OPTIONS = "after the options"
    """``[skip positionals] [NAME=VALUE…] COMMAND ARGS…`` (nice, timeout, sudo, env, chroot NEWROOT…)."""
    JOINED = "joined into a shell string"
    """The remaining words joined with spaces and run by a shell (eval, watch, parallel)."""
    SHELL_OPERAND = "the first operand, as a shell string, with -c"
    """A shell: with ``-c`` the first operand is the command string; else a script file or its input."""
    PREDICATE = "between a predicate and its terminator"
    """``find … -exec CMD … ;`` (each such command)."""
    OPTIONS = "only in an option's value"
    """Nothing but option values run (``script -c``, ``mapfile -C``); :attr:`Command.default` otherwise."""
    CUSTOM = "a grammar of its own"
    """Named by :attr:`Command.handler` (su, trap, alias, coproc, compgen -W, git -c, ssh -o)."""


@dataclass(frozen=True, slots=True)
class Command:
    """How to find the command a program runs."""

    where: Locate
    skip: int = 0
    """Positional words before the command (``timeout DURATION``, ``chroot NEWROOT``, ``gosu USER``)."""
    assignments: bool = False
    """``NAME=VALUE`` words may precede the command (env, sudo)."""
    via_shell: tuple[str, ...] = ()
    """The words are arguments to this shell rather than a program (``capsh -- -c CMD`` runs bash)."""
    string_option: tuple[str, ...] = ()
    """If the word where the command starts is one of these, the next word is a shell string
    (``flock FILE -c STRING``, ``sg GROUP -c STRING``)."""
    argv_flag: str = ""
    """JOINED only: with this option the words run as an argv instead (``watch -x``)."""
    until: tuple[str, ...] = ()
    """The command ends before the first of these words (parallel ``:::``)."""
    starts: tuple[str, ...] = ()
    """PREDICATE: the words that begin a command (``-exec``)."""
    ends: tuple[str, ...] = ()
    """PREDICATE: the words that end it (``;``, ``+``)."""
    default: tuple[str, ...] | None = None
    """What runs when no command is given: ``("sh",)`` for a login or interactive shell; None: nothing."""
    default_with: tuple[str, ...] = ()
    """Options (canonical names) without one of which :attr:`default` does not apply (``sudo -s``)."""
    inputs_are_commands: bool = False
    """JOINED with ``until``: without a command, each word after the separator is a command string
    (``parallel ::: CMD…``)."""
    placeholder: str = ""
    """A placeholder the program replaces by input (find/parallel ``{}``): in the command word, computed."""
    appends_input: bool = False
    """Without a placeholder option, input is appended to the command's words (xargs, parallel)."""
    handler: str = ""
    """CUSTOM: the name of the locator in ``gate.unwrap``."""
    flag: str = ""
    """SHELL_OPERAND: the option that makes the first operand a command string (``-c``)."""


class Family(enum.Enum):
    """What kind of program it is, for readers of the table and its completeness test."""

    WRAPPER = "runs another command"
    SHELL = "a shell"
    INTERPRETER = "an interpreter of a language"
    BUILTIN = "a shell builtin or keyword"
    TOOL = "a program that runs nothing of its operands"


@dataclass(frozen=True, slots=True, eq=False)
class Program:
    """Everything the gate knows about one program (and its aliases)."""

    names: tuple[str, ...]
    summary: str
    family: Family
    options: tuple[Opt, ...] = ()
    permute: bool = True
    """GNU: options may follow operands (until ``--``). False: options end at the first operand, as
    for every program that runs a command (its command's options are not its own)."""
    numeric: bool = False
    """``-N`` is an option (``nice -10``, ``kill -9``)."""
    plus: bool = False
    """``+X`` options (shells: ``+o pipefail``, ``+e``)."""
    bundled_first: bool = False
    """A first word without ``-`` is a bundle of short options whose values follow in order
    (old-style ``tar xIf PROG a.tar``)."""
    separate_values: bool = False
    """A short option's value is always the next word, and the bundle goes on (``bash -xo pipefail``,
    ``bash -oc …``: the shells' own reading, not getopt's)."""
    abbreviate: bool = True
    """Long options may be abbreviated to a unique prefix (getopt_long)."""
    leading: int = 0
    """Positional words before the options (``setarch ARCH [options] CMD``)."""
    environment_among_options: bool = False
    """Programs that stop at their first operand: a word with ``=`` (not starting with ``/`` or ``=``)
    is an environment assignment and the options go on (sudo's getopt loop: ``sudo A=1 -u root CMD``)."""
    options_again: int = 0
    """Programs that stop at their first operand: after this many operands, options are read once
    more (``ssh [options] DESTINATION [options] COMMAND``: ssh.c parses its options again after the
    destination, so ``ssh host -o ProxyCommand=… cmd`` runs the proxy command)."""
    command: Command | None = None
    """Where the command it runs is found, if it runs one."""
    language: str = ""
    """Interpreters: the language of the code it is given (``python``, ``awk``, ``sed``…)."""
    code_operand: bool = False
    """The first operand is code unless an option gave code or a script (awk, sed)."""
    script_operand: bool = False
    """The first operand is a script file, ``-`` or nothing means code from its input (interpreters)."""
    findings: tuple[tuple[RiskLevel, str], ...] = ()
    """Findings whenever the program runs (``sudo`` escalates privileges, ``curl`` uses the network)."""
    check: str = ""
    """The name of a risk check that reads more than options (``rm``'s targets, ``git``'s subcommands)."""
    subcommands: Mapping[str, Program] | None = None
    """Programs with subcommands (git): the first operand selects the table for what follows."""
    first_operand: str = ""
    """How the first operand is compared in command patterns (``mode``: chmod ``0777`` = ``a=rwx`` = ``777``)."""
    plus_operand: str = ""
    """An operand starting with ``+`` means this option (``git push +ref`` = ``--force``)."""
    code_modules: frozenset[str] = frozenset()
    """Modules that run code given in their arguments or read from input (``python -m timeit CODE``,
    ``-m code``, ``-m pdb``): run by ``-m``, what runs is unseen."""
    interactive: tuple[str, ...] = ()
    """Options (canonical names) after which it reads code from its input, a script given or not
    (``python -i``, ``php -a``)."""
    whole: bool = False
    """Anything but an information option runs code the gate cannot read (deno, bun, gdb)."""
