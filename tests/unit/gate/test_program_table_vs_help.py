"""The program table against the programs installed here: what their ``--help`` says, and how they
read the command lines where the table once read them otherwise (awk ``-W exec``, ssh's options
after the destination).

For every checked program that is installed, its ``--help`` is parsed (``-x, --long=VALUE``,
``-x VALUE``, ``--long[=VALUE]``, ``-x <value>``, ``-x[VALUE]``…) and each option it lists is read
with the table the way the gate reads a command line (:func:`scan`, abbreviations included):

* an option the help gives a value must take one in the table (``VALUE``), an optional value must be
  optional (``ATTACHED``), an option without a value must be a flag: the other way round, the gate
  would look for the command in the wrong place (``strace --interruptible never bash -c …``);
* an option the help lists must be in the table, for a program that runs a command (else the gate
  cannot tell where the command starts and asks) and for any option that takes a value;
* what the help gets wrong, or what the table knowingly does otherwise, is in ``EXCEPTIONS`` with
  the reason, and every exception must still be needed.

A program that is not installed is skipped: CI has the tools of the base image and of
``scripts/setup.sh``, not necessarily every tool of a developer's machine.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.gate.intent import analyze_shell
from orchestrator.gate.programs import Opt, Program, Takes, lookup, scan
from orchestrator.gate.programs.build import names
from orchestrator.gate.risk import assess_command, combine
from orchestrator.gate.unwrap import Sh, locate

# --------------------------------------------------------------------------------------------
# reading a --help

VALUE, OPTIONAL, NONE = "value", "optional", "none"
SHORT_OPTIONAL = "short optional"
"""``-m, --mount[=<file>]`` (util-linux): the short spelling may take the optional value attached,
or none (unshare ``-m`` is a flag, nsenter ``-m`` takes it); only a required value would be wrong."""

_SPEC = re.compile(r"^[ \t]{0,8}(?P<spec>-(?:[^ \t]| (?! ))*?)(?:[ \t]{2,}|$)")
"""An option line: its spellings (single spaces) up to two spaces before the description. Lines
indented deeper continue a description (tar: "--diff, --extract or --list and when…")."""
_ITEM_SPLIT = re.compile(r"[,.]\s*(?=-)|\s+(?=--?[A-Za-z])")
"""``-x, --long``, ``-x --long`` (systemd), ``-W. --wdns`` (a typo in nsenter's help)."""
_NAME = re.compile(r"(?P<name>--[A-Za-z0-9][\w.-]*|-[A-Za-z0-9?@]|-(?=,|$))(?P<arg>.*)", re.DOTALL)
_LONG_SINGLE_DASH = re.compile(r"(?P<name>-[A-Za-z][\w-]+)(?P<arg>.*)", re.DOTALL)
_PLACEHOLDER = re.compile(r"<[^>]*>.*|[A-Z][A-Z0-9_:.-]*\b.*|\S*[|{<=/\[].*")
"""A value's placeholder, not a description: ``<pid>``, ``FILE``, ``slave|shared``, ``VAR=VAL``."""
_GNU_OPTIONAL_SHORT = re.compile(r"optional for (?:the|any) corresponding short option")
"""GNU (xargs, argp: tar, man): a short option takes the optional value of its long one, attached."""


@dataclass(frozen=True)
class _Spelling:
    name: str
    takes: str
    placeholder: str
    """As written after the name (``=FILE``, `` <pid>``, ``[=<file>]``), for the propagation rule."""


def _read_item(item: str, last: bool, single_dash_longs: bool) -> tuple[_Spelling, bool] | None:
    """One spelling and whether the description starts after it (the spec ends)."""
    if re.match(r"-\d\d", item):
        return None  # prose: "-20 (most favorable…)"
    repeated = re.fullmatch(r"(-([A-Za-z])\2+)(?:\s.*)?", item, re.DOTALL)
    if repeated:
        return _Spelling(repeated.group(1), NONE, ""), False  # "-qq", "-DDD", "-OO": dropped by parse_help
    match = (_LONG_SINGLE_DASH.fullmatch(item) if single_dash_longs else None) or _NAME.fullmatch(item)
    if match is None:
        return None
    name, arg = match.group("name"), match.group("arg")
    if arg.startswith("["):
        rest = arg.split(None, 1)
        return _Spelling(name, OPTIONAL, rest[0]), len(rest) > 1
    if arg.startswith("="):
        rest = arg.split(None, 1)
        # "--list=[<signal>]" is optional; "--host=[USER@]HOST" is not
        optional = rest[0].startswith("=[") and rest[0].endswith("]")
        return _Spelling(name, OPTIONAL if optional else VALUE, rest[0]), len(rest) > 1
    if arg.startswith(" "):
        words = arg.split()
        # "-x VALUE, --long=VALUE": not the last spelling, so what follows is a value; the last one
        # has a value when one word follows, or a placeholder (" <list>", " FILE", " a|b")
        if not last or len(words) == 1 or _PLACEHOLDER.fullmatch(arg.strip()):
            return _Spelling(name, OPTIONAL if words[0].startswith("[") else VALUE, arg.strip()), False
        return _Spelling(name, NONE, ""), True
    if arg:
        return _Spelling(name, VALUE, arg), False  # attached: perl's -Idirectory
    return _Spelling(name, NONE, ""), False


def _shared(name: str, takes: str) -> str:
    """What a spelling written bare takes when another spelling on its line takes ``takes``."""
    return SHORT_OPTIONAL if takes == OPTIONAL and not name.startswith("--") else takes


def _read_line(line: str, single_dash_longs: bool) -> list[_Spelling]:
    line = re.sub(r",\s+(?=-)", ", ", line.replace(" : ", "   "))  # "-h,  --help"; python's "-c cmd : …"
    match = _SPEC.match(line)
    if match is None:
        return []
    items = _ITEM_SPLIT.split(match.group("spec").strip().rstrip(",:"))
    found: list[_Spelling] = []
    for i, item in enumerate(items):
        if item.startswith("-<"):
            continue  # kill's "-<signal>": not a spelling
        read = _read_item(item.strip(), i == len(items) - 1, single_dash_longs)
        if read is None:
            break
        spelling, description_follows = read
        if spelling.name == "-" and len(items) == 1:
            return []  # prose: a "-" in a list of exit statuses
        found.append(spelling)
        if description_follows:
            break
    # "-t, --target <pid>", "-a, --arg-file=FILE", "--loader, --experimental-loader=..." (node): the other
    # spellings take what the one with a placeholder takes, unless its value is a literal (strace
    # "-q, --quiet=attach,personality")
    given = [s for s in found if s.takes != NONE and re.search(r"[A-Z]|<|\[|\.\.\.", s.placeholder)]
    if given:
        takes = given[0].takes
        found = [s if s.takes != NONE else _Spelling(s.name, _shared(s.name, takes), "") for s in found]
    return found


def parse_help(text: str, *, single_dash_longs: bool = False) -> dict[str, tuple[str, str]]:
    """Every option spelling ``--help`` lists: what it takes and the line that says so.

    A spelling listed on several lines (strace ``--quiet=SET`` and ``-q, --quiet=attach``) takes an
    optional value if one line says so or if it is listed both with and without one (sort ``--check,
    --check=diagnose-first``), else a value if one line says so."""
    gnu_optional = _GNU_OPTIONAL_SHORT.search(" ".join(text.split())) is not None
    rank = {OPTIONAL: 3, VALUE: 2, SHORT_OPTIONAL: 1, NONE: 0}
    found: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        for spelling in _read_line(line, single_dash_longs):
            takes = OPTIONAL if spelling.takes == SHORT_OPTIONAL and gnu_optional else spelling.takes
            if len(spelling.name) > 2 and spelling.name[1] != "-" and len(set(spelling.name[1:])) == 1:
                continue  # "-qq", "-DDD", "-ff": a short option given more than once
            known = found.get(spelling.name)
            if known is not None and {known[0], takes} == {NONE, VALUE} and spelling.name.startswith("--"):
                takes = OPTIONAL
            if known is None or rank[takes] > rank[known[0]]:
                found[spelling.name] = (takes, line.strip())
    return found


_SYNOPSIS_GROUP = re.compile(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]")
"""``[…]``, with one level of brackets inside (``[--exec-path[=<path>]]``)."""


def _split_attached(word: str) -> tuple[str, str]:
    """``--git-dir=<path>`` → (``--git-dir``, ``=<path>``); ``--exec-path[=<path>]`` → (…, ``[=<path>]``)."""
    cut = min((i for i in (word.find("="), word.find("[")) if i > 0), default=len(word))
    return word[:cut], word[cut:]


def parse_synopsis(text: str) -> dict[str, tuple[str, str]]:
    """The options of a synopsis: ``[-cl] [-a name]`` (bash's ``help -s``), ``[-l|--lib fakerootlib]``,
    ``[--git-dir=<path>] [--exec-path[=<path>]]`` (git)."""
    found: dict[str, tuple[str, str]] = {}
    for group in _SYNOPSIS_GROUP.findall(text):
        alternatives = [a.split() for a in group.split("|")]
        if not all(words and words[0].startswith("-") and words[0] != "--" for words in alternatives):
            continue
        takes = VALUE if any(len(words) > 1 for words in alternatives) else NONE
        for words in alternatives:
            first, attached = _split_attached(words[0])
            if attached:
                found[first] = (OPTIONAL if attached.startswith("[") else VALUE, f"[{group}]")
            elif first.startswith("--") or len(first) == 2:
                found[first] = (takes, f"[{group}]")
            elif takes == NONE:
                found.update((f"-{letter}", (NONE, f"[{group}]")) for letter in first[1:])  # [-abc]
    return found


def _run(argv: list[str]) -> str:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C", "COLUMNS": "200"}
    done = subprocess.run(
        argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=30, check=False
    )
    return done.stdout + done.stderr


# --------------------------------------------------------------------------------------------
# what is checked, and the justified exceptions

CHECKED = names(
    # programs that run a command: the option list must be complete
    "su runuser setpriv chroot unshare nsenter setsid systemd-run nice ionice chrt taskset prlimit timeout"
    " stdbuf flock nohup time watch setarch linux32 linux64 strace valgrind gdb env fakeroot xargs script"
    " runcon dbus-run-session systemd-inhibit ld.so git ssh scp sftp"
    # interpreters and tools: the options that take a value must be there, and the listed ones right
    " sed python3 perl node rm chmod chown chgrp cp mv tee install split sort uniq date file sdiff diff3 tar man kill"
)

BUILTINS = names("exec command trap mapfile readarray compgen alias enable bind complete hash fc")
"""bash builtins, read from the synopsis ``help -s NAME`` prints."""

SYNOPSIS_ONLY = {"fakeroot", "git", "ssh", "scp", "sftp"}
"""Programs whose ``--help`` is a synopsis only (``[-l|--lib fakerootlib]``)."""

SINGLE_DASH_LONGS = {"gdb"}
"""Programs whose multi-letter options take one dash (gdb ``-ex``, ``-batch``)."""

ONE_WORD = {"valgrind"}
"""Programs that never take an option's value from the next word (valgrind: ``--log-file FILE PROG``
runs FILE): an option the help gives ``=VALUE`` is ``ATTACHED`` in the table."""

_PRLIMIT_RESOURCES = (
    "-c --core -d --data -e --nice -f --fsize -i --sigpending -l --memlock -m --rss -n --nofile -q --msgqueue"
    " -r --rtprio -s --stack -t --cpu -u --nproc -v --as -x --locks -y --rttime"
)

EXCEPTIONS: dict[tuple[str, str], str] = {
    # help texts that disagree with the program's own option table (getopt string, struct option)
    **{
        ("prlimit", spelling): "takes an optional attached <limit> (getopt 'c::d::…', optional_argument);"
        " the help prints the resource options bare and explains <limit> below them"
        for spelling in names(_PRLIMIT_RESOURCES)
    },
    ("nsenter", "--wdns"): "struct option: optional_argument in every version; the help says '<dir>'",
    ("xargs", "--max-lines"): "struct option: optional_argument, as -l; the help prints it next to -L",
    ("strace", "--quiet"): "struct option: optional_argument (--quiet alone is -q); the help shows =SET",
    ("time", "-h"): "GNU time's getopt string is '+af:o:pqvV': only --help is an option ('time -h' fails)",
    ("file", "-P"): "getopt 'P:': file -P NAME=VALUE (file -P /bin/ls: 'Unknown param'); the help shows no value",
    ("file", "--parameter"): "as -P",
    ("perl", "-F"): "-F/pattern/ is attached only, and may be empty (perl -F -e…): ATTACHED",
    ("node", "--print"): "'--print <arg>' is an alias of -pe: the next word, when there is one, is the code",
    ("node", "-p"): "as --print",
    # the table knowingly reads otherwise
    ("nsenter", "-W"): "takes a value in util-linux <= 2.38 (getopt 'W:'), an optional one from 2.39 ('W::'):"
    " left out of the table, so that the gate asks instead of guessing where the command starts",
    ("flock", "-c"): "not an option of flock's getopt: '-c STRING' after the file is Command.string_option",
    ("flock", "--command"): "as -c",
    ("strace", "--stack-traces"): "optional_argument from strace 6.8 (no_argument before): ATTACHED reads both",
    ("cp", "--update"): "optional_argument from coreutils 9.3 (no_argument before): ATTACHED reads both",
    ("mv", "--update"): "as cp",
}
"""``(program, spelling)`` pairs the comparison leaves alone, and why."""


def _documented(name: str) -> dict[str, tuple[str, str]]:
    """What the installed program (or bash builtin) documents; skips the test when it is not installed."""
    if name in BUILTINS:
        bash = shutil.which("bash")
        if bash is None:
            pytest.skip("bash is not installed")
        return parse_synopsis(_run([bash, "-c", f"help -s {name}"]))
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed")
    text = _run([path, "--help"])
    if name in SYNOPSIS_ONLY:
        return parse_synopsis(text)
    return parse_help(text, single_dash_longs=name in SINGLE_DASH_LONGS)


def _opt(program: Program, name: str, spelling: str) -> Opt | None:
    """The table's option for ``spelling`` (None: unknown), read as the scanner reads a command line."""
    hits = scan(program, [name, spelling]).hits
    return hits[0].opt if hits and hits[0].spelling == spelling else None


def _agrees(name: str, documented: str, takes: Takes) -> bool:
    if documented == SHORT_OPTIONAL:
        return takes is not Takes.VALUE
    if documented == VALUE and name in ONE_WORD:
        return takes is Takes.ATTACHED
    return {VALUE: Takes.VALUE, OPTIONAL: Takes.ATTACHED, NONE: Takes.NONE}[documented] is takes


@pytest.mark.parametrize("name", (*CHECKED, *BUILTINS))
def test_the_table_reads_options_as_the_installed_program_documents_them(name: str) -> None:
    listed = _documented(name)
    program = lookup(name)
    assert program is not None, name
    assert len(listed) >= 1, f"{name}: no options read from its help (has its format changed?)"
    # a program that runs a command must have every option: an unknown one hides where the command starts
    complete = program.command is not None
    problems: list[str] = []
    for spelling, (takes, line) in sorted(listed.items()):
        if (name, spelling) in EXCEPTIONS:
            continue
        opt = _opt(program, name, spelling)
        if opt is None:
            if complete or takes != NONE:
                problems.append(f"{spelling}: missing from the table ({takes}) | {line}")
        elif not _agrees(name, takes, opt.takes):
            problems.append(f"{spelling}: help {takes}, table {opt.takes.name} | {line}")
    assert not problems, f"{name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("key", sorted(EXCEPTIONS), ids="/".join)
def test_every_exception_is_still_needed(key: tuple[str, str]) -> None:
    name, spelling = key
    listed = _documented(name)
    program = lookup(name)
    assert program is not None
    assert spelling in listed, f"{name}'s help no longer lists {spelling}: drop the exception"
    opt = _opt(program, name, spelling)
    assert opt is None or not _agrees(name, listed[spelling][0], opt.takes), f"{name} {spelling} agrees now"


def test_synopses_are_read() -> None:
    assert parse_synopsis("exec [-cl] [-a name] [command [argument ...]]") == {
        "-c": (NONE, "[-cl]"),
        "-l": (NONE, "[-cl]"),
        "-a": (VALUE, "[-a name]"),
    }
    found = parse_synopsis("fakeroot [-l|--lib fakerootlib] [-u|--unknown-is-real] [--] [command]")
    assert {s: t for s, (t, _) in found.items()} == {"-l": VALUE, "--lib": VALUE, "-u": NONE, "--unknown-is-real": NONE}
    found = parse_synopsis("git [-C <path>] [--exec-path[=<path>]] [--git-dir=<path>] [-p | --paginate] <command>")
    assert {s: t for s, (t, _) in found.items()} == {
        "-C": VALUE,
        "--exec-path": OPTIONAL,
        "--git-dir": VALUE,
        "-p": NONE,
        "--paginate": NONE,
    }


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("  -a, --arg-file=FILE          read", {"-a": VALUE, "--arg-file": VALUE}),
        (" -t, --target <pid>     target", {"-t": VALUE, "--target": VALUE}),
        (" -m, --mount[=<file>]   enter", {"-m": SHORT_OPTIONAL, "--mount": OPTIONAL}),
        (" -t[<file>], --timing[=<file>] deprecated alias to -T", {"-t": OPTIONAL, "--timing": OPTIONAL}),
        ("  -h,  --help               display", {"-h": NONE, "--help": NONE}),
        (" -W. --wdns <dir>       set", {"-W": VALUE, "--wdns": VALUE}),
        (" --preserve-credentials do not touch uids", {"--preserve-credentials": NONE}),
        ("  -u --unit=UNIT                  Run", {"-u": VALUE, "--unit": VALUE}),
        ("  -q, --quiet=attach,personality", {"-q": NONE, "--quiet": VALUE}),
        ("  -b execve, --detach-on=execve", {"-b": VALUE, "--detach-on": VALUE}),
        (" --propagation slave|shared|private|unchanged", {"--propagation": VALUE}),
        (" -, -l, --login                  make", {"-": NONE, "-l": NONE, "--login": NONE}),
        ("-c cmd : program passed in as string", {"-c": VALUE}),
        ("  -i[SUFFIX], --in-place[=SUFFIX]", {"-i": OPTIONAL, "--in-place": OPTIONAL}),
        ("-20 (most favorable to the process) to 19", {}),
        ("  -    the exit status of COMMAND otherwise", {}),
    ],
)
def test_help_lines_are_read(line: str, expected: dict[str, str]) -> None:
    assert {s: t for s, (t, _) in parse_help(line).items()} == expected


