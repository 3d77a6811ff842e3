"""Checks of programs that act on the machine, other processes or the network."""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.gate.findings import HIGH, MEDIUM, Check, Finding
from orchestrator.gate.programs import NUMERIC, lookup, scan

_POWER_VERBS = frozenset({"poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "suspend", "hibernate"})
_RUNS = "runs a program"


def _systemctl(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    verbs = [w for w in words[1:] if not w.startswith("-")]
    if verbs and verbs[0] in _POWER_VERBS:
        out.append(Finding(HIGH, f"{prog} {verbs[0]} stops or restarts the machine"))


def _init(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if len(words) > 1 and words[1] in ("0", "6"):
        out.append(Finding(HIGH, f"{prog} {words[1]} stops or restarts the machine"))


def _kill(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """``kill -1``: the first signal-like option names the signal; a number after it is a pid, and
    pid -1 is every process."""
    found = scan(lookup("kill"), words)
    pids = [words[i] for i in found.positionals]
    signal_seen = False
    for hit in found.hits:
        if hit.opt is NUMERIC and signal_seen:
            pids.append(hit.spelling)
        elif hit.opt is NUMERIC or hit.opt is None or hit.opt.name in ("--signal", "-n") or hit.opt.name.isupper():
            signal_seen = True
    if "-1" in pids:
        out.append(Finding(HIGH, f"{prog} -1 signals every process"))


_REMOTE_ARG = re.compile(r"^(?:[\w.-]+@)?[\w.-]+::?|^rsync://")


def _rsync(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if any(_REMOTE_ARG.match(w) for w in words[1:] if not w.startswith("-")):
        out.append(Finding(MEDIUM, f"{prog} uses the network"))


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_WRITE = frozenset({"-fprint", "-fprint0", "-fprintf", "-fls"})


def _find(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """find's predicates are words, not options: -exec/-ok run commands, -fprint writes, -delete."""
    for word in words[1:]:
        if word in _FIND_EXEC:
            out.append(Finding(HIGH, f"{prog} {word} runs a command"))
        elif word in _FIND_WRITE:
            out.append(Finding(HIGH, f"{prog} {word} writes a file"))
        elif word == "-delete":
            out.append(Finding(HIGH, f"{prog} -delete deletes files"))


def _zip(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """zip reads ``TT`` inside a bundle of short options too (``-qTT CMD``)."""
    for word in words[1:]:
        if word == "--":
            break
        if word.startswith("-") and not word.startswith("--") and "TT" in word:
            out.append(Finding(HIGH, f"{prog} -TT/--unzip-command {_RUNS}"))
            return


_SSH_EXEC_OPTIONS = re.compile(
    r"\s*(?:proxycommand|localcommand|permitlocalcommand|knownhostscommand|pkcs11provider|securitykeyprovider"
    r"|match|include)\b",
    re.IGNORECASE,
)


def _ssh(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """ssh/scp/sftp options that run local programs: ``-o ProxyCommand=…`` (and LocalCommand,
    KnownHostsCommand, PKCS11Provider, …), ``-F CONFIG`` (a config can set them), ``-I`` (PKCS#11
    library), scp/sftp ``-S PROGRAM``, sftp ``-D PROGRAM``."""
    for hit in scan(lookup(prog), words).hits:
        if hit.opt is None or hit.value is None:
            continue
        letter, value = hit.spelling[1:], hit.value
        if letter == "o" and _SSH_EXEC_OPTIONS.match(value):
            out.append(Finding(HIGH, f"{prog} -o {value.split('=')[0].split()[0]} runs a local program"))
        elif letter == "F" and value not in ("/dev/null", "none"):
            out.append(Finding(HIGH, f"{prog} -F reads a configuration that can run local programs"))
        elif letter == "I" and prog == "ssh":
            out.append(Finding(HIGH, f"{prog} -I loads a PKCS#11 library"))
        elif (letter == "S" and prog in ("scp", "sftp")) or (letter == "D" and prog == "sftp"):
            out.append(Finding(HIGH, f"{prog} -{letter} {_RUNS}"))


def _source(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if len(words) > 1:
        out.append(Finding(HIGH, f"{prog} runs a script file in the shell"))


def _fc(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if not any(w.startswith("-") and "l" in w for w in words[1:]):
        out.append(Finding(HIGH, f"{prog} re-runs history commands or runs an editor"))


CHECKS: dict[str, Check] = {
    "systemctl": _systemctl,
    "init": _init,
    "kill": _kill,
    "rsync": _rsync,
    "find": _find,
    "zip": _zip,
    "ssh": _ssh,
    "source": _source,
    "fc": _fc,
}
