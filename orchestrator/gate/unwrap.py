"""Find the command a program runs, from the program table: the wrappers' grammar read as data.

:func:`locate` takes one command's words and returns what it runs: argvs (``nice rm x`` → ``rm x``),
shell strings to parse (``bash -c STRING``, ``tar --to-command=STRING``), and what the gate cannot see
(an option the table does not know before the command, a command string built at run time, code in a
language the gate does not read). The walk in ``gate.intent`` analyzes what is found, recursively.
Where the command is comes from ``Program.command`` (``Locate``) and ``Opt.runs``; the few programs
with a grammar of their own (``Locate.CUSTOM``) have a small locator each, named in the table.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from orchestrator.gate.programs import Family, Hit, Locate, Program, Runs, Scan, lookup, program_name, scan
from orchestrator.gate.programs.git import COMMAND_CONFIG, SAFE_CONFIG
from orchestrator.gate.scripts import code_runs_commands, reads_code_from_input

__all__ = ["Argv", "Sh", "Unwrapped", "locate", "quote"]


class Argv(NamedTuple):
    """Words run as a program and its arguments (``dynamic[i]``: word i holds an expansion)."""

    words: tuple[str, ...]
    dynamic: tuple[bool, ...]


class Sh(NamedTuple):
    """A shell string it runs; None when the string holds an expansion (it cannot be analyzed)."""

    text: str | None


@dataclass(slots=True)
class Unwrapped:
    label: str
    inners: list[Argv | Sh] = field(default_factory=list)
    blind: list[str] = field(default_factory=list)
    """What the gate cannot see of what this command runs (reasons)."""
    leftover: list[tuple[str, ...]] = field(default_factory=list)
    """Words the gate saw but could not read as a command (checked against the denylist as they are)."""
    values: list[str] = field(default_factory=list)
    """A wrapper's option values: not commands as far as the table knows, yet not read by the gate."""


@dataclass(slots=True)
class _Site:
    """One command being unwrapped: its table entry, what the scanner read, and the result so far."""

    program: Program
    name: str
    found: Scan
    words: tuple[str, ...]
    dynamic: tuple[bool, ...]
    out: Unwrapped

    def argv(self, start: int, end: int | None = None, via: tuple[str, ...] = ()) -> Argv:
        return Argv((*via, *self.words[start:end]), (False,) * len(via) + self.dynamic[start:end])

    def joined(self, start: int, end: int) -> Sh:
        return Sh(None if any(self.dynamic[start:end]) else " ".join(self.words[start:end]))

    def value_dynamic(self, hit: Hit) -> bool:
        return self.dynamic[hit.at] if hit.at < len(self.dynamic) else False

    def unknown_before(self, end: int) -> bool:
        """Whether an option the table does not know, which might take the next word, comes before
        ``end``: then where the command starts cannot be told, and the gate says so."""
        unknown = [
            h.spelling
            for h in self.found.hits
            if h.opt is None and h.pos < end and not (h.spelling.startswith("--") and h.value is not None)
        ]
        if not unknown:
            return False
        self.out.blind.append(
            f"'{self.name}' has an option the gate does not know ({unknown[0]}):"
            " where its command starts cannot be told"
        )
        self.out.leftover.append(self.words[1:])
        return True


_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_SAFE_WORD = re.compile(r"[\w@%+=:,./-]+", re.ASCII)
_PLAIN_REFERENCE = re.compile(r"[\w./:=,+@~-]*")
"""A file, module or library name (``perl -MPOSIX``, ``node -r ./setup.js``); anything else is code."""


def quote(word: str) -> str:
    if word and _SAFE_WORD.fullmatch(word):
        return word
    return "'" + word.replace("'", "'\"'\"'") + "'"


# --------------------------------------------------------------------------------------------
# option values and operands that run