@pytest.mark.parametrize("value", ["exec", "e", "E", "exe", "i,ex", "interactive,exec"])
def test_awk_w_exec_is_recognized_in_every_spelling_mawk_accepts(value: str, tmp_path: Path) -> None:
    """mawk (Debian's awk) reads ``-W`` as a comma-separated list of abbreviations in any case:
    ``awk -We prog.awk`` runs prog.awk, which the gate cannot read."""
    reason = combine(assess_command(analyze_shell(f"awk -W {value} prog.awk"))).reason
    assert "awk -W runs a program file or library" in reason.split("; ")
    mawk = shutil.which("mawk")
    if mawk is None:
        pytest.skip("mawk is not installed")
    program = tmp_path / "prog.awk"
    program.write_text('BEGIN { print "ran prog.awk" }\n', encoding="utf-8")
    assert _run([mawk, "-W", value, str(program)]).strip() == "ran prog.awk"


def test_ssh_reads_options_again_after_the_destination(tmp_path: Path) -> None:
    """ssh.c parses its options once more after the destination: ``ssh HOST -o ProxyCommand=CMD``
    runs CMD here, and the gate must see it (options after the remote command are its own)."""
    marker = tmp_path / "proxy-ran"
    proxy = f"touch {marker}"
    found = locate(("ssh", "example.invalid", "-o", f"ProxyCommand={proxy}", "true"), (False,) * 5)
    assert found is not None and Sh(proxy) in found.inners
    assert locate(("ssh", "example.invalid", "true", "-o", f"ProxyCommand={proxy}"), (False,) * 5) is None
    ssh = shutil.which("ssh")
    if ssh is None:
        pytest.skip("ssh is not installed")
    argv = [ssh, "-F", "/dev/null", "-o", "BatchMode=yes", "example.invalid", "-o", f"ProxyCommand={proxy}", "true"]
    _run(argv)  # the proxy command runs here; the connection then fails (it prints nothing)
    assert marker.exists()
