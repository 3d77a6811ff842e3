"""The one option scanner: every analyzer reads a command line through :func:`scan`.

It reads ``words`` (argv; ``words[0]`` is the program) the way getopt_long does, with the program's
table: short bundles (``-rf``), short values attached or in the next word (``-ofile``, ``-o file``),
optional attached values (``-i[R]``), long options with ``=value`` or the next word, unique
abbreviations of long options, numeric options (``-10``), ``+`` options (shells), ``--`` ending the
options, and either GNU permutation (options anywhere) or options ending at the first operand (every
program that runs a command). Programs with subcommands (git) switch tables at the subcommand.

What it does not know it reports (:attr:`Scan.unknown`): a caller that must find the command a
program runs cannot tell where it starts after an unknown option, and says so instead of guessing.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import NamedTuple

from orchestrator.gate.programs.model import Family, Opt, Program, Takes

__all__ = ["NUMERIC", "UNKNOWN", "Hit", "Scan", "resolve_long", "scan"]

NUMERIC = Opt(("-N",), Takes.ATTACHED)
"""The option a numeric word stands for (``nice -10``, ``kill -9``); its value is the number."""


class Hit(NamedTuple):
    """One option found on the command line."""

    opt: Opt | None
    """None: an option the table does not know."""
    spelling: str
    """As written, without ``=value`` (a bundle's letter as ``-x``)."""
    value: str | None
    pos: int
    """The index of the word the option is in (its value may be in the next one)."""
    at: int
    """The word its value is in (the option's own word when attached or without a value)."""


class _Index(NamedTuple):
    exact: dict[str, Opt]
    longs: tuple[str, ...]
    glued: tuple[tuple[str, Opt], ...]


@functools.cache
def _index(program: Program) -> _Index:
    exact: dict[str, Opt] = {}
    for opt in program.options:
        for spelling in opt.spellings:
            exact[spelling] = opt
    glued = tuple((s, o) for o in program.options if o.glued for s in o.spellings if not s.startswith("--"))
    return _Index(exact, tuple(s for s in exact if s.startswith("--")), glued)


def _long(program: Program, index: _Index, name: str) -> Opt | None:
    found = index.exact.get(name)
    if found is not None or not program.abbreviate or len(name) < 3:
        return found
    hits = {id(index.exact[s]): index.exact[s] for s in index.longs if s.startswith(name)}
    return next(iter(hits.values())) if len(hits) == 1 else None


def resolve_long(program: Program, name: str) -> tuple[str, ...]:
    """The canonical names of long option ``name`` (no ``=value``): exact spellings, then unique
    abbreviations; ``(name,)`` when the program does not know it."""
    opt = _long(program, _index(program), name)
    return opt.means if opt is not None else (name,)


class Scan:
    """What :func:`scan` read: options in order, operands, where the options ended."""

    __slots__ = ("dashdash", "end", "hits", "plus_flags", "positionals", "program")

    def __init__(self, program: Program) -> None:
        self.program = program
        """The table that applied last (a subcommand's, for git)."""
        self.hits: list[Hit] = []
        self.positionals: list[int] = []
        """Word indices of the operands, in order (permuting programs: every operand)."""
        self.end = 0
        """The first word not read as an option: for programs that stop at their first operand, that
        operand (or the word after ``--``, or past the end); else the number of words."""
        self.dashdash = False
        self.plus_flags: tuple[str, ...] = ()

    @property
    def flags(self) -> frozenset[str]:
        """Canonical names of every option given (unknown ones as spelled)."""
        out: set[str] = set(self.plus_flags)
        for hit in self.hits:
            if hit.opt is None:
                out.add(hit.spelling)
                continue
            out.update(hit.opt.means)
            for value, means in hit.opt.value_means:
                if hit.value == value:
                    out.update(means)
        return frozenset(out)

    @property
    def unknown(self) -> list[str]:
        return [hit.spelling for hit in self.hits if hit.opt is None]

    @property
    def stop(self) -> Opt | None:
        """The first option that means the program runs no command, if any."""
        return next((hit.opt for hit in self.hits if hit.opt is not None and hit.opt.stop), None)

    @property
    def info(self) -> bool:
        return any(hit.opt is not None and hit.opt.info for hit in self.hits)

    def values(self, name: str) -> list[str]:
        """The values given to the option with canonical name ``name``."""
        return [h.value for h in self.hits if h.opt is not None and h.opt.name == name and h.value is not None]

    def has(self, name: str) -> bool:
        return any(h.opt is not None and name in h.opt.means for h in self.hits)


UNKNOWN = Program(names=(), summary="a program the table does not know", family=Family.TOOL)
"""How a program missing from the table is read: every ``-x`` a flag, nothing takes a value."""


def scan(program: Program | None, words: Sequence[str], start: int = 1) -> Scan:
    """Read the options of ``words`` from ``start`` with ``program``'s table (None: a program the
    table does not know: every ``-x`` is a flag, nothing takes a value, options anywhere)."""
    prog = program if program is not None else UNKNOWN
    out = Scan(prog)
    index = _index(prog)
    n = len(words)
    i = start
    for _ in range(prog.leading):
        # setarch ARCH: leading operands, when given (an option there means it was left out)
        if i < n and words[i][:1] != "-":
            out.positionals.append(i)
            i += 1
    permute = prog.permute
    operands_before_options = prog.options_again
    only_operands = False
    bundle_start = i if prog.bundled_first else -1
    plus_flags: list[str] = []
    while i < n:
        w = words[i]
        if i == bundle_start and w[:1] not in ("-", ""):
            # tar xIf PROG a.tar: the letters are options, their values the next words in order
            i = _old_style_bundle(index, words, i, out)
            continue
        if only_operands or len(w) < 2 or (w[0] != "-" and not (w[0] == "+" and prog.plus)):
            exact = index.exact.get(w) if w == "-" else None
            if exact is not None and not only_operands:
                out.hits.append(Hit(exact, w, None, i, i))
                i += 1
                if exact.ends:
                    break
                continue
            if prog.subcommands is not None and not out.positionals and not only_operands:
                # git: the subcommand selects the table for the words after it
                out.positionals.append(i)
                sub = prog.subcommands.get(w)
                prog = sub if sub is not None else UNKNOWN
                index = _index(prog)
                permute = prog.permute
                i += 1
                continue
            if not permute and not only_operands and prog.environment_among_options and _environment(w):
                # sudo A=1 -u root CMD: NAME=VALUE between the options
                i += 1
                continue
            if not permute and not only_operands and operands_before_options:
                # ssh DESTINATION: an operand, then options again
                operands_before_options -= 1
                out.positionals.append(i)
                i += 1
                continue
            if not permute and not only_operands:
                out.end = i
                out.plus_flags = tuple(plus_flags)
                return out
            if prog.plus_operand and w[:1] == "+" and len(w) > 1:
                plus_flags.append(prog.plus_operand)
            out.positionals.append(i)
            i += 1
            continue
        if w == "--":
            out.dashdash = True
            i += 1
            if not permute:
                break
            only_operands = True
            continue
        if w[1] == "-" and w[0] == "-":
            name, eq, value = w.partition("=")
            opt = _long(prog, index, name)
            i += 1
            if opt is None or opt.takes is Takes.NONE:
                out.hits.append(Hit(opt, name, value if eq else None, i - 1, i - 1))
            elif eq:
                out.hits.append(Hit(opt, name, value, i - 1, i - 1))
            elif opt.takes is Takes.VALUE and i < n:
                out.hits.append(Hit(opt, name, words[i], i - 1, i))
                i += 1
            else:
                out.hits.append(Hit(opt, name, None, i - 1, i - 1))
            if opt is not None and opt.ends:
                break
            continue
        exact = index.exact.get(w)
        if exact is not None and len(w) > 2:
            # a whole-word short spelling (zip -TT, gdb -ex)
            i += 1
            if exact.takes is Takes.VALUE and i < n:
                out.hits.append(Hit(exact, w, words[i], i - 1, i))
                i += 1
            else:
                out.hits.append(Hit(exact, w, None, i - 1, i - 1))
            if exact.ends:
                break
            continue
        glued = next(((sp, o) for sp, o in index.glued if w.startswith(sp)), None)
        if glued is not None:
            spelling, opt = glued
            value = w[len(spelling) :]
            out.hits.append(Hit(opt, spelling, value[1:] if value.startswith("=") else value, i, i))
            i += 1
            continue
        if prog.numeric and w[0] == "-" and w[1:].isdigit():
            out.hits.append(Hit(NUMERIC, w, w[1:], i, i))
            i += 1
            continue
        sign = w[0]
        ended = False
        taken_words = 0
        j = 1
        size = len(w)
        while j < size:
            spelling = sign + w[j]
            opt = index.exact.get(spelling)
            if opt is None:
                out.hits.append(Hit(None, spelling, None, i, i))
                j += 1
                continue
            if opt.takes is Takes.NONE:
                out.hits.append(Hit(opt, spelling, None, i, i))
                j += 1
                if opt.ends:
                    ended = True
                    break
                continue
            if prog.separate_values and opt.takes is Takes.VALUE:
                # sh -xo pipefail: the value is the next word, and the bundle goes on
                at = i + 1 + taken_words
                taken = words[at] if at < n else None
                out.hits.append(Hit(opt, spelling, taken, i, at if taken is not None else i))
                taken_words += taken is not None
                j += 1
                continue
            rest = w[j + 1 :]
            if rest:
                out.hits.append(Hit(opt, spelling, rest, i, i))
            elif opt.takes is Takes.VALUE and i + 1 < n:
                out.hits.append(Hit(opt, spelling, words[i + 1], i, i + 1))
                i += 1
            else:
                out.hits.append(Hit(opt, spelling, None, i, i))
            ended = opt.ends
            break
        i += 1 + taken_words
        if ended:
            break
    out.end = min(i, n)
    out.plus_flags = tuple(plus_flags)
    return out


def _environment(word: str) -> bool:
    """sudo's test for an environment assignment among its options (parse_args.c ``is_envar``)."""
    return "=" in word and word[0] not in "/="


def _old_style_bundle(index: _Index, words: Sequence[str], i: int, out: Scan) -> int:
    """Read ``words[i]`` as short options without a dash; return the index after their values."""
    taken = i + 1
    for letter in words[i]:
        opt = index.exact.get("-" + letter)
        value: str | None = None
        at = i
        if opt is not None and opt.takes is Takes.VALUE and taken < len(words):
            value, at = words[taken], taken
            taken += 1
        out.hits.append(Hit(opt, "-" + letter, value, i, at))
    return taken
