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
  (``Opt.risk`` in the program table, and the checks: ``git -c``, ``git diff --output``, ``sort -o``,
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

Where the knowledge lives: what a program always is (``sudo`` escalates privileges, ``curl`` uses the
network, ``mkfs.*`` formats) and what each option does (``sort -o`` writes, ``tar --to-command`` runs)
are columns of the program table (``gate.programs``); checks that read more than options (``rm``'s
targets, ``git``'s subcommands, awk programs, sed scripts, interpreters) are in ``gate.checks``. What
the gate cannot see at all (``ShellAnalysis.unseen``) is high.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence

from orchestrator.gate.analysis import ShellAnalysis
from orchestrator.gate.checks import CHECKS, interpreter, shell_script
from orchestrator.gate.checks.targets import device, system_path
from orchestrator.gate.commands import program_name, scan_shell_options
from orchestrator.gate.env_keys import ENV_KEYS, ENV_PREFIXES, ENV_SUFFIXES, assess_env
from orchestrator.gate.expansions import EVAL_REASON
from orchestrator.gate.findings import CRITICAL, HIGH, MEDIUM, Finding, combine
from orchestrator.gate.intent import analyze_shell, is_shell
from orchestrator.gate.paths import credential_reason, glob_reason, has_glob
from orchestrator.gate.programs import SHELL, Family, Program, Runs, lookup, scan
from orchestrator.gate.scripts import reads_code_from_input, substituted

__all__ = [
    "ENV_KEYS",
    "ENV_PREFIXES",
    "ENV_SUFFIXES",
    "Finding",
    "assess_command",
    "assess_env",
    "combine",
]

_MAX_HEREDOC_DEPTH = 2


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


def _unseen_finding(reason: str) -> str:
    """What the gate cannot see, as a risk reason (the same words as the structural finding)."""
    finding = _structural(reason)
    return finding.reason if finding is not None and finding.level >= HIGH else f"the gate cannot see: {reason}"


def _redirects(analysis: ShellAnalysis, out: list[Finding]) -> None:
    for op, target in analysis.redirects:
        if op.startswith("<<"):
            continue
        writes = ">" in op and not (op.endswith("&") and (target.isdigit() or target == "-"))
        if writes:
            if device(target):
                out.append(Finding(HIGH, f"redirect writes to device {target}"))
                continue
            system = system_path(target)
            if system is not None and system != "/dev":
                out.append(Finding(HIGH, f"redirect writes into {system}"))
                continue
        if target.startswith(("/dev/tcp/", "/dev/udp/")):
            out.append(Finding(MEDIUM, f"redirect opens a network connection ({target[:8]})"))
        credential = credential_reason(target)
        if credential is not None:
            out.append(Finding(HIGH, f"{credential} in a redirect"))


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
# code fed to shells and interpreters

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


def _runs_input(words: Sequence[str]) -> str | None:
    """The program name when ``words`` executes the data it is fed as code, else None."""
    if not words:
        return None
    if substituted(words[0]):
        return "a computed command"
    prog = program_name(words)
    reader = reads_code_from_input(words)
    if reader is not None:
        return reader
    program = lookup(prog)
    if program is SHELL:
        invocation = scan_shell_options(words)
        operand = invocation.operand
        return prog if invocation.dash_c and operand is not None and substituted(words[operand]) else None
    if program is not None and program.script_operand:
        code = [h.value for h in scan(program, words).hits if h.opt is not None and h.opt.runs is Runs.CODE]
        return prog if any(value is not None and substituted(value) for value in code) else None
    if prog == "eval":
        return prog if any(substituted(w) for w in words[1:]) else None
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
    shells = [program_name(w) for w in analysis.commands if is_shell(w) and reads_code_from_input(w) is not None]
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
# each command


def _program_findings(prog: str, words: tuple[str, ...], out: list[Finding]) -> None:
    """What the program table says of this program: what it always is, what its options do, and
    its check, if it has one."""
    program = lookup(prog)
    if program is None:
        return
    for level, what in program.findings:
        out.append(Finding(level, f"{prog} {what}"))
    if _has_risky_options(program):
        found = scan(program, words)
        sub = words[found.positionals[0]] if program.subcommands is not None and found.positionals else None
        sub_at = found.positionals[0] if sub is not None else len(words)
        for hit in found.hits:
            opt = hit.opt
            if opt is None or opt.risk is None:
                continue
            level, what = opt.risk
            shown = f"{prog} {sub}" if sub is not None and hit.pos > sub_at else prog
            out.append(Finding(level, f"{shown} {opt.means[0]} {what}"))
    if program.check:
        CHECKS[program.check](prog, words, out)
    elif program.family is Family.INTERPRETER:
        interpreter(prog, words, out)


@functools.cache
def _has_risky_options(program: Program) -> bool:
    subs = program.subcommands.values() if program.subcommands is not None else ()
    return any(o.risk is not None for p in (program, *subs) for o in p.options)


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
    script_read: bool = False,
) -> None:
    """Findings of one command: its program's check, credentials/globs/SQL in its arguments. ``script_read``:
    a shell whose script file the gate read (its commands have their own findings)."""
    prog = program_name(words)
    if is_shell(words):
        if not stdin_known and not script_read:
            shell_script(prog, words, out)
    else:
        _program_findings(prog, words, out)
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
    for reason in analysis.unseen:
        out.append(Finding(HIGH, _unseen_finding(reason)))
    for name in analysis.self_spawning:
        out.append(Finding(CRITICAL, f"fork bomb (function '{name}' spawns itself)"))
    credentials: dict[str, str] = {}
    sql: dict[str, str] = {}
    globs: dict[str, str] = {}
    stdin_known = bool(analysis.flows) or any(op.startswith("<<") for op, _ in analysis.redirects)
    readers = frozenset(analysis.script_readers)
    for index, words in enumerate(analysis.commands):
        if words:
            _command_findings(
                words, out, credentials, sql, globs, stdin_known=stdin_known, script_read=index in readers
            )
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
# variables the request's environment may fill

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