def _option_inners(site: _Site) -> None:
    out = site.out
    for hit in site.found.hits:
        opt = hit.opt
        if opt is None or opt.runs is None or hit.value is None:
            continue
        value, dynamic, runs = hit.value, site.value_dynamic(hit), opt.runs
        where = f"'{site.name} {opt.name}'"
        if runs is Runs.SHELL:
            out.inners.append(Sh(None if dynamic else value))
        elif runs is Runs.PROGRAM or runs is Runs.ARGV:
            out.inners.append(Argv((value,), (dynamic,)))
        elif runs is Runs.PIPE:
            if dynamic:
                out.blind.append(f"{where} names a file or a command that cannot be analyzed")
            elif value[:1] in ("|", "!"):
                out.inners.append(Sh(value[1:]))
        elif runs is Runs.ACTION:
            if dynamic:
                out.blind.append(f"{where} runs an action that cannot be analyzed")
            elif value.startswith("exec="):
                out.inners.append(Sh(value[5:]))
        elif runs is Runs.EXPANDS:
            if dynamic or "$" in value or "`" in value:
                out.inners.append(Sh(None if dynamic else f": {value}"))
        elif runs is Runs.CODE:
            _code(site, hit.spelling, value, dynamic)
        elif runs is Runs.BINDS:
            out.inners.append(Argv((value,), (dynamic,)))
            out.blind.append(f"'{site.name} {hit.spelling}' binds a command name: later commands by it run {value!r}")
        elif runs is Runs.MODULE and (dynamic or value in site.program.code_modules):
            out.blind.append(f"'{site.name} {hit.spelling} {value}' runs code from its arguments or input")
        elif runs is Runs.LOAD and (dynamic or not _PLAIN_REFERENCE.fullmatch(value)):
            out.blind.append(f"'{site.name} {hit.spelling}' is given code, not a file or module name")


def _code(site: _Site, option: str, text: str, dynamic: bool) -> None:
    language = site.program.language
    where = f"'{site.name} {option}'" if option else f"'{site.name}'"
    if dynamic:
        site.out.blind.append(f"{where} runs {language} code that cannot be analyzed")
        return
    verdict = code_runs_commands(language, text, sandboxed=site.found.has("--sandbox"))
    if verdict is None:
        site.out.blind.append(f"{where} runs {language} code the gate cannot read")
    elif verdict:
        site.out.blind.append(f"{where} runs {language} code that {verdict}")


def _code_operand(site: _Site) -> None:
    """awk/sed: the first operand is the program unless an option gave one."""
    if any(h.opt is not None and h.opt.runs in (Runs.CODE, Runs.LOAD) for h in site.found.hits):
        return
    found = site.found
    operand = found.positionals[0] if found.positionals else found.end
    if operand < len(site.words):
        _code(site, "", site.words[operand], site.dynamic[operand])


# --------------------------------------------------------------------------------------------
# where the command is


def _placeholders(site: _Site) -> list[str]:
    marks = [h.value or "{}" for h in site.found.hits if h.opt is not None and h.opt.placeholder]
    command = site.program.command
    if not marks and command is not None and command.placeholder:
        marks.append(command.placeholder)
    return marks


def _add_argv(site: _Site, argv: Argv) -> None:
    if argv.words and not argv.dynamic[0]:
        marks = [m for m in _placeholders(site) if m]
        if any(m in argv.words[0] for m in marks):
            site.out.blind.append(f"program name is computed at run time ('{marks[0]}' is replaced by input)")
        elif site.program.command is not None and site.program.command.placeholder:
            _input_fed(site, argv, marks)
    site.out.inners.append(argv)


def _input_fed(site: _Site, argv: Argv, marks: list[str]) -> None:
    """A command that xargs/find/parallel fills from its input: input that lands where a command or
    code goes (``xargs env``, ``xargs bash -c``, ``xargs -I{} sh -c '{}'``, ``find -exec nice {} ;``)
    makes what runs unseen."""
    inner = locate(argv.words, argv.dynamic)
    for ran in inner.inners if inner is not None else ():
        text = ran.text if isinstance(ran, Sh) else (ran.words[0] if ran.words else "")
        if text and any(m in text for m in marks):
            site.out.blind.append(f"'{site.name}' puts its input where {argv.words[0]} takes a command or code")
            return
    appends = not any(h.opt is not None and h.opt.placeholder for h in site.found.hits)
    if not appends or site.program.command is None or not site.program.command.appends_input:
        return
    program = lookup(program_name(argv.words[0]))
    if program is None:
        return
    takes_code = reads_code_from_input(argv.words) is not None or (
        program.family is Family.SHELL and (inner is None or not inner.inners)
    )
    takes_command = (
        program.command is not None and program.family is not Family.SHELL and (inner is None or not inner.inners)
    )
    if takes_code or takes_command:
        site.out.blind.append(f"'{site.name}' appends its input to {argv.words[0]}, which runs what it is given")


