"""The program table: every entry complete, and every wrapper's options read so that its command is found."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.gate import unwrap
from orchestrator.gate.checks import CHECKS
from orchestrator.gate.programs import PROGRAMS, Family, Locate, Program, Runs, Takes, lookup, scan
from orchestrator.gate.unwrap import Argv, Sh, locate
from tests.support.paths import ROOT

REQUIRED = {
    "privilege and identity": "sudo doas su runuser setpriv capsh chroot unshare nsenter setsid gosu pkexec",
    "resources and scheduling": (
        "nice ionice chrt taskset prlimit numactl timeout stdbuf flock nohup time watch setarch linux32 linux64"
        " i386 x86_64"
    ),
    "tracing": "strace ltrace gdb valgrind",
    "environment": "env eatmydata faketime fakeroot proot",
    "multiplexers": "xargs parallel find script busybox toybox",
    "dynamic loaders": "ld.so ld-linux-x86-64.so.2 ld-linux-aarch64.so.1 ld64.so.2 ld-musl-x86_64.so.1",
    "shell builtins": "eval exec command builtin coproc trap mapfile readarray compgen alias",
}
INTERPRETERS = "sh bash dash zsh python python3 python3.11 pypy3 perl perl5.36 ruby node nodejs php lua Rscript julia"


def _program_id(program: Program) -> str:
    return program.names[0] if program.names else "?"


@pytest.mark.parametrize(("family", "names"), REQUIRED.items())
def test_the_issue_families_run_a_command_found_by_the_table(family: str, names: str) -> None:
    for name in names.split():
        program = lookup(name)
        assert program is not None, (family, name)
        assert program.command is not None, (family, name)


@pytest.mark.parametrize("name", INTERPRETERS.split())
def test_interpreters_say_where_their_code_comes_from(name: str) -> None:
    program = lookup(name)
    assert program is not None and program.language, name
    assert program.script_operand or program.code_operand or program.whole
    assert program is lookup("sh") or any(o.runs is Runs.CODE for o in program.options), name


@pytest.mark.parametrize("program", PROGRAMS, ids=_program_id)
def test_every_entry_is_complete(program: Program) -> None:
    assert program.names and all(name and name == name.strip() for name in program.names)
    assert program.summary.strip()
    assert isinstance(program.family, Family)
    spellings: list[str] = []
    for opt in program.options:
        assert opt.spellings, program.names
        for spelling in opt.spellings:
            assert spelling == "-" or (spelling[:1] in ("-", "+") and len(spelling) >= 2), (program.names, spelling)
        spellings.extend(opt.spellings)
        if opt.runs is not None or opt.placeholder:
            # what is run is the option's value: the option must take one
            assert opt.takes is not Takes.NONE or opt.runs in (Runs.LOAD,), (program.names, opt.spellings)
        if opt.risk is not None:
            _, what = opt.risk
            assert what.strip() and not what[0].isupper(), (program.names, opt.spellings)
    assert len(spellings) == len(set(spellings)), f"{program.names}: a spelling is listed twice"
    command = program.command
    if program.family is Family.WRAPPER:
        assert command is not None, f"{program.names}: a wrapper must say where its command is"
    if command is not None:
        if command.where is Locate.CUSTOM:
            assert command.handler in unwrap.HANDLERS, program.names
        else:
            assert not command.handler, program.names
        if command.where is Locate.PREDICATE:
            assert command.starts and command.ends, program.names
        if command.where is Locate.SHELL_OPERAND:
            assert command.flag, program.names
        if command.default_with:
            assert command.default is not None
            known = {name for opt in program.options for name in opt.means}
            assert set(command.default_with) <= known, program.names
    if program.check:
        assert program.check in CHECKS, program.names
    if program.family is Family.INTERPRETER:
        assert program.language, program.names
    for sub in (program.subcommands or {}).values():
        test_every_entry_is_complete(sub)


def test_every_check_and_handler_is_used() -> None:
    used_checks = {p.check for p in PROGRAMS if p.check}
    assert set(CHECKS) == used_checks
    used_handlers = {p.command.handler for p in PROGRAMS if p.command is not None and p.command.handler}
    assert set(unwrap.HANDLERS) == used_handlers


# --------------------------------------------------------------------------------------------
# every wrapper's options, as the table describes them, lead the locator to the command

_SAMPLE_VALUES = ("5", "x", "root", "/tmp/d", "a=b")
_INNER = ("rm", "-rf", "build")


def _option_words(program: Program, draw: st.DrawFn) -> list[str]:
    words: list[str] = []
    usable = [o for o in program.options if not o.stop and not o.ends and o.runs is None and o.spellings != ("-",)]
    for opt in draw(st.lists(st.sampled_from(usable), max_size=4)) if usable else []:
        spelling = draw(st.sampled_from(opt.spellings))
        if spelling.startswith("+") or (len(spelling) > 2 and not spelling.startswith("--")):
            if opt.takes is Takes.NONE:
                words.append(spelling)
            elif opt.takes is Takes.VALUE:
                words += [spelling, draw(st.sampled_from(_SAMPLE_VALUES))]
            continue
        value = draw(st.sampled_from(_SAMPLE_VALUES))
        if opt.takes is Takes.NONE:
            words.append(spelling)
        elif opt.takes is Takes.ATTACHED:
            words.append(f"{spelling}={value}" if spelling.startswith("--") else f"{spelling}{value}")
        elif spelling.startswith("--"):
            words += [f"{spelling}={value}"] if draw(st.booleans()) else [spelling, value]
        else:
            words += [spelling + value] if draw(st.booleans()) else [spelling, value]
    return words


_ARGV_WRAPPERS = [
    p
    for p in PROGRAMS
    if p.command is not None
    and p.command.where is Locate.AFTER_OPTIONS
    and not p.command.string_option
    and not p.command.via_shell
    # sudo/env (assignments) and xargs (placeholder) are tested below; gdb's long options have one dash
    # (-ex), so an attached short value can spell one of them
    and p.names[0] not in ("sudo", "env", "xargs", "gdb")
]


@st.composite
def wrapped(draw: st.DrawFn) -> tuple[str, list[str]]:
    program = draw(st.sampled_from(_ARGV_WRAPPERS))
    name = draw(st.sampled_from(program.names))
    words = [name]
    if program.leading:
        words.append("x86_64")
    words += _option_words(program, draw)
    if program.command is not None:
        words += ["3"] * program.command.skip
    return name, [*words, *_INNER]


@settings(max_examples=800, deadline=None)
@given(case=wrapped())
def test_the_command_after_any_known_options_is_found(case: tuple[str, list[str]]) -> None:
    _, words = case
    found = locate(tuple(words), (False,) * len(words))
    assert found is not None, words
    assert not found.leftover and not any("does not know" in b for b in found.blind), (words, found.blind)
    assert Argv(_INNER, (False,) * 3) in found.inners, (words, found.inners)


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        ("sudo -u root -E A=1 B=2 rm -rf build", Argv(_INNER, (False,) * 3)),
        # sudo reads NAME=VALUE between its options (parse_args.c), and -h HOST names a host
        ("sudo A=1 -u root rm -rf build", Argv(_INNER, (False,) * 3)),
        ("sudo -h host rm -rf build", Argv(_INNER, (False,) * 3)),
        # ssh reads its options once more after the destination (ssh.c)
        ("ssh host -o ProxyCommand='rm -rf build' true", Sh("rm -rf build")),
        ("env -i -u HOME A=1 rm -rf build", Argv(_INNER, (False,) * 3)),
        ("xargs -0 -n 1 rm -rf build", Argv(_INNER, (False,) * 3)),
        ("su - root -c 'rm -rf build'", Sh("rm -rf build")),
        ("runuser root echo -c 'rm -rf build'", Sh("rm -rf build")),
        ("su root script.sh arg", Argv(("sh", "script.sh", "arg"), (False,) * 3)),
        ("capsh --shell=/bin/dash -- -c 'rm -rf build'", Argv(("/bin/dash", "-c", "rm -rf build"), (False,) * 3)),
        ("capsh -+ -c 'rm -rf build'", Argv(("bash", "-c", "rm -rf build"), (False,) * 3)),
        ("su -c 'rm -rf build' root", Sh("rm -rf build")),
        ("flock -w 5 /tmp/l -c 'rm -rf build'", Sh("rm -rf build")),
        ("capsh --caps=cap_net_raw+ep -- -c 'rm -rf build'", Argv(("bash", "-c", "rm -rf build"), (False,) * 3)),
        ("strace -f -o '|rm -rf build' true", Sh("rm -rf build")),
        ("tar --checkpoint-action=exec='rm -rf build' -cf a.tar d", Sh("rm -rf build")),
        ("git -c core.pager='rm -rf build' log", Sh("rm -rf build")),
        ("ssh -o ProxyCommand='rm -rf build' host", Sh("rm -rf build")),
        ("parallel ::: 'rm -rf build'", Sh("rm -rf build")),
        ("valgrind --db-command='rm -rf build' ./a", Sh("rm -rf build")),
        ("faketime --date-prog rm 2020-01-01 ls", Argv(("rm",), (False,))),
    ],
)
def test_commands_in_option_values_and_operands(command: str, inner: Argv | Sh) -> None:
    words = tuple(shlex.split(command))
    found = locate(words, (False,) * len(words))
    assert found is not None and inner in found.inners, found


@pytest.mark.parametrize(
    ("command", "blind"),
    [
        ("timeout --frobnicate 9 rm -rf build", "has an option the gate does not know (--frobnicate)"),
        ("nice -Q rm -rf build", "has an option the gate does not know (-Q)"),
        ("python3 -c 'import os'", "runs python code the gate cannot read"),
        ("perl -e 'system 1'", "runs perl code the gate cannot read"),
        ("perl -M'strict;system(1)' x.pl", "is given code, not a file or module name"),
        ("awk 'BEGIN{system(\"id\")}'", "runs awk code that runs commands (system)"),
        ("sed 'e id' f", "runs sed code that runs a command (e)"),
        ("gdb -batch -ex 'shell id' ./a", "runs gdb code the gate cannot read"),
        # gdb permutes: the -ex after the program is gdb's; and gdb alone reads commands from its input
        ("gdb ./a -ex 'shell id'", "'gdb' runs code the gate cannot read"),
        ("gdb ./a", "'gdb' runs code the gate cannot read"),
        ("deno run x.ts", "'deno' runs code the gate cannot read"),
        ("xargs -I X X -n 1", "program name is computed at run time ('X' is replaced by input)"),
        ("git -c core.hooksPath=/tmp/h commit", "runs hooks from another directory"),
        ("ssh -F ./cfg host", "reads a configuration that can run local programs"),
        ("su", "with no command runs sh, which reads commands from its input"),
    ],
)
def test_what_cannot_be_seen_is_said(command: str, blind: str) -> None:
    words = tuple(shlex.split(command))
    found = locate(words, (False,) * len(words))
    assert found is not None and any(blind in b for b in found.blind), found


def test_scanner_reads_getopt_spellings() -> None:
    rm = lookup("rm")
    assert scan(rm, ["rm", "-rfv", "--interactive=never", "--recur", "--", "-x"]).flags == {
        "--recursive",
        "--force",
        "--verbose",
        "--interactive",
    }
    sort = lookup("sort")
    found = scan(sort, ["sort", "-uo", "out", "-k2", "f"])
    assert found.values("--output") == ["out"] and found.values("--key") == ["2"]
    assert [["sort", "-uo", "out", "-k2", "f"][i] for i in found.positionals] == ["f"]
    shell = lookup("bash")
    found = scan(shell, ["bash", "-xo", "pipefail", "-c", "ls"])
    assert found.has("-c") and found.values("-o") == ["pipefail"] and found.end == 4
    tar = lookup("tar")
    assert scan(tar, ["tar", "xIf", "prog", "a.tar"]).values("--use-compress-program") == ["prog"]


def test_the_document_of_the_table_is_current() -> None:
    """docs/programs.md is generated from the table (python -m orchestrator.gate.programs.describe)."""

    from orchestrator.gate.programs.describe import markdown

    document = ROOT / "docs" / "programs.md"
    assert document.read_text(encoding="utf-8") == markdown(), "regenerate docs/programs.md"
