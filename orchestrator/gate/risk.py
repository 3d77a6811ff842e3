"""Command risk: findings from every command of a shell analysis and from its structure.

Levels (``RiskLevel``):

* critical - download executed by a shell/interpreter (``curl … | sh``, ``sh <(curl …)``,
  ``bash -c "$(curl …)"``), ``mkfs*``/``mke2fs``/``mkswap``, ``dd of=/dev/…``, fork bombs,
  recursive ``rm``/``chmod`` on ``/``, ``~``, ``$HOME`` or a system directory, ``rm --no-preserve-root``.
* high - privilege escalation (sudo, su, doas, pkexec, runuser, sudoedit), ``rm -rf`` in any
  spelling, world-writable or setuid ``chmod`` (``777``, ``a+rwx``, ``u+s``), ``chown -R`` on ``/`` or
  a system directory, SQL ``DROP TABLE|DATABASE|SCHEMA`` / ``TRUNCATE`` in an argument or here-doc,
  ``shred``, ``wipefs``, partition tools, ``kill … -1``, shutdown/reboot/halt/poweroff (also
  ``systemctl reboot``, ``init 0``), output redirected into a device or a system directory,
  credential paths in arguments or redirects, code fed to an interpreter through a pipe or
  substitution, a computed program name, a command string that cannot be analyzed, parse errors,
  nesting too deep to analyze.
* medium - pipelines, command lists, subshells, groups, substitutions, redirections, here-docs,
  control flow, functions, variable assignments, wrappers/eval, ``rm -r``, network tools (curl, wget,
  nc, ssh, scp, …), ``git push --force``, ``git reset --hard``, ``git clean -f``, ``find -delete``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from orchestrator.domain.sanitized import Risk, RiskLevel
from orchestrator.gate.commands import parse_command, program_name
from orchestrator.gate.intent import ShellAnalysis, analyze_shell
from orchestrator.gate.paths import SYSTEM_PREFIXES, credential_reason

__all__ = ["Finding", "assess_command", "combine"]

NO_RISK = "no risky pattern"
_MAX_HEREDOC_DEPTH = 2


@dataclass(frozen=True, slots=True)
class Finding:
    level: RiskLevel
    reason: str


LOW, MEDIUM, HIGH, CRITICAL = RiskLevel.LOW, RiskLevel.MEDIUM, RiskLevel.HIGH, RiskLevel.CRITICAL


def combine(findings: Iterable[Finding]) -> Risk:
    """The highest level (low if none) and every reason, deduplicated in order, joined by '; '."""
    level = LOW
    reasons: dict[str, None] = {}
    for finding in findings:
        level = max(level, finding.level)
        reasons[finding.reason] = None
    return Risk(risk_level=level.label, reason="; ".join(reasons) if reasons else NO_RISK)


# --------------------------------------------------------------------------------------------
# structure


def _structural(reason: str) -> Finding | None:
    if reason == "no command":
        return None
    if reason.startswith("parse error"):
        return Finding(HIGH, f"command could not be parsed reliably ({reason})")
    if reason == "expansion in command word":
        return Finding(HIGH, "program name is computed at run time (expansion in command word)")
    if "cannot be analyzed" in reason or "too deep" in reason:
        return Finding(HIGH, reason)
    return Finding(MEDIUM, reason)


_BENIGN_DEVICES = frozenset(
    {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/dev/zero", "/dev/full"}
)
_HOME_TARGETS = frozenset({"~", "$HOME", "${HOME}"})
_CRITICAL_DIRS = frozenset(
    {
        "/",
        *SYSTEM_PREFIXES,
        "/var",
        "/home",
        "/root",
        "/opt",
        "/srv",
        "/mnt",
        "/media",
        "/run",
        "/snap",
    }
)


def _normal_target(word: str) -> str:
    """A path argument normalised for comparisons: quotes dropped, '/./', '//', trailing '/' and
    '/*' folded (``/*`` → ``/``, ``"$HOME"/`` → ``$HOME``)."""
    text = word.replace('"', "").replace("'", "")
    while text.endswith(("/*", "/.")) and len(text) > 2:
        text = text[:-2]
    if text in ("/*", "/."):
        return "/"
    if text.startswith("/"):
        return posixpath.normpath(text).replace("//", "/")
    return text.rstrip("/") or text


def _critical_target(word: str) -> bool:
    target = _normal_target(word)
    return target in _CRITICAL_DIRS or target in _HOME_TARGETS


def _device(target: str) -> bool:
    return target.startswith("/dev/") and target not in _BENIGN_DEVICES and not target.startswith("/dev/fd/")


def _system_path(target: str) -> str | None:
    if not target.startswith("/"):
        return None
    normal = posixpath.normpath(target)
    for prefix in SYSTEM_PREFIXES:
        if normal == prefix or normal.startswith(prefix + "/"):
            return prefix
    return None


def _redirects(analysis: ShellAnalysis, out: list[Finding]) -> None:
    for op, target in analysis.redirects:
        if op.startswith("<<"):
            continue
        writes = ">" in op and not (op.endswith("&") and (target.isdigit() or target == "-"))
        if writes:
            if _device(target):
                out.append(Finding(HIGH, f"redirect writes to device {target}"))
                continue
            system = _system_path(target)
            if system is not None and system != "/dev":
                out.append(Finding(HIGH, f"redirect writes into {system}"))
                continue
        credential = credential_reason(target)
        if credential is not None:
            out.append(Finding(HIGH, f"{credential} in a redirect"))


# --------------------------------------------------------------------------------------------
# per-command checks

_Check = Callable[[str, Sequence[str], list[Finding]], None]


def _rm(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    parsed = parse_command(words, prog)
    recursive = "--recursive" in parsed.flags
    force = "--force" in parsed.flags
    if "--no-preserve-root" in parsed.flags:
        out.append(Finding(CRITICAL, f"{prog} --no-preserve-root can delete /"))
    spelled = f"{prog} -r{'f' if force else ''}"
    if recursive:
        for target in parsed.positionals:
            if _critical_target(target):
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
            if _critical_target(target):
                out.append(Finding(CRITICAL, f"{prog} -R on {target}"))


def _chown(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    parsed = parse_command(words, prog)
    if "--recursive" in parsed.flags:
        for target in parsed.positionals[1:]:
            if _critical_target(target):
                out.append(Finding(HIGH, f"{prog} -R on {target}"))


def _dd(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    for word in words[1:]:
        if word.startswith("of="):
            target = word[3:]
            system = _system_path(target)
            if _device(target):
                out.append(Finding(CRITICAL, f"{prog} writes to device {target}"))
            elif system is not None and system != "/dev":
                out.append(Finding(HIGH, f"{prog} writes into {system}"))


def _format(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    out.append(Finding(CRITICAL, f"{prog} formats a filesystem"))


def _destroy(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    what = {
        "shred": "destroys file contents",
        "wipefs": "wipes filesystem signatures",
        "blkdiscard": "discards a whole device",
    }.get(prog, "rewrites a partition table")
    out.append(Finding(HIGH, f"{prog} {what}"))


def _privilege(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    out.append(Finding(HIGH, f"{prog} escalates privileges"))


def _power(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    out.append(Finding(HIGH, f"{prog} stops or restarts the machine"))


_POWER_VERBS = frozenset({"poweroff", "reboot", "halt", "kexec", "emergency", "rescue", "suspend", "hibernate"})


def _systemctl(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    verbs = [w for w in words[1:] if not w.startswith("-")]
    if verbs and verbs[0] in _POWER_VERBS:
        out.append(Finding(HIGH, f"{prog} {verbs[0]} stops or restarts the machine"))


def _init(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if len(words) > 1 and words[1] in ("0", "6"):
        out.append(Finding(HIGH, f"{prog} {words[1]} stops or restarts the machine"))


def _kill(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    i = 1
    n = len(words)
    signal_seen = False
    pids: list[str] = []
    while i < n:
        w = words[i]
        i += 1
        if w == "--":
            pids.extend(words[i:])
            break
        if w in ("-s", "-n", "--signal"):
            i += 1
            signal_seen = True
        elif w.startswith("-") and not signal_seen and not pids:
            signal_seen = True
        else:
            pids.append(w)
    if "-1" in pids:
        out.append(Finding(HIGH, f"{prog} -1 signals every process"))


def _killall5(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    out.append(Finding(HIGH, f"{prog} signals every process"))


def _git(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    parsed = parse_command(words, prog)
    if not parsed.positionals:
        return
    sub = parsed.positionals[0]
    flags = parsed.flags
    if sub == "push" and "--force" in flags:
        out.append(Finding(MEDIUM, f"{prog} push --force rewrites remote history"))
    elif sub == "reset" and "--hard" in flags:
        out.append(Finding(MEDIUM, f"{prog} reset --hard discards local changes"))
    elif sub == "clean" and "--force" in flags and "--dry-run" not in flags:
        what = "untracked and ignored files" if ("-x" in flags or "-X" in flags) else "untracked files"
        out.append(Finding(MEDIUM, f"{prog} clean -f deletes {what}"))


_NETWORK = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "ssh", "scp", "sftp", "telnet", "ftp", "socat", "aria2c", "xh"}
)
_REMOTE_ARG = re.compile(r"^(?:[\w.-]+@)?[\w.-]+::?|^rsync://")


def _network(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    out.append(Finding(MEDIUM, f"{prog} uses the network"))


def _rsync(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if any(_REMOTE_ARG.match(w) for w in words[1:] if not w.startswith("-")):
        out.append(Finding(MEDIUM, f"{prog} uses the network"))


def _find(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if "-delete" in words[1:]:
        out.append(Finding(MEDIUM, f"{prog} -delete deletes files"))


def _mv(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    parsed = parse_command(words, prog)
    if len(parsed.positionals) >= 2 and parsed.positionals[-1] == "/dev/null":
        out.append(Finding(HIGH, f"{prog} to /dev/null destroys the source"))
    for target in parsed.positionals:
        if _critical_target(target):
            out.append(Finding(HIGH, f"{prog} moves {target}"))


def _copy_to_device(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    for word in words[1:]:
        if not word.startswith("-") and _device(word):
            out.append(Finding(HIGH, f"{prog} writes to device {word}"))


_CHECKS: dict[str, _Check] = {
    "rm": _rm,
    "chmod": _chmod,
    "chown": _chown,
    "chgrp": _chown,
    "dd": _dd,
    "mke2fs": _format,
    "mkswap": _format,
    "shred": _destroy,
    "wipefs": _destroy,
    "blkdiscard": _destroy,
    "fdisk": _destroy,
    "sfdisk": _destroy,
    "cfdisk": _destroy,
    "gdisk": _destroy,
    "sgdisk": _destroy,
    "parted": _destroy,
    "sudo": _privilege,
    "sudoedit": _privilege,
    "su": _privilege,
    "doas": _privilege,
    "pkexec": _privilege,
    "runuser": _privilege,
    "shutdown": _power,
    "reboot": _power,
    "halt": _power,
    "poweroff": _power,
    "systemctl": _systemctl,
    "init": _init,
    "telinit": _init,
    "kill": _kill,
    "killall5": _killall5,
    "git": _git,
    "rsync": _rsync,
    "find": _find,
    "mv": _mv,
    "cp": _copy_to_device,
    "tee": _copy_to_device,
    **dict.fromkeys(_NETWORK, _network),
}


def _check_for(prog: str) -> _Check | None:
    check = _CHECKS.get(prog)
    if check is None and prog.startswith("mkfs"):
        return _format
    return check


# --------------------------------------------------------------------------------------------
# arguments: credentials, SQL

_MAYBE_SQL = re.compile(r"drop|truncate", re.IGNORECASE)
_SQL = re.compile(
    r"\b(?P<drop>drop\s+(?:table|database|schema)\b)"
    r"|\b(?P<truncate>truncate\s+(?:table\s+)?(?:only\s+)?[\w.\"`\[\]]+\s*(?:;|$))",
    re.IGNORECASE,
)
_MAYBE_CREDENTIAL = re.compile(r"\.|id_|etc|proc|run|kubeconfig|credentials|_netrc", re.IGNORECASE)


def _sql(text: str) -> str | None:
    m = _SQL.search(text)
    if m is None:
        return None
    if m.group("drop") is not None:
        return " ".join(m.group("drop").upper().split())
    return "TRUNCATE"


# --------------------------------------------------------------------------------------------
# code fed to interpreters

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "rbash", "yash", "posh"})
_INTERPRETER = re.compile(r"(?:python|pypy)[\d.]*|perl[\d.]*|ruby[\d.]*|node|nodejs|php[\d.]*|lua[\d.]*|bun")
_CODE_OPTION = {"python": "c", "pypy": "c", "perl": "eE", "ruby": "e", "node": "ep", "php": "r", "lua": "e"}
_DOWNLOADERS = frozenset(
    {
        "curl",
        "wget",
        "fetch",
        "aria2c",
        "http",
        "https",
        "xh",
        "lwp-download",
        "nc",
        "ncat",
        "netcat",
        "socat",
    }
)


def _substituted(word: str) -> bool:
    return "$(" in word or "`" in word or "<(" in word


def _stdin_script(word: str) -> bool:
    return word in ("-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0") or _substituted(word)


def _shell_runs_input(words: Sequence[str]) -> bool:
    """A shell that executes its stdin, or a script/-c string that comes from a substitution."""
    has_c = False
    i = 1
    n = len(words)
    while i < n:
        w = words[i]
        if w in ("--", "-"):
            i += 1
            break
        if len(w) < 2 or w[0] not in "-+":
            break
        if w.startswith("--"):
            if w in ("--rcfile", "--init-file"):
                i += 1
            i += 1
            continue
        if w[0] == "-" and "c" in w:
            has_c = True
        if "s" in w[1:] and w[0] == "-":
            return True
        if "o" in w or "O" in w:
            i += 1
        i += 1
    if i >= n:
        return not has_c
    return _stdin_script(words[i]) if not has_c else _substituted(words[i])


def _interpreter_runs_input(family: str, words: Sequence[str]) -> bool:
    code = _CODE_OPTION.get(family, "")
    i = 1
    n = len(words)
    while i < n:
        w = words[i]
        if w == "-":
            return True
        if w == "--":
            i += 1
            break
        if len(w) < 2 or w[0] != "-":
            break
        if w.startswith("--"):
            if w in ("--eval", "--print", "--command"):
                return i + 1 < n and _substituted(words[i + 1])
            i += 1
            continue
        letter = w[1]
        if letter in code:
            value = w[2:] or (words[i + 1] if i + 1 < n else "")
            return _substituted(value)
        if family in ("python", "pypy") and letter == "m":
            return False
        i += 1
    if i >= n:
        return True
    return _stdin_script(words[i])


def _runs_input(words: Sequence[str]) -> str | None:
    """The program name when ``words`` executes the data it is fed as code, else None."""
    if not words:
        return None
    prog = program_name(words)
    if _substituted(words[0]):
        return "a computed command"
    if prog in _SHELLS:
        return prog if _shell_runs_input(words) else None
    m = _INTERPRETER.fullmatch(prog)
    if m is not None:
        family = re.sub(r"[\d.]+$", "", prog)
        family = "node" if family == "nodejs" else family
        return prog if _interpreter_runs_input(family, words) else None
    if prog in ("source", "."):
        return prog if len(words) > 1 and _stdin_script(words[1]) else None
    if prog == "eval":
        return prog if any(_substituted(w) for w in words[1:]) else None
    return None


def _reach(starts: Iterable[int], edges: dict[int, list[int]]) -> set[int]:
    seen: set[int] = set()
    stack = list(starts)
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(edges.get(node, ()))
    return seen


def _fed_code(analysis: ShellAnalysis, out: list[Finding]) -> None:
    commands = analysis.commands
    edges: dict[int, list[int]] = {}
    for i, j in analysis.flows:
        edges.setdefault(i, []).append(j)
    for i, j in analysis.wraps:
        edges.setdefault(i, []).append(j)
    fed = _reach((j for _, j in analysis.flows), edges)
    downloaders = [i for i, words in enumerate(commands) if program_name(words) in _DOWNLOADERS]
    for j in sorted(fed):
        runner = _runs_input(commands[j])
        if runner is None:
            continue
        sources = [d for d in downloaders if j in _reach(edges.get(d, ()), edges)]
        if sources:
            out.append(Finding(CRITICAL, f"{program_name(commands[sources[0]])} download is executed by {runner}"))
        else:
            out.append(Finding(HIGH, f"{runner} runs code it is fed (pipe or substitution)"))


def _heredoc_code(analysis: ShellAnalysis, out: list[Finding], depth: int) -> None:
    bodies = [target for op, target in analysis.redirects if op.startswith("<<")]
    if not bodies:
        return
    shells = [program_name(w) for w in analysis.commands if program_name(w) in _SHELLS and _shell_runs_input(w)]
    if not shells:
        return
    out.append(Finding(MEDIUM, f"{shells[0]} runs a here-document"))
    if depth < _MAX_HEREDOC_DEPTH:
        for body in bodies:
            out.extend(_assess(analyze_shell(body), depth + 1))


# --------------------------------------------------------------------------------------------


def _assess(analysis: ShellAnalysis, depth: int) -> list[Finding]:
    out: list[Finding] = []
    if analysis.is_complex:
        for reason in analysis.reasons:
            finding = _structural(reason)
            if finding is not None:
                out.append(finding)
    for name in analysis.self_spawning:
        out.append(Finding(CRITICAL, f"fork bomb (function '{name}' spawns itself)"))
    credentials: dict[str, str] = {}
    sql: dict[str, str] = {}
    for words in analysis.commands:
        if not words:
            continue
        prog = program_name(words)
        check = _check_for(prog)
        if check is not None:
            check(prog, words, out)
        if len(words) > 1:
            joined = "\n".join(words[1:])
            if _MAYBE_CREDENTIAL.search(joined) is not None:
                for word in words[1:]:
                    label = credential_reason(word)
                    if label is not None:
                        credentials.pop(label, None)
                        credentials[label] = prog
            if _MAYBE_SQL.search(joined) is not None:
                for word in words[1:]:
                    statement = _sql(word)
                    if statement is not None:
                        sql.pop(statement, None)
                        sql[statement] = prog
    for op, target in analysis.redirects:
        if op.startswith("<<") and _MAYBE_SQL.search(target) is not None:
            for line in target.splitlines():
                statement = _sql(line)
                if statement is not None:
                    sql.setdefault(statement, "a here-document" if op != "<<<" else "a here-string")
    out.extend(Finding(HIGH, f"{label} in arguments of {prog}") for label, prog in credentials.items())
    out.extend(Finding(HIGH, f"SQL {statement} in {_where(prog)}") for statement, prog in sql.items())
    if analysis.redirects:
        _redirects(analysis, out)
        _heredoc_code(analysis, out, depth)
    if analysis.flows:
        _fed_code(analysis, out)
    return out


def _where(prog: str) -> str:
    return prog if prog.startswith("a ") else f"arguments of {prog}"


def assess_command(analysis: ShellAnalysis) -> list[Finding]:
    """Every finding for an analyzed command: structure, each command, redirects, data flows."""
    return _assess(analysis, 0)