def _after_options(site: _Site) -> None:
    """``[options] [skip…] [NAME=VALUE…] COMMAND…`` (and JOINED: the rest joined into a string)."""
    command = site.program.command
    assert command is not None
    words, found, out = site.words, site.found, site.out
    n = len(words)
    if site.unknown_before(found.end):
        return
    if site.program.permute:
        _permuted_operands(site)
        return
    start = min(n, found.end + command.skip)
    if command.assignments:
        while start < n and _ASSIGNMENT.match(words[start]):
            start += 1
    split = next((h for h in found.hits if h.opt is not None and h.opt.runs is Runs.SPLIT), None)
    if split is not None and split.value is not None:
        # env -S STRING ARGS: the string is split into words and ARGS appended
        out.inners[:] = [i for i in out.inners if not (isinstance(i, Sh) and i.text == split.value)]
        if site.value_dynamic(split) or any(site.dynamic[start:]) or any(ch in split.value for ch in "\\$"):
            # env splits -S itself: backslash escapes (``\_`` is a blank) and ``${VAR}`` are its own
            out.inners.append(Sh(None))
        else:
            rest = " ".join(quote(w) for w in words[start:])
            out.inners.append(Sh(f"{split.value} {rest}" if rest else split.value))
        return
    if start < n and words[start] in command.string_option:
        if start + 1 < n:
            out.inners.append(Sh(None if site.dynamic[start + 1] else words[start + 1]))
        return
    if start >= n:
        return
    if command.where is not Locate.JOINED:
        _add_argv(site, site.argv(start, via=command.via_shell))
        return
    end = start
    while end < n and words[end] not in command.until:
        end += 1
    if end > start:
        if command.argv_flag and found.has(command.argv_flag):
            _add_argv(site, site.argv(start, end))
        else:
            out.inners.append(site.joined(start, end))
    elif end < n and command.inputs_are_commands:
        # parallel ::: CMD…: without a command, each input is a command line
        out.inners.extend(
            Sh(None if site.dynamic[k] else words[k]) for k in range(end + 1, n) if words[k] not in command.until
        )


def _permuted_operands(site: _Site) -> None:
    """su/runuser permute their options (getopt without ``+``): the operands after the user, wherever
    they stand, are what is given to the shell (``runuser root echo -c CMD`` runs ``sh -c CMD echo``)."""
    command = site.program.command
    assert command is not None
    positions = site.found.positionals[command.skip :]
    if positions:
        words = tuple(site.words[i] for i in positions)
        dynamic = tuple(site.dynamic[i] for i in positions)
        via = command.via_shell
        site.out.inners.append(Argv((*via, *words), (False,) * len(via) + dynamic))


def _shell_operand(site: _Site) -> None:
    command = site.program.command
    assert command is not None
    operand = site.found.end
    if (site.found.has(command.flag) or site.found.has("--command")) and operand < len(site.words):
        site.out.label = f"{site.name} -c"
        site.out.inners.append(Sh(None if site.dynamic[operand] else site.words[operand]))


def _predicates(site: _Site) -> None:
    command = site.program.command
    assert command is not None
    words = site.words
    n = len(words)
    i = 1
    while i < n:
        if words[i] in command.starts:
            start = end = i + 1
            while end < n and words[end] not in command.ends:
                end += 1
            if end > start:
                _add_argv(site, site.argv(start, end))
            i = end + 1
        else:
            i += 1
    if site.out.inners:
        site.out.label = f"{site.name} {command.starts[0]}"


# --------------------------------------------------------------------------------------------
# grammars of their own


def _runuser(site: _Site) -> None:
    """``runuser -u USER [--] CMD…`` runs an argv; otherwise it reads like su (USER, then shell arguments)."""
    command = site.program.command
    assert command is not None
    if site.unknown_before(len(site.words)):
        return
    if not site.found.has("--user"):
        _permuted_operands(site)
    elif site.found.positionals:
        positions = site.found.positionals
        site.out.inners.append(Argv(tuple(site.words[i] for i in positions), tuple(site.dynamic[i] for i in positions)))


def _coproc(site: _Site) -> None:
    """``coproc [NAME] COMMAND``: a NAME only before a compound command (``coproc N { …; }``)."""
    words, dynamic = site.words, site.dynamic
    n = len(words)
    i = 1
    if i < n and words[i] == "{" and not dynamic[i]:
        i += 1
    elif i + 1 < n and words[i + 1] == "{" and not dynamic[i + 1]:
        i += 2
    if i >= n:
        return
    if dynamic[i] and words[i].startswith("("):
        site.out.inners.append(Argv((), ()))  # ``coproc (…)``: the subshell's commands were recorded with the words
        return
    site.out.inners.append(site.argv(i))


