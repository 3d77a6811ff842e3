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
  credential paths in arguments or redirects (also respelled: ``/etc//shadow``, braces
  ``/etc/{shadow,x}``, globs that may match one: ``/etc/shad*``, ``.en?``), code fed to an
  interpreter through a pipe or substitution, a computed program name, a command string that cannot
  be analyzed, parse errors, nesting too deep to analyze; options that run programs or write files
  (``DANGEROUS_OPTIONS`` and the readers below: ``git -c``, ``git diff --output``, ``sort -o``,
  ``rg --pre``, ``tar --to-command``, ``find -exec/-delete/-fprint``, awk ``system()``/pipes/``print >``,
  sed ``e``/``w``, ...); interpreters running code (``python3 -c``, ``node -e``, ``perl -e``, a
  script operand, code from stdin/a REPL: ``runs code given on the command line``); a shell running a
  script or its input; ``source``/``.``, ``enable -f``, ``bind -x``, ``complete -C``, ``fc``,
  ``hash -p``; expansions that can evaluate code (``${X@P}``, ``$((X))``, ``${a[X]}``, ``let``, ...);
  a shell here-document with expansions; dangerous env keys in the request (``assess_env``) or in
  assignments (``LD_PRELOAD=x cmd``, ``env PATH=… cmd``, ``export BASH_ENV=…``); an env value that
  names a credential path or makes a command high once substituted.
* medium - pipelines, command lists, subshells, groups, substitutions, redirections, here-docs,
  control flow, functions, variable assignments, wrappers/eval, ``rm -r``, network tools (curl, wget,
  nc, ssh, scp, …), ``git push --force``, ``git reset --hard``, ``git clean -f``; a plain expansion in
  an argument (``argument expands $F``: the gate does not see its value), ``python3 -m MODULE``,
  ``date -s``, ``file -C``, ``sed -i``, ``tee FILE``, ``git diff --textconv``, ``git --work-tree``
  outside the workspace, a glob under ``/etc``, ``/root``, ``/home``, ``/proc``, ``~``…, a
  ``/dev/tcp`` redirect, env ``CDPATH``/``GLOBIGNORE``/``*_PROXY``.

Decisions: ``git -c`` is high for every key but a few display ones (color.*, column.*, advice.*,
core.quotepath, log.date, user.name, …); ``git -C``/``--git-dir`` are high only outside the workspace
(absolute, ``~``, ``..``, computed: the repository's config can run programs; the workspace's own
config is already trusted); ``--textconv`` is medium (the same filters run by default for diff/log);
``rg --pre-glob`` alone runs nothing; ``python3 -m`` is medium like ``pytest`` (high next to an
information option: ``python3 -m x --version`` must not pass for ``python3 --version``); a script
operand is high; ``HOME``/``XDG_CONFIG_HOME`` are high (``~/.gitconfig`` can set core.fsmonitor for
``git status``); ``TMPDIR`` is not flagged. less/more (``LESSOPEN`` is an env key), grep, head, tail,
cat, wc, ls, stat, file -m, which, uname, echo, pwd, diff need no option table: none of their
options runs a program (``date -f``/``diff --to-file``/``file -m`` only read).
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.domain.sanitized import Risk, RiskLevel
from orchestrator.gate.commands import (
    GIT_DIFF_FAMILY,
    parse_command,
    program_name,
    resolve_long,
    scan_shell_options,
)
from orchestrator.gate.intent import EVAL_REASON, ShellAnalysis, analyze_shell
from orchestrator.gate.paths import SYSTEM_PREFIXES, credential_reason, glob_reason, has_glob

__all__ = [
    "DANGEROUS_OPTIONS",
    "ENV_KEYS",
    "ENV_PREFIXES",
    "ENV_SUFFIXES",
    "Finding",
    "assess_command",
    "assess_env",
    "combine",
]

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
    if reason.startswith(EVAL_REASON):
        return Finding(HIGH, reason)
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
        if target.startswith(("/dev/tcp/", "/dev/udp/")):
            out.append(Finding(MEDIUM, f"redirect opens a network connection ({target[:8]})"))
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


_NETWORK = frozenset(
    {"curl", "wget", "nc", "ncat", "netcat", "ssh", "scp", "sftp", "telnet", "ftp", "socat", "aria2c", "xh"}
)
_REMOTE_ARG = re.compile(r"^(?:[\w.-]+@)?[\w.-]+::?|^rsync://")


