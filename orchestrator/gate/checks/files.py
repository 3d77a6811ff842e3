"""Checks of programs that change files: what they delete, chmod, chown, overwrite or move."""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.gate.checks.targets import critical_target, device, system_path
from orchestrator.gate.commands import parse_command
from orchestrator.gate.findings import CRITICAL, HIGH, MEDIUM, Check, Finding


def _rm(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    parsed = parse_command(words, prog)
    recursive = "--recursive" in parsed.flags
    force = "--force" in parsed.flags
    if "--no-preserve-root" in parsed.flags:
        out.append(Finding(CRITICAL, f"{prog} --no-preserve-root can delete /"))
    spelled = f"{prog} -r{'f' if force else ''}"
    if recursive:
        for target in parsed.positionals:
            if critical_target(target):
                out.append(Finding(CRITICAL, f"{spelled} on {target}"))
        if force:
            out.append(Finding(HIGH, f"{spelled} deletes files recursively"))
        else:
            out.append(Finding(MEDIUM, f"{spelled} deletes a directory tree"))


_NUMERIC_MODE = re.compile(r"[0-7]{1,4}")
_SYMBOLIC_CLAUSE = re.compile(r"([ugoa]*)((?:[-+=][rwxXstugo]*)+)")


def _mode_findings(prog: str, mode: str) -> list[str]:
    """Why a chmod mode is dangerous: world-writable, setuid/setgid."""
    why: list[str] = []
    if _NUMERIC_MODE.fullmatch(mode):
        value = int(mode, 8)
        if value & 0o002:
            why.append(f"{prog} {mode} makes files world-writable")
        if value & 0o6000:
            why.append(f"{prog} {mode} sets setuid/setgid")
        return why
    for clause in mode.split(","):
        m = _SYMBOLIC_CLAUSE.fullmatch(clause)
        if m is None:
            continue
        who, ops = m.group(1), m.group(2)
        for op in re.findall(r"[-+=][rwxXstugo]*", ops):
            if op[0] == "-":
                continue
            if "w" in op and ("a" in who or "o" in who):
                why.append(f"{prog} {mode} makes files world-writable")
            if "s" in op:
                why.append(f"{prog} {mode} sets setuid/setgid")
    return why


def _chmod(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    parsed = parse_command(words, prog)
    if not parsed.positionals:
        return
    mode, targets = parsed.positionals[0], parsed.positionals[1:]
    recursive = "--recursive" in parsed.flags
    for why in dict.fromkeys(_mode_findings(prog, mode)):
        out.append(Finding(HIGH, why))
    if recursive:
        for target in targets:
            if critical_target(target):
                out.append(Finding(CRITICAL, f"{prog} -R on {target}"))


def _chown(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    parsed = parse_command(words, prog)
    if "--recursive" in parsed.flags:
        for target in parsed.positionals[1:]:
            if critical_target(target):
                out.append(Finding(HIGH, f"{prog} -R on {target}"))


def _dd(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    for word in words[1:]:
        if word.startswith("of="):
            target = word[3:]
            system = system_path(target)
            if device(target):
                out.append(Finding(CRITICAL, f"{prog} writes to device {target}"))
            elif system is not None and system != "/dev":
                out.append(Finding(HIGH, f"{prog} writes into {system}"))


def _mv(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    parsed = parse_command(words, prog)
    if len(parsed.positionals) >= 2 and parsed.positionals[-1] == "/dev/null":
        out.append(Finding(HIGH, f"{prog} to /dev/null destroys the source"))
    for target in parsed.positionals:
        if critical_target(target):
            out.append(Finding(HIGH, f"{prog} moves {target}"))


def _copy_to_device(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    for word in parse_command(words, prog).positionals:
        if device(word):
            out.append(Finding(HIGH, f"{prog} writes to device {word}"))


def _tee(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    files = parse_command(words, prog).positionals
    for word in files:
        system = system_path(word)
        if device(word):
            out.append(Finding(HIGH, f"{prog} writes to device {word}"))
        elif system is not None and system != "/dev":
            out.append(Finding(HIGH, f"{prog} writes into {system}"))
    if files:
        out.append(Finding(MEDIUM, f"{prog} writes files"))


def _uniq(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if len(parse_command(words, prog).positionals) >= 2:
        out.append(Finding(HIGH, f"{prog} writes its second operand (OUTPUT file)"))


CHECKS: dict[str, Check] = {
    "rm": _rm,
    "chmod": _chmod,
    "chown": _chown,
    "dd": _dd,
    "mv": _mv,
    "cp": _copy_to_device,
    "tee": _tee,
    "uniq": _uniq,
}