def _trap(site: _Site) -> None:
    """``trap [--] ACTION SIGNAL…``: ACTION is a command string run later (one operand, ``-``, an
    empty string or a number as ACTION reset signals)."""
    if site.found.stop is not None:
        return
    i = site.found.end
    if len(site.words) - i < 2:
        return
    action = site.words[i]
    if not site.dynamic[i] and (action in ("-", "") or action.isdigit()):
        return
    site.out.inners.append(Sh(None if site.dynamic[i] else action))


def _alias(site: _Site) -> None:
    """``alias NAME=VALUE…``: each VALUE is the command string the name will run."""
    for i in range(1, len(site.words)):
        key, eq, value = site.words[i].partition("=")
        if eq and key and not key.startswith("-") and (value or site.dynamic[i]):
            site.out.inners.append(Sh(None if site.dynamic[i] else value))


def _git_config(site: _Site) -> None:
    """``git -c KEY=VALUE`` (and ``git clone -c/--config``): a key whose value is a command makes
    VALUE one; a key the gate does not know may make git run something it cannot see."""
    out = site.out
    for hit in site.found.hits:
        opt = hit.opt
        if opt is None or hit.value is None:
            continue
        if opt.name == "--config-env":
            out.blind.append("'git --config-env' takes configuration from the environment")
            continue
        if opt.name not in ("-c", "--config"):
            continue
        if site.value_dynamic(hit):
            out.blind.append("'git -c' sets configuration that cannot be analyzed")
            continue
        key, _, value = hit.value.partition("=")
        if SAFE_CONFIG.fullmatch(key):
            continue
        if key.lower() == "core.hookspath":
            out.blind.append("'git -c core.hooksPath' runs hooks from another directory")
            continue
        if not COMMAND_CONFIG.fullmatch(key):
            out.blind.append(f"'git -c {key[:60]}' may make git run a program the gate cannot see")
            continue
        if key.lower().startswith("alias.") and not value.startswith("!"):
            # a git command line of its own (``rebase -x CMD``, ``-c core.pager=CMD``): read as git
            try:
                line = tuple(shlex.split(value))
            except ValueError:
                out.blind.append(f"'git -c {key[:60]}' defines an alias that cannot be read")
                continue
            out.label = "git -c"
            out.inners.append(Argv(("git", *line), (False,) * (len(line) + 1)))
            continue
        if key.lower().startswith(("credential.", "submodule.")) and not value.startswith("!"):
            continue  # a helper's name or an update mode: no shell command
        out.label = "git -c"
        out.inners.append(Sh(value[1:] if value.startswith("!") else value))


_SSH_COMMAND_KEYS = frozenset({"proxycommand", "localcommand", "knownhostscommand"})
_SSH_BLIND_KEYS = frozenset({"pkcs11provider", "securitykeyprovider", "match", "include"})
_SSH_OPTION = re.compile(r"\s*([A-Za-z0-9]+)\s*(?:=\s*|\s+)(.*)", re.DOTALL)


def _ssh_options(site: _Site) -> None:
    """``-o ProxyCommand=CMD`` (and LocalCommand, KnownHostsCommand) runs CMD here; ``-F CONFIG``
    can set them; the remote command runs elsewhere and is not unwrapped."""
    out, name = site.out, site.name
    for hit in site.found.hits:
        if hit.opt is None or hit.value is None:
            continue
        if hit.spelling == "-F" and hit.value not in ("/dev/null", "none"):
            out.blind.append(f"'{name} -F' reads a configuration that can run local programs")
        if hit.spelling != "-o":
            continue
        if site.value_dynamic(hit):
            out.blind.append(f"'{name} -o' sets an option that cannot be analyzed")
            continue
        m = _SSH_OPTION.match(hit.value)
        key, value = (m.group(1), m.group(2)) if m else (hit.value.strip(), "")
        if key.lower() in _SSH_COMMAND_KEYS and value.lower() != "none":
            out.label = f"{name} -o {key}"
            out.inners.append(Sh(value))
        elif key.lower() in _SSH_BLIND_KEYS:
            out.blind.append(f"'{name} -o {key}' loads code or configuration the gate cannot see")