def _network(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    out.append(Finding(MEDIUM, f"{prog} uses the network"))


def _rsync(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if any(_REMOTE_ARG.match(w) for w in words[1:] if not w.startswith("-")):
        out.append(Finding(MEDIUM, f"{prog} uses the network"))
    _dangerous_options(prog, words, out)


def _network_and_options(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    _network(prog, words, out)
    _dangerous_options(prog, words, out)


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


# --------------------------------------------------------------------------------------------
# options that run programs or write files
#
# Matched on ``parse_command`` flags, so every spelling of an option counts (``-o``, ``--output``,
# ``--out``, ``-uo``, ``-ofile``: commands.FLAG_TABLE lists the programs' spellings). For git the
# key is "git SUBCOMMAND"; git's global options are read by ``_git`` itself.

_RUNS = "runs a program"
_WRITES = "writes a file"
_GIT_DIFF_OPTIONS: Mapping[str, tuple[RiskLevel, str]] = {
    "--output": (HIGH, _WRITES),
    "--ext-diff": (HIGH, "runs the external diff program of the configuration"),
    "--textconv": (MEDIUM, "runs the text conversion filters of the configuration"),
}

DANGEROUS_OPTIONS: Mapping[str, Mapping[str, tuple[RiskLevel, str]]] = {
    **dict.fromkeys(GIT_DIFF_FAMILY, _GIT_DIFF_OPTIONS),
    "git cat-file": {
        "--textconv": (MEDIUM, "runs the text conversion filters of the configuration"),
        "--filters": (MEDIUM, "runs the filters of the configuration"),
    },
    "git clone": {
        "--upload-pack": (HIGH, _RUNS),
        "--template": (HIGH, "installs hooks from a template directory"),
        "--config": (HIGH, "sets configuration that can run programs"),
    },
    "git fetch": {"--upload-pack": (HIGH, _RUNS)},
    "git pull": {"--upload-pack": (HIGH, _RUNS)},
    "git ls-remote": {"--upload-pack": (HIGH, _RUNS)},
    "git archive": {"--exec": (HIGH, _RUNS), "--output": (HIGH, _WRITES)},
    "git push": {"--receive-pack": (HIGH, _RUNS), "--exec": (HIGH, _RUNS)},
    "git send-pack": {"--receive-pack": (HIGH, _RUNS)},
    "git rebase": {"--exec": (HIGH, "runs a command after each commit")},
    "git difftool": {"--extcmd": (HIGH, _RUNS)},
    "git grep": {"--open-files-in-pager": (HIGH, _RUNS)},
    "git send-email": dict.fromkeys(
        ("--sendmail-cmd", "--smtp-server", "--to-cmd", "--cc-cmd", "--header-cmd"), (HIGH, _RUNS)
    ),
    "sort": {"--output": (HIGH, _WRITES), "--compress-program": (HIGH, _RUNS)},
    "tar": {
        "--to-command": (HIGH, _RUNS),
        "--use-compress-program": (HIGH, _RUNS),
        "--checkpoint-action": (HIGH, "can run a command"),
        "--info-script": (HIGH, _RUNS),
        "--rsh-command": (HIGH, _RUNS),
        "--rmt-command": (HIGH, _RUNS),
    },
    "rsync": {"--rsh": (HIGH, _RUNS), "--rsync-path": (HIGH, _RUNS)},
    "rg": {"--pre": (HIGH, "runs a program on every file"), "--hostname-bin": (HIGH, _RUNS)},
    "date": {"--set": (MEDIUM, "sets the system clock")},
    "file": {"--compile": (MEDIUM, "writes a compiled magic file")},
    "sed": {
        "--in-place": (MEDIUM, "edits files in place"),
        "--file": (HIGH, "runs a script file (its commands can run programs and write files)"),
    },
    "sdiff": {"--output": (HIGH, _WRITES), "--diff-program": (HIGH, _RUNS)},
    "diff3": {"--diff-program": (HIGH, _RUNS)},
    "scp": {"-S": (HIGH, _RUNS)},
    "sftp": {"-S": (HIGH, _RUNS), "-D": (HIGH, _RUNS)},
    "wget": {"--use-askpass": (HIGH, _RUNS)},
}
"""Program (``"git SUBCOMMAND"`` for git) → canonical option → (level, what it does)."""


def _options(key: str, prog: str, flags: frozenset[str], out: list[Finding]) -> None:
    table = DANGEROUS_OPTIONS.get(key)
    if table is None:
        return
    shown = prog if key == prog or " " not in key else f"{prog} {key.split(' ', 1)[1]}"
    for option, (level, what) in table.items():
        if option in flags:
            out.append(Finding(level, f"{shown} {option} {what}"))


def _dangerous_options(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    _options(prog, prog, parse_command(words, prog).flags, out)


# git: global options, subcommands that run commands, configuration that runs programs

_GIT_SAFE_CONFIG = re.compile(
    r"(?:color|column|advice|i18n)\.[\w.-]+"
    r"|core\.(?:quotepath|abbrev)|log\.(?:date|decorate|abbrevcommit)"
    r"|diff\.(?:noprefix|renames|mnemonicprefix|relative)|user\.(?:name|email)|init\.defaultbranch",
    re.IGNORECASE,
)
"""``git -c`` keys that only change output; every other key may run a program (core.fsmonitor,
core.pager, diff.external, alias.*, core.hooksPath, credential.helper, filter.*, …)."""
_GIT_EXEC_CONFIG = re.compile(
    r"core\.(?:fsmonitor|pager|editor|sshcommand|hookspath|askpass|gitproxy|alternaterefscommand|worktree)"
    r"|diff\.external|(?:diff|merge|filter)\..+|alias\..+|credential\..*helper|sequence\.editor"
    r"|gpg\..*program|pager\..+|uploadpack\.packobjectshook|protocol\..+|remote\..+\.(?:uploadpack|receivepack|proxy)"
    r"|include\.path|includeif\..+|(?:difftool|mergetool|man|browser|instaweb|sendemail)\..+|web\.browser"
    r"|safe\.directory|submodule\..+\.update|core\.sshcommand|ssh\.variant",
    re.IGNORECASE,
)
"""``git config`` keys whose value is a program (or that pull in more configuration)."""
_GIT_PATH_OPTIONS = {"-C": "-C", "--git-dir": "--git-dir", "--work-tree": "--work-tree"}
_GIT_GLOBAL_VALUES = frozenset({"--namespace", "--super-prefix", "--list-cmds", "--attr-source"})


def _outside(path: str) -> bool:
    """A path that is not plainly inside the workspace: absolute, ``~``, ``..`` or computed."""
    text = path.replace('"', "").replace("'", "")
    return text.startswith(("/", "~", "$")) or ".." in text.split("/") or "`" in text


def _git_config_key(word: str) -> str:
    key = word.split("=", 1)[0]
    return key if len(key) <= 60 else key[:57] + "..."


def _git_globals(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    n = len(words)
    i = 1
    while i < n:
        w = words[i]
        value: str | None = None
        name = w
        if w.startswith("--") and "=" in w:
            name, _, value = w.partition("=")
        elif w in ("-c", "--config-env", *_GIT_PATH_OPTIONS, *_GIT_GLOBAL_VALUES):
            value = words[i + 1] if i + 1 < n else ""
            i += 1
        elif not w.startswith("-") or w == "--":
            return
        i += 1
        if value is None:
            continue
        if name == "-c":
            if not _GIT_SAFE_CONFIG.fullmatch(value.split("=", 1)[0]):
                key = _git_config_key(value)
                out.append(Finding(HIGH, f"{prog} -c {key} sets configuration that can run programs"))
        elif name == "--config-env":
            key = _git_config_key(value)
            out.append(Finding(HIGH, f"{prog} --config-env {key} sets configuration that can run programs"))
        elif name == "--exec-path":
            out.append(Finding(HIGH, f"{prog} --exec-path= runs git programs from another directory"))
        elif name in _GIT_PATH_OPTIONS and _outside(value):
            if name == "--work-tree":
                out.append(Finding(MEDIUM, f"{prog} --work-tree reads a tree outside the workspace"))
            else:
                why = "uses a repository outside the workspace (its configuration can run programs)"
                out.append(Finding(HIGH, f"{prog} {name} {why}"))


def _git(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if len(words) > 1 and words[1].startswith("-"):
        _git_globals(prog, words, out)
    parsed = parse_command(words, prog)
    if not parsed.positionals:
        return
    sub = parsed.positionals[0]
    flags = parsed.flags
    _options(f"git {sub}", prog, flags, out)
    rest = parsed.positionals[1:]
    if sub == "push" and "--force" in flags:
        out.append(Finding(MEDIUM, f"{prog} push --force rewrites remote history"))
    elif sub == "reset" and "--hard" in flags:
        out.append(Finding(MEDIUM, f"{prog} reset --hard discards local changes"))
    elif sub == "clean" and "--force" in flags and "--dry-run" not in flags:
        what = "untracked and ignored files" if ("-x" in flags or "-X" in flags) else "untracked files"
        out.append(Finding(MEDIUM, f"{prog} clean -f deletes {what}"))
    elif sub == "submodule" and "foreach" in rest:
        out.append(Finding(HIGH, f"{prog} submodule foreach runs a command"))
    elif sub == "bisect" and rest[:1] == ("run",):
        out.append(Finding(HIGH, f"{prog} bisect run runs a command"))
    elif sub == "filter-branch":
        out.append(Finding(HIGH, f"{prog} filter-branch runs filter commands"))
    elif sub == "config":
        keys = rest[1:2] if rest[:1] and rest[0] in ("set", "--add") else rest[:1] if len(rest) >= 2 else []
        for key in keys:
            if _GIT_EXEC_CONFIG.fullmatch(key):
                out.append(Finding(HIGH, f"{prog} config {_git_config_key(key)} sets a program git will run"))


# find, tee, uniq, zip, ssh

_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_FIND_WRITE = frozenset({"-fprint", "-fprint0", "-fprintf", "-fls"})


def _find(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    for word in words[1:]:
        if word in _FIND_EXEC:
            out.append(Finding(HIGH, f"{prog} {word} runs a command"))
        elif word in _FIND_WRITE:
            out.append(Finding(HIGH, f"{prog} {word} writes a file"))
        elif word == "-delete":
            out.append(Finding(HIGH, f"{prog} -delete deletes files"))


def _tee(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    files = [w for w in words[1:] if not (w.startswith("-") and len(w) > 1)]
    for word in files:
        system = _system_path(word)
        if _device(word):
            out.append(Finding(HIGH, f"{prog} writes to device {word}"))
        elif system is not None and system != "/dev":
            out.append(Finding(HIGH, f"{prog} writes into {system}"))
    if files:
        out.append(Finding(MEDIUM, f"{prog} writes files"))


def _uniq(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if len(parse_command(words, prog).positionals) >= 2:
        out.append(Finding(HIGH, f"{prog} writes its second operand (OUTPUT file)"))


def _zip(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    for word in words[1:]:
        if word == "--":
            break
        if (word.startswith("-") and not word.startswith("--") and "TT" in word) or word.startswith("--unzip-command"):
            out.append(Finding(HIGH, f"{prog} -TT/--unzip-command runs a program"))
            return


_SSH_VALUES = "BbcDEeFIiJLlmOoPpQRSWw"
_SSH_EXEC_OPTIONS = re.compile(
    r"\s*(?:proxycommand|localcommand|permitlocalcommand|knownhostscommand|pkcs11provider|securitykeyprovider"
    r"|match|include)\b",
    re.IGNORECASE,
)


def _ssh(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """ssh/scp/sftp options that run local programs: ``-o ProxyCommand=…`` (and LocalCommand,
    KnownHostsCommand, PKCS11Provider, …), ``-F CONFIG`` (a config can set them), ``-I`` (PKCS#11
    library), scp/sftp ``-S PROGRAM``, sftp ``-D PROGRAM``."""
    n = len(words)
    i = 1
    while i < n:
        w = words[i]
        if w == "--":
            break
        if len(w) < 2 or w[0] != "-":
            if prog == "ssh":
                break
            i += 1
            continue
        for j in range(1, len(w)):
            ch = w[j]
            if ch not in _SSH_VALUES:
                continue
            value = w[j + 1 :]
            if not value and i + 1 < n:
                i += 1
                value = words[i]
            if ch == "o" and _SSH_EXEC_OPTIONS.match(value):
                out.append(Finding(HIGH, f"{prog} -o {value.split('=')[0].split()[0]} runs a local program"))
            elif ch == "F" and value not in ("/dev/null", "none"):
                out.append(Finding(HIGH, f"{prog} -F reads a configuration that can run local programs"))
            elif ch == "I" and prog == "ssh":
                out.append(Finding(HIGH, f"{prog} -I loads a PKCS#11 library"))
            elif (ch == "S" and prog in ("scp", "sftp")) or (ch == "D" and prog == "sftp"):
                out.append(Finding(HIGH, f"{prog} -{ch} {_RUNS}"))
            break
        i += 1


def _ssh_and_network(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    _network(prog, words, out)
    _ssh(prog, words, out)


# tar: old-style bundles (``tar xIf prog a.tar``) carry options too


def _tar(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    _dangerous_options(prog, words, out)
    if len(words) > 1 and words[1] and not words[1].startswith("-"):
        for letter, option in (("I", "--use-compress-program"), ("F", "--info-script")):
            if letter in words[1]:
                out.append(Finding(HIGH, f"{prog} {option} {_RUNS}"))


# awk: the program text

_AWKS = frozenset({"awk", "gawk", "mawk", "nawk", "original-awk", "busybox-awk"})
_AWK_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_AWK_REGEX = re.compile(r"(^|[\n(,~!{};&|?:=])(\s*)/(?:[^/\\\n]|\\.)*/")
_AWK_CHECKS = (
    (re.compile(r"\bsystem\b"), "runs commands (system)"),
    (re.compile(r"(?<!\|)\|(?!\|)"), "runs commands through a pipe"),
    (re.compile(r"@"), "loads code or calls a function indirectly (@)"),
)
_AWK_PRINT = re.compile(r"\bprintf?\b")


def _awk_print_redirects(text: str) -> bool:
    """A ``>`` outside parentheses in a print/printf statement: output redirected into a file."""
    for m in _AWK_PRINT.finditer(text):
        depth = 0
        for ch in text[m.end() :]:
            if ch in ";}\n":
                break
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == ">" and depth <= 0:
                return True
    return False


_AWK_CODE_LONG = {"--file": "-f", "--exec": "-E", "--include": "-i", "--load": "-l", "--source": "-e"}
_AWK_VALUES = "fvFEilWe"


def _awk_program(text: str) -> list[str]:
    stripped = _AWK_STRING.sub('""', text)
    stripped = _AWK_REGEX.sub(r"\1\2//", stripped)
    found = [what for pattern, what in _AWK_CHECKS if pattern.search(stripped)]
    if _awk_print_redirects(stripped):
        found.append("writes files (print >)")
    return found


def _awk(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """Program files/libraries (``-f``, ``-E``, ``-i``, ``-l``) are unknown code: HIGH. Program text
    (``-e``/``--source`` or the first operand) is HIGH when it calls ``system``, pipes to or from a
    command, redirects ``print`` into a file or uses ``@`` (gawk ``@load``/indirect calls); not with
    gawk ``--sandbox``/``-S``."""
    n = len(words)
    i = 1
    programs: list[str] = []
    loaded: str | None = None
    sandbox = False
    while i < n:
        w = words[i]
        if w == "--":
            i += 1
            break
        if len(w) < 2 or w[0] != "-":
            break
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            matches = [long for long in (*_AWK_CODE_LONG, "--sandbox") if long.startswith(name) and len(name) > 3]
            name = matches[0] if len(matches) == 1 else name
            if name == "--sandbox":
                sandbox = True
            elif name in _AWK_CODE_LONG:
                if not eq and i + 1 < n:
                    i += 1
                    value = words[i]
                if name == "--source":
                    programs.append(value)
                else:
                    loaded = loaded or _AWK_CODE_LONG[name]
            i += 1
            continue
        for j in range(1, len(w)):
            ch = w[j]
            if ch == "S":
                sandbox = True
            if ch in _AWK_VALUES:
                value = w[j + 1 :]
                if not value and i + 1 < n:
                    i += 1
                    value = words[i]
                if ch == "e":
                    programs.append(value)
                elif ch in "fEil" or (ch == "W" and "exec" in value):
                    loaded = loaded or f"-{ch}"
                break
        i += 1
    if loaded is not None:
        out.append(Finding(HIGH, f"{prog} {loaded} runs a program file or library"))
    elif not programs and i < n:
        programs.append(words[i])
    if sandbox:
        return
    for text in programs:
        for what in _awk_program(text):
            out.append(Finding(HIGH, f"{prog} program {what}"))


# sed: the script

_SED_NO_ARGUMENT = frozenset("=dDgGhHlLnNpPxzF")
_SED_TEXT = frozenset("aic")
_SED_LABEL = frozenset("btT:")
_SED_FILE_READ = frozenset("rR")


class _SedScript:
    """A reader of GNU sed scripts, enough to find the commands that run programs (``e``, the ``s``
    flag ``e``) or write files (``w``, ``W``, the ``s`` flag ``w``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.found: dict[str, None] = {}
        self.ok = True

    def _delimited(self, delim: str, regex: bool) -> bool:
        """Skip to after the closing ``delim``; bracket expressions in a regex hide it."""
        text = self.text
        n = len(text)
        while self.i < n:
            ch = text[self.i]
            if ch == "\n":
                return False
            if ch == "\\":
                self.i += 2
                continue
            if ch == delim:
                self.i += 1
                return True
            if regex and ch == "[":
                self.i += 1
                if self.i < n and text[self.i] == "^":
                    self.i += 1
                if self.i < n and text[self.i] == "]":
                    self.i += 1
                while self.i < n and text[self.i] != "]":
                    if text[self.i] == "[" and self.i + 1 < n and text[self.i + 1] in ".:=":
                        close = text.find(text[self.i + 1] + "]", self.i + 2)
                        if close < 0:
                            return False
                        self.i = close + 2
                        continue
                    if text[self.i] == "\n":
                        return False
                    self.i += 1
                self.i += 1
                continue
            self.i += 1
        return False

    def _to_line_end(self) -> None:
        end = self.text.find("\n", self.i)
        self.i = len(self.text) if end < 0 else end

    def _text_argument(self) -> None:
        text = self.text
        n = len(text)
        while self.i < n:
            if text[self.i] == "\\":
                self.i += 2
                continue
            if text[self.i] == "\n":
                return
            self.i += 1

    def _address(self) -> bool:
        text = self.text
        n = len(text)
        for _ in range(2):
            while self.i < n and text[self.i] in " \t":
                self.i += 1
            if self.i >= n:
                return True
            ch = text[self.i]
            if ch.isdigit() or ch in "+~":
                self.i += 1
                while self.i < n and (text[self.i].isdigit() or text[self.i] == "~"):
                    self.i += 1
            elif ch == "$":
                self.i += 1
            elif ch in {"/", "\\"}:
                delim = "/"
                if ch == "\\":
                    if self.i + 1 >= n:
                        return False
                    delim = text[self.i + 1]
                    self.i += 1
                self.i += 1
                if not self._delimited(delim, regex=True):
                    return False
                while self.i < n and text[self.i] in "IM":
                    self.i += 1
            else:
                return True
            while self.i < n and text[self.i] in " \t":
                self.i += 1
            if self.i < n and text[self.i] == ",":
                self.i += 1
                continue
            return True
        return True

    def read(self) -> None:
        text = self.text
        n = len(text)
        while self.i < n:
            ch = text[self.i]
            if ch in " \t\n;}{":
                self.i += 1
                continue
            if ch == "#":
                self._to_line_end()
                continue
            if not self._address():
                self.ok = False
                return
            while self.i < n and text[self.i] in " \t!":
                self.i += 1
            if self.i >= n:
                return
            cmd = text[self.i]
            self.i += 1
            if cmd in "{}" or cmd in _SED_NO_ARGUMENT:
                if cmd in "lL":
                    while self.i < n and text[self.i].isdigit():
                        self.i += 1
                continue
            if cmd in "qQ":
                while self.i < n and (text[self.i].isdigit() or text[self.i] in " \t"):
                    self.i += 1
            elif cmd in _SED_TEXT:
                self._text_argument()
            elif cmd in _SED_LABEL:
                while self.i < n and text[self.i] not in ";\n":
                    self.i += 1
            elif cmd in _SED_FILE_READ or cmd == "v":
                self._to_line_end()
            elif cmd == "e":
                self.found["runs a command (e)"] = None
                self._to_line_end()
            elif cmd in "wW":
                if not self._stdout_file():
                    self.found[f"writes a file ({cmd})"] = None
                self._to_line_end()
            elif cmd in "sy":
                if self.i >= n or text[self.i] in "\n\\":
                    self.ok = False
                    return
                delim = text[self.i]
                self.i += 1
                if not self._delimited(delim, regex=cmd == "s") or not self._delimited(delim, regex=False):
                    self.ok = False
                    return
                if cmd == "s":
                    while self.i < n and text[self.i] in "gpiImMe0123456789w":
                        flag = text[self.i]
                        self.i += 1
                        if flag == "e":
                            self.found["runs the pattern space as a command (s///e)"] = None
                        elif flag == "w":
                            if not self._stdout_file():
                                self.found["writes a file (s///w)"] = None
                            self._to_line_end()
                            break
            else:
                self.ok = False
                return

    def _stdout_file(self) -> bool:
        rest = self.text[self.i :].split("\n", 1)[0].strip()
        return rest in ("/dev/stdout", "/dev/stderr")


def _sed_scripts(words: Sequence[str]) -> tuple[list[str], bool]:
    """The script texts of a sed command and whether ``--sandbox`` is given."""
    n = len(words)
    i = 1
    scripts: list[str] = []
    sandbox = False
    named = False
    while i < n:
        w = words[i]
        if w == "--":
            i += 1
            break
        if len(w) < 2 or w[0] != "-":
            i += 1
            continue
        if w.startswith("--"):
            name, eq, value = w.partition("=")
            canonical = resolve_long("sed", name)[0]
            if canonical == "--sandbox":
                sandbox = True
            elif canonical in ("--expression", "--file", "--line-length"):
                if not eq and i + 1 < n:
                    i += 1
                    value = words[i]
                if canonical == "--expression":
                    scripts.append(value)
                named = named or canonical != "--line-length"
            i += 1
            continue
        for j in range(1, len(w)):
            ch = w[j]
            if ch in "efl":
                value = w[j + 1 :]
                if not value and i + 1 < n:
                    i += 1
                    value = words[i]
                if ch == "e":
                    scripts.append(value)
                named = named or ch != "l"
                break
            if ch == "i":
                break  # -i[SUFFIX]
        i += 1
    if not named:
        operands = [w for w in words[1:] if not (w.startswith("-") and len(w) > 1)]
        if operands:
            scripts.append(operands[0])
    return scripts, sandbox


def _sed(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    _dangerous_options(prog, words, out)
    scripts, sandbox = _sed_scripts(words)
    if sandbox or not scripts:
        return
    reader = _SedScript("\n".join(scripts))
    reader.read()
    for what in reader.found:
        out.append(Finding(HIGH, f"{prog} script {what}"))
    if not reader.ok and not reader.found:
        out.append(Finding(HIGH, f"{prog} script could not be analyzed"))


# interpreters with code on the command line


@dataclass(frozen=True, slots=True)
class _Interpreter:
    code: str = ""
    """Short options whose value is code (``-c``, ``-e``)."""
    code_long: frozenset[str] = frozenset()
    load: str = ""
    """Short options that run or load code from elsewhere (``-r`` library, ``-f`` file, ``-M`` module:
    ``perl -M'strict;system…'`` is code text too)."""
    module: str = ""
    """Short options that run an importable module by name (python ``-m``): medium on their own, the
    way ``pytest`` or ``make`` run workspace code; high next to an information option."""
    load_long: frozenset[str] = frozenset()
    value: str = ""
    """Other short options with a value (the next word when not attached)."""
    attached: str = ""
    """Short options whose optional value is the rest of the word only."""
    value_long: frozenset[str] = frozenset()
    info: frozenset[str] = frozenset()
    """Words that only print information (``--version``)."""
    info_value: frozenset[str] = frozenset()
    """Long options that print information about their value (php ``--ri json``)."""
    whole: bool = False
    """No option grammar (deno, bun): anything but ``info`` words runs code."""


_INTERPRETERS: dict[str, _Interpreter] = {
    "python": _Interpreter(
        code="c",
        module="m",
        value="WX",
        value_long=frozenset({"--check-hash-based-pycs"}),
        info=frozenset({"-V", "-VV", "--version", "-h", "-?", "--help", "--help-env", "--help-xoptions", "--help-all"}),
    ),
    "node": _Interpreter(
        code="ep",
        code_long=frozenset({"--eval", "--print"}),
        load="r",
        load_long=frozenset(
            {"--require", "--import", "--loader", "--experimental-loader", "--env-file", "--env-file-if-exists"}
            | {"--run", "--test", "--watch", "--watch-path", "--experimental-test-module-mocks"}
        ),
        value="C",
        value_long=frozenset({"--conditions", "--input-type", "--title", "--inspect-port", "--disable-warning"}),
        info=frozenset({"-v", "--version", "-h", "--help", "--v8-options"}),
    ),
    "deno": _Interpreter(whole=True, info=frozenset({"-V", "--version", "-h", "--help"})),
    "bun": _Interpreter(whole=True, info=frozenset({"-v", "--version", "-h", "--help", "--revision"})),
    "perl": _Interpreter(
        code="eE",
        load="mMd",
        value="I",
        attached="l0ixCDV",
        info=frozenset({"-v", "-V", "--version", "-h", "--help"}),
    ),
    "ruby": _Interpreter(
        code="e",
        load="r",
        value="ICE",
        attached="FKTWx0",
        value_long=frozenset({"--encoding", "--external-encoding", "--internal-encoding"}),
        info=frozenset({"-v", "--version", "-h", "--help", "--copyright"}),
    ),
    "php": _Interpreter(
        code="rBRE",
        code_long=frozenset({"--run", "--process-begin", "--process-code", "--process-end"}),
        load="fFdczS",
        load_long=frozenset({"--file", "--process-file", "--define", "--php-ini", "--zend-extension"}),
        value="t",
        value_long=frozenset({"--docroot"}),
        info=frozenset({"-v", "--version", "-h", "--help", "-i", "--info", "-m", "--modules", "--ini"}),
        info_value=frozenset({"--rf", "--rc", "--re", "--rz", "--ri"}),
    ),
    "lua": _Interpreter(code="e", load="l", info=frozenset({"-v"})),
    "rscript": _Interpreter(code="e", info=frozenset({"--version", "--help"})),
    "r": _Interpreter(
        code="e", load="f", load_long=frozenset({"--file"}), info=frozenset({"--version", "-h", "--help"})
    ),
    "julia": _Interpreter(
        code="eE",
        code_long=frozenset({"--eval", "--print"}),
        load="LJ",
        load_long=frozenset({"--load", "--sysimage"}),
        value="Ctp",
        info=frozenset({"-v", "--version", "-h", "--help", "--help-hidden"}),
    ),
    "osascript": _Interpreter(code="e", value="l", info=frozenset()),
    "tclsh": _Interpreter(),
}
"""Interpreter family → option grammar. The family of a program name: ``python``/``python3``/
``python3.11``/``pypy3`` → python, ``nodejs`` → node, ``perl5.36`` → perl, ``luajit`` → lua,
``Rscript``, ``R``, ``tclsh8.6``/``wish`` → tclsh, ..."""

_INTERPRETER_FAMILY = re.compile(
    r"(?P<python>(?:python|pypy)[\d.]*)|(?P<node>node|nodejs)|(?P<deno>deno)|(?P<bun>bun|bunx)"
    r"|(?P<perl>perl[\d.]*)|(?P<ruby>ruby[\d.]*)|(?P<php>php[\d.]*(?:-cli)?)|(?P<lua>lua[\d.]*|luajit)"
    r"|(?P<rscript>Rscript)|(?P<r>R)|(?P<julia>julia)|(?P<osascript>osascript)|(?P<tclsh>(?:tclsh|wish)[\d.]*)"
)


def _interpreter(family: str) -> _Check:
    spec = _INTERPRETERS[family]

    def check(prog: str, words: Sequence[str], out: list[Finding]) -> None:
        n = len(words)
        info = False
        if spec.whole:
            if n > 1 and all(w in spec.info for w in words[1:]):
                return
            out.append(Finding(HIGH, f"{prog} runs code (any command but --version)"))
            return
        i = 1
        while i < n:
            w = words[i]
            if w == "--":
                i += 1
                break
            if w == "-":
                out.append(Finding(HIGH, f"{prog} runs code from its input (interactive or stdin)"))
                return
            if len(w) < 2 or w[0] != "-":
                break
            if w in spec.info:
                info = True
                i += 1
                continue
            if w.startswith("--"):
                name, eq, _ = w.partition("=")
                if name in spec.code_long:
                    out.append(Finding(HIGH, f"{prog} {name} runs code given on the command line"))
                    return
                if name in spec.load_long:
                    out.append(Finding(HIGH, f"{prog} {name} runs or loads code from a module or file"))
                    return
                if name in spec.info_value:
                    info = True
                if not eq and (name in spec.value_long or name in spec.info_value):
                    i += 1
                i += 1
                continue
            for j in range(1, len(w)):
                ch = w[j]
                if ch in spec.code:
                    out.append(Finding(HIGH, f"{prog} -{ch} runs code given on the command line"))
                    return
                if ch in spec.load:
                    out.append(Finding(HIGH, f"{prog} -{ch} runs or loads code from a module or file"))
                    return
                if ch in spec.module:
                    if info or any(word in spec.info for word in words[i + 1 :]):
                        out.append(
                            Finding(HIGH, f"{prog} -{ch} runs a module (an information option does not stop it)")
                        )
                    else:
                        out.append(Finding(MEDIUM, f"{prog} -{ch} runs a module"))
                    return
                if ch in spec.value:
                    if j == len(w) - 1:
                        i += 1
                    break
                if ch in spec.attached:
                    break
            i += 1
        if i < n:
            out.append(Finding(HIGH, f"{prog} runs a script file"))
        elif not info:
            out.append(Finding(HIGH, f"{prog} runs code from its input (interactive or stdin)"))

    return check


def _shell_script(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    """A shell with a script operand runs a file; without ``-c``/a script it reads commands from its
    input (interactive with a terminal). ``-c`` strings are analyzed by the intent (not here);
    stdin fed by a pipe or a here-document is judged by ``_fed_code``/``_heredoc_code``."""
    scan = scan_shell_options(words)
    if scan.dash_c:
        return
    if scan.operand is not None:
        if not _stdin_script(words[scan.operand]):
            out.append(Finding(HIGH, f"{prog} runs a script file"))
    elif not scan.info:
        out.append(Finding(HIGH, f"{prog} runs commands from its input (interactive or stdin)"))


# shell builtins that run or load code


def _source(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if len(words) > 1:
        out.append(Finding(HIGH, f"{prog} runs a script file in the shell"))


def _builtin_option(letters: str, finding: str) -> _Check:
    def check(prog: str, words: Sequence[str], out: list[Finding]) -> None:
        for w in words[1:]:
            if w == "--" or not w.startswith("-"):
                break
            if any(ch in letters for ch in w[1:]):
                out.append(Finding(HIGH, f"{prog} {finding}"))
                return

    return check


def _fc(prog: str, words: Sequence[str], out: list[Finding]) -> None:
    if not any(w.startswith("-") and "l" in w for w in words[1:]):
        out.append(Finding(HIGH, f"{prog} re-runs history commands or runs an editor"))


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
    "tee": _tee,
    **dict.fromkeys(_NETWORK, _network),
    **dict.fromkeys(("sort", "rg", "date", "file", "sdiff", "diff3"), _dangerous_options),
    "wget": _network_and_options,
    "tar": _tar,
    "uniq": _uniq,
    "zip": _zip,
    "sed": _sed,
    **dict.fromkeys(_AWKS, _awk),
    **dict.fromkeys(("ssh", "scp", "sftp"), _ssh_and_network),
    "source": _source,
    ".": _source,
    "enable": _builtin_option("f", "-f loads a shared object as a builtin"),
    "bind": _builtin_option("x", "-x binds a key to a shell command"),
    "complete": _builtin_option("CFW", "-C/-F/-W defines a command run at completion"),
    "compgen": _builtin_option("F", "-F calls a shell function"),
    "hash": _builtin_option("p", "-p binds a command name to another program"),
    "fc": _fc,
}


@functools.lru_cache(maxsize=1024)
def _check_for(prog: str) -> _Check | None:
    check = _CHECKS.get(prog)
    if check is not None:
        return check
    if prog.startswith("mkfs"):
        return _format
    m = _INTERPRETER_FAMILY.fullmatch(prog)
    if m is not None and m.lastgroup is not None:
        return _interpreter(m.lastgroup)
    return None


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
    scan = scan_shell_options(words)
    if scan.dash_s:
        return True
    if scan.operand is None:
        return not scan.dash_c
    word = words[scan.operand]
    return _substituted(word) if scan.dash_c else _stdin_script(word)


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
    if any("$" in body or "`" in body for body in bodies):
        # unless its delimiter is quoted, the outer shell expands the body before the inner one
        # parses it: a value can inject commands
        out.append(Finding(HIGH, f"{shells[0]} runs a here-document with expansions"))
    if depth < _MAX_HEREDOC_DEPTH:
        for body in bodies:
            out.extend(_assess(analyze_shell(body), depth + 1))


# --------------------------------------------------------------------------------------------


_GLOBBY = re.compile(r"[*?\[{]")
_ASSIGNING = frozenset({"env", "export", "declare", "typeset", "local", "readonly", "sudo"})
_ASSIGNMENT_WORD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\+?=")


def _command_findings(
    words: tuple[str, ...],
    out: list[Finding],
    credentials: dict[str, str],
    sql: dict[str, str],
    globs: dict[str, str],
    *,
    stdin_known: bool = False,
) -> None:
    """Findings of one command: its program's check, credentials/globs/SQL in its arguments."""
    prog = program_name(words)
    if prog in _SHELLS:
        if not stdin_known:
            _shell_script(prog, words, out)
    else:
        check = _check_for(prog)
        if check is not None:
            check(prog, words, out)
    if len(words) < 2:
        return
    if prog in _ASSIGNING:
        names = [m.group(1) for m in map(_ASSIGNMENT_WORD.match, words[1:]) if m is not None]
        if names:
            out.extend(assess_env(names))
    joined = "\n".join(words[1:])
    globbed = _GLOBBY.search(joined) is not None
    if globbed or _MAYBE_CREDENTIAL.search(joined) is not None:
        for word in words[1:]:
            label = credential_reason(word)
            if label is not None:
                credentials.pop(label, None)
                credentials[label] = prog
            elif globbed and has_glob(word):
                where = glob_reason(word)
                if where is not None:
                    globs.setdefault(where, prog)
    if _MAYBE_SQL.search(joined) is not None:
        for word in words[1:]:
            statement = _sql(word)
            if statement is not None:
                sql.pop(statement, None)
                sql[statement] = prog


def _assess(analysis: ShellAnalysis, depth: int, env: Mapping[str, str] | None = None) -> list[Finding]:
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
    globs: dict[str, str] = {}
    stdin_known = bool(analysis.flows) or any(op.startswith("<<") for op, _ in analysis.redirects)
    for words in analysis.commands:
        if words:
            _command_findings(words, out, credentials, sql, globs, stdin_known=stdin_known)
    if analysis.assignments:
        out.extend(assess_env(analysis.assignments))
    if analysis.variables:
        _variables(analysis, env, out)
    for op, target in analysis.redirects:
        if op.startswith("<<") and _MAYBE_SQL.search(target) is not None:
            for line in target.splitlines():
                statement = _sql(line)
                if statement is not None:
                    sql.setdefault(statement, "a here-document" if op != "<<<" else "a here-string")
    out.extend(Finding(HIGH, f"{label} in arguments of {prog}") for label, prog in credentials.items())
    out.extend(Finding(MEDIUM, f"{where} in arguments of {prog}") for where, prog in globs.items())
    out.extend(Finding(HIGH, f"SQL {statement} in {_where(prog)}") for statement, prog in sql.items())
    if analysis.redirects:
        _redirects(analysis, out)
        _heredoc_code(analysis, out, depth)
    if analysis.flows:
        _fed_code(analysis, out)
    return out


def _where(prog: str) -> str:
    return prog if prog.startswith("a ") else f"arguments of {prog}"


def assess_command(analysis: ShellAnalysis, env: Mapping[str, str] | None = None) -> list[Finding]:
    """Every finding for an analyzed command: structure, each command, redirects, data flows, and
    the variables it expands (checked against ``env``, the request's environment, when given)."""
    return _assess(analysis, 0, env)


# --------------------------------------------------------------------------------------------
# the request's environment

ENV_KEYS: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "PATH",
            "BASH_ENV",
            "ENV",
            "PROMPT_COMMAND",
            "SHELLOPTS",
            "BASHOPTS",
            "PS0",
            "PS1",
            "PS2",
            "PS3",
            "PS4",
            "IFS",
            "FPATH",
            "ZDOTDIR",
            "BASH_LOADABLES_PATH",
            "FCEDIT",
            "SHELL",
            "HOME",
            "XDG_CONFIG_HOME",
            "CLASSPATH",
            "MFLAGS",
            "VISUAL",
            "BROWSER",
            "RIPGREP_CONFIG_PATH",
            "GCONV_PATH",
            "PHPRC",
            "TCLLIBPATH",
            "GOFLAGS",
            "GOENV",
            "CC",
            "CXX",
            "CPP",
            "OPENSSL_CONF",
            "OPENSSL_ENGINES",
            "WGETRC",
            "CURL_HOME",
            "TAR_OPTIONS",
            "ZIPOPT",
            "UNZIP",
            "UNZIPOPT",
            "RSYNC_RSH",
            "RSYNC_CONNECT_PROG",
            "CVS_RSH",
            "KUBECONFIG",
            "AWS_CONFIG_FILE",
            "AWS_SHARED_CREDENTIALS_FILE",
            "DOCKER_CONFIG",
            "SSLKEYLOGFILE",
        ),
        "high",
    ),
    **dict.fromkeys(("CDPATH", "GLOBIGNORE"), "medium"),
}
"""Exact keys (compared upper-cased): ``high`` changes what programs run (or what they load, or
where their configuration comes from: ``HOME`` brings ``~/.gitconfig``, whose core.fsmonitor runs
on ``git status``); ``medium`` changes which files the shell finds."""
ENV_PREFIXES: tuple[str, ...] = (
    "LD_",
    "DYLD_",
    "BASH_FUNC_",
    "GIT_",
    "PYTHON",
    "PERL",
    "RUBY",
    "NODE_",
    "NPM_CONFIG_",
    "LESS",
    "JAVA_",
    "_JAVA_",
    "JDK_JAVA_",
    "MAKE",
    "LUA_",
    "RUSTC_",
    "RUSTFLAGS",
    "CARGO_",
    "GEM_",
    "BUNDLE_",
    "PHP_",
    "R_PROFILE",
    "R_ENVIRON",
    "R_LIBS",
    "JULIA_",
    "DENO_",
    "BUN_",
)
"""Key prefixes that are high (``LD_PRELOAD``, ``GIT_SSH_COMMAND``, ``PYTHONPATH``, ``NODE_OPTIONS``,
``LESSOPEN``, ``MAKEFLAGS``, exported functions ``BASH_FUNC_*``, ...)."""
ENV_SUFFIXES: tuple[str, ...] = ("EDITOR", "PAGER", "ASKPASS")
"""Key suffixes that are high: programs other tools run (``EDITOR``, ``GIT_PAGER``, ``SSH_ASKPASS``)."""
_PROXY_SUFFIX = "_PROXY"


def assess_env(keys: Iterable[str]) -> list[Finding]:
    """Findings for the environment keys of a request (keys are not secret: they appear in reasons;
    values never do). High: ``env KEY changes what programs run``; medium: ``CDPATH``, ``GLOBIGNORE``
    (which files the shell finds) and ``*_PROXY`` (where network traffic goes)."""
    out: list[Finding] = []
    for key in keys:
        upper = key.upper()
        level = ENV_KEYS.get(upper)
        if level == "high" or (level is None and (upper.startswith(ENV_PREFIXES) or upper.endswith(ENV_SUFFIXES))):
            out.append(Finding(HIGH, f"env {key} changes what programs run"))
        elif level == "medium":
            out.append(Finding(MEDIUM, f"env {key} changes which files the shell finds"))
        elif upper.endswith(_PROXY_SUFFIX):
            out.append(Finding(MEDIUM, f"env {key} routes network traffic"))
    return out


_VARIABLE_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


def _substitute(words: tuple[str, ...], values: Mapping[str, str]) -> tuple[str, ...]:
    """The words with ``$NAME``/``${NAME}`` replaced by the request's values and split again
    (approximately as the shell would: quotes kept in the source text are honoured)."""

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return values.get(name, m.group(0))

    out = [words[0]]
    for word in words[1:]:
        if "$" not in word:
            out.append(word)
            continue
        text = _VARIABLE_REFERENCE.sub(value, word)
        if text == word:
            out.append(word)
            continue
        try:
            out.extend(shlex.split(text))
        except ValueError:
            out.extend(text.split())
    return tuple(out)


def _variables(analysis: ShellAnalysis, env: Mapping[str, str] | None, out: list[Finding]) -> None:
    """Expanded variables: medium (an argument the gate cannot see); with the request's env, the
    values are checked as paths and substituted into the commands, which are checked again. Values
    never reach a reason: a finding that would quote one is reworded."""
    for name in analysis.variables:
        out.append(Finding(MEDIUM, f"argument expands ${name}"))
    if not env:
        return
    present = {name: env[name] for name in analysis.variables if name in env}
    if not present:
        return
    for name, value in present.items():
        if credential_reason(value) is not None:
            out.append(Finding(HIGH, f"argument ${name} names a credential path (request env)"))
        elif glob_reason(value) is not None:
            out.append(Finding(MEDIUM, f"argument ${name} is a glob outside the workspace (request env)"))
    secrets = [v for v in present.values() if v]
    for words in analysis.commands:
        if len(words) < 2 or not any("$" in w for w in words[1:]):
            continue
        expanded = _substitute(words, present)
        if expanded == words:
            continue
        found: list[Finding] = []
        credentials: dict[str, str] = {}
        _command_findings(expanded, found, credentials, {}, {})
        found.extend(Finding(HIGH, f"{label} in arguments of {prog}") for label, prog in credentials.items())
        names = ", ".join(f"${n}" for n in present if f"${n}" in " ".join(words) or f"${{{n}}}" in " ".join(words))
        for finding in found:
            quoted = any(secret in finding.reason for secret in secrets)
            out.append(
                Finding(finding.level, f"{program_name(words)} with {names} from the request env")
                if quoted
                else finding
            )