def _capsh(site: _Site) -> None:
    """capsh reads its arguments in order: ``--shell=PATH`` sets the shell; ``--`` and ``-+`` run the
    shell (default bash) with the rest; ``==`` and ``=+`` run capsh again with the rest."""
    command = site.program.command
    assert command is not None
    shell, shell_dynamic = command.via_shell[0], False
    for i in range(1, len(site.words)):
        word = site.words[i]
        if word.startswith("--shell="):
            shell, shell_dynamic = word[len("--shell=") :], site.dynamic[i]
        elif word in ("--", "-+", "==", "=+"):
            again = word in ("==", "=+")
            first = ("capsh", False) if again else (shell, shell_dynamic)
            site.out.inners.append(Argv((first[0], *site.words[i + 1 :]), (first[1], *site.dynamic[i + 1 :])))
            return


def _runcon(site: _Site) -> None:
    """``runcon CONTEXT COMMAND`` or ``runcon [-u U] [-r R] [-t T] [-l L] COMMAND``."""
    start = site.found.end
    if site.unknown_before(start):
        return
    if not any(site.found.has(o) for o in ("--compute", "--user", "--role", "--type", "--range")):
        start += 1
    if start < len(site.words):
        site.out.inners.append(site.argv(start))


HANDLERS: dict[str, Callable[[_Site], None]] = {
    "runuser": _runuser,
    "coproc": _coproc,
    "trap": _trap,
    "alias": _alias,
    "git_config": _git_config,
    "ssh_options": _ssh_options,
    "runcon": _runcon,
    "capsh": _capsh,
}
"""The locators of ``Locate.CUSTOM`` programs, by the name their table entry gives."""

_LOCATORS: dict[Locate, Callable[[_Site], None]] = {
    Locate.AFTER_OPTIONS: _after_options,
    Locate.JOINED: _after_options,
    Locate.SHELL_OPERAND: _shell_operand,
    Locate.PREDICATE: _predicates,
    Locate.OPTIONS: lambda site: None,
}


# --------------------------------------------------------------------------------------------


def _default(site: _Site) -> None:
    """No command given: a program that then runs a shell reading its input says so."""
    command = site.program.command
    if command is None or command.default is None or site.out.inners:
        return
    if command.default_with and not any(site.found.has(o) for o in command.default_with):
        return
    site.out.blind.append(
        f"'{site.name}' with no command runs {command.default[0]}, which reads commands from its input"
    )


@functools.cache
def _runs_anything(program: Program) -> bool:
    """Whether the program can run anything: a command, an option value, code it is given."""
    subs = program.subcommands.values() if program.subcommands is not None else ()
    return (
        program.command is not None
        or program.code_operand
        or program.whole
        or any(o.runs is not None for p in (program, *subs) for o in p.options)
    )


def locate(words: tuple[str, ...], dynamic: tuple[bool, ...]) -> Unwrapped | None:
    """What the command ``words`` runs, or None when it runs nothing the table knows of."""
    if not words or dynamic[0]:
        return None
    name = program_name(words[0])
    program = lookup(name)
    if program is None or not _runs_anything(program):
        return None
    found = scan(program, words)
    site = _Site(program, name, found, words, dynamic, Unwrapped(name))
    out = site.out
    if program.family is Family.WRAPPER:
        out.values = [h.value for h in found.hits if h.value is not None and h.opt is not None and h.opt.runs is None]
    _option_inners(site)
    if out.inners and program.family is not Family.WRAPPER and program.family is not Family.BUILTIN:
        named = [h.opt.name for h in found.hits if h.opt is not None and h.opt.runs is not None]
        out.label = f"{name} {named[0]}" if named else name
    command = program.command
    if command is not None and found.stop is None:
        if command.where is Locate.CUSTOM:
            HANDLERS[command.handler](site)
        else:
            _LOCATORS[command.where](site)
        _default(site)
    if program.code_operand:
        _code_operand(site)
    # seen only when information options were given and nothing else: `gdb PROG` still reads commands
    # (gdb permutes: `gdb PROG -ex CMD`), `deno run x.ts` has no option at all
    informed = bool(found.hits) and all(h.opt is not None and h.opt.info for h in found.hits)
    if program.whole and not (informed and not found.positionals):
        out.blind.append(f"'{name}' runs code the gate cannot read")
    if not out.inners and not out.blind and not out.leftover:
        return None
    return out
