"""End to end: commands the default policy allowlists, spelled so that they run programs, write
files, evaluate code or read credentials. None of them may be allowed without asking."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.domain.requests import parse_request
from orchestrator.gate.config import default_safety_config
from orchestrator.gate.gate import Gate

GATE = Gate()


def decision(raw: dict[str, Any]) -> str:
    return str(GATE.evaluate(parse_request(raw)).decision.decision.value)


def shell(command: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"tool": "shell_command", "command": command, "env": env or {}}


def argv(words: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    return {"tool": "shell_exec", "argv": words, "env": env or {}}


def test_the_allowlist_still_allows_plain_commands() -> None:
    for command in ("ls -la", "cat README.md", "git status", "git -c color.ui=never log -1", "python3 --version"):
        assert decision(shell(command)) == "allow", command
    assert decision(shell("sort -u names.txt")) == "allow"
    assert decision(shell("echo $HOME")) == "allow"  # a plain expansion is medium: still within the cap


OPTIONS_THAT_RUN_OR_WRITE = [
    # git: configuration that runs programs, options that write files or run drivers
    "git -c core.fsmonitor='touch /tmp/pwned' status",
    "git -c diff.external=/tmp/x diff",
    "git -c core.pager='sh -c id' log",
    "git -c alias.st='!id' status",
    "git --config-env core.pager=PAGER log",
    "git --config-env=core.fsmonitor=X status",
    "git --exec-path=/tmp/evil status",
    "git --git-dir=/tmp/evil/.git status",
    "git -C /tmp/evil status",
    "git diff --output=/tmp/x",
    "git log --output /tmp/x",
    "git show --ext-diff HEAD",
    "git diff --ext-diff",
    # sort / uniq write files, sort runs a compressor
    "sort -o /tmp/x names.txt",
    "sort --output=/tmp/x names.txt",
    "sort -uo /tmp/x names.txt",
    "sort --out /tmp/x names.txt",
    "sort --compress-program=sh -S 1 big.txt",
    "uniq names.txt /tmp/out",
    "uniq -c names.txt /tmp/out",
    # rg runs a preprocessor
    "rg --pre ./x.sh pattern",
    "rg --pre=sh pattern .",
    "rg --hostname-bin=/tmp/x pattern",
    # python3 --version does not stop code from running
    "python3 -c 'import os' --version",
    "python3 --version -c 'import os'",
    "python3 -Ic 'import os' --version",
    "python3 -m http.server --version",
    "python3 evil.py --version",
    "python3 - --version",
]


@pytest.mark.parametrize("command", OPTIONS_THAT_RUN_OR_WRITE)
def test_options_that_run_programs_or_write_files_ask(command: str) -> None:
    assert decision(shell(command)) != "allow", command
    assert decision(argv(shlex.split(command))) != "allow", command


EXPANSIONS_THAT_EVALUATE_CODE = [
    "echo ${X@P}",
    'echo "${X@P}"',
    "cat ${F@E}",
    "echo $((X))",
    "echo $((X + 1))",
    "echo $[X]",
    "echo ${a[X]}",
    'echo "${a[$i]}"',
    "echo ${!X}",
    "echo ${S:X}",
    "echo ${S:1:N}",
    "ls $((N))x",
]


@pytest.mark.parametrize("command", EXPANSIONS_THAT_EVALUATE_CODE)
def test_expansions_that_evaluate_code_ask(command: str) -> None:
    assert decision(shell(command)) != "allow", command


BUILTINS_AND_KEYWORDS = [
    ("coproc rm -rf /", "deny"),
    ("coproc { rm -rf /; }", "deny"),
    ("coproc (rm -rf /)", "deny"),
    ("trap 'rm -rf /' EXIT", "deny"),
    ("trap 'sudo id' INT", "deny"),
    ("time -p rm -rf /", "deny"),
    ("command -p rm -rf /", "deny"),
    ("builtin eval 'rm -rf /'", "deny"),
    ("mapfile -C 'rm -rf /' -c 1 arr < names.txt", "deny"),
    ("compgen -C 'sudo id' x", "deny"),
    ("compgen -W '$(sudo id)' x", "deny"),
    ("alias ls='rm -rf /'", "deny"),
    ("export 'a[$(sudo id)]=1'", "deny"),
    ("source ./x.sh", "ask"),
    (". ./x.sh", "ask"),
    ("enable -f ./x.so x", "ask"),
    ("let x=X", "ask"),
    ("declare -i n=X", "ask"),
    ("read 'a[$(id)]' < names.txt", "ask"),
    ("printf -v 'a[$(id)]' x", "ask"),
]


@pytest.mark.parametrize(("command", "expected"), BUILTINS_AND_KEYWORDS)
def test_builtins_that_run_commands(command: str, expected: str) -> None:
    assert decision(shell(command)) == expected, command


GLOBBED_CREDENTIALS = [
    "cat /etc/shad*",
    "cat /etc/shado[w]",
    "cat /etc/sh?dow",
    "cat /e??/shadow",
    "cat ~/.ssh/id_*",
    "cat .en?",
    "cat .env*",
    "head ./.e[n]v",
    "grep -r token .e*",
    "tail /proc/*/environ",
    "cat *.pe?",
    "cat ~/.aws/cred*",
    "cat /etc/{shadow,hosts}",
    "cat id_{rsa,dsa}",
    "cat /etc//shadow",
    "cat /etc/./shadow",
    "cat /etc/ssl/../shadow",
    "wc -c /root/.ss?/id_rsa",
]


@pytest.mark.parametrize("command", GLOBBED_CREDENTIALS)
def test_globbed_and_respelled_credential_paths_ask(command: str) -> None:
    assert decision(shell(command)) != "allow", command


ENV_KEYS = [
    "PATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "LD_AUDIT",
    "BASH_ENV",
    "ENV",
    "PROMPT_COMMAND",
    "SHELLOPTS",
    "BASHOPTS",
    "PS4",
    "IFS",
    "GIT_SSH_COMMAND",
    "GIT_EXEC_PATH",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_GLOBAL",
    "GIT_DIR",
    "GIT_PAGER",
    "PYTHONPATH",
    "PYTHONSTARTUP",
    "PYTHONHOME",
    "PERL5LIB",
    "PERL5OPT",
    "RUBYOPT",
    "NODE_OPTIONS",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "MAKEFLAGS",
    "LESSOPEN",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "SSH_ASKPASS",
    "HOME",
    "XDG_CONFIG_HOME",
    "RIPGREP_CONFIG_PATH",
]


@pytest.mark.parametrize("key", ENV_KEYS)
def test_dangerous_env_keys_ask(key: str) -> None:
    assert decision(shell("git status", {key: "/tmp/x"})) != "allow", key
    assert decision(argv(["ls"], {key: "/tmp/x"})) != "allow", key


def test_env_values_behind_expansions_are_checked() -> None:
    assert decision(shell("cat $F", {"F": "/root/.ssh/id_rsa"})) != "allow"
    assert decision(shell('cat "$F"', {"F": "/etc/shad*"})) != "allow"
    assert decision(shell("sort $O names.txt", {"O": "-o /tmp/x"})) != "allow"
    assert decision(shell("git diff $G", {"G": "--output=/tmp/x"})) != "allow"
    assert decision(shell("cat $F", {"F": "README.md"})) == "allow"
    d = GATE.evaluate(parse_request(shell("cat $F", {"F": "/root/.ssh/id_rsa"}))).decision
    assert "/root/.ssh/id_rsa" not in d.reason and "id_rsa" not in d.risk.reason


# --------------------------------------------------------------------------------------------
# property: any allowlisted program plus any poison is never allowed

_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.", min_size=1, max_size=8)
_EXPANSIONS = ["${X@P}", "${X@Q}", "$((X))", "$[X]", "${a[X]}", "${!X}", "${S:X}", "${a[$i]}", "$((a[x]))"]
_GLOBS = ["/etc/shad*", "/etc/shado[w]", "~/.ssh/id_*", ".en?", "/proc/*/environ", "*.pe?", "/etc/{shadow,x}"]
_GIT_GLOBAL = [
    ["-c", "core.fsmonitor=x"],
    ["-c", "diff.external=x"],
    ["-c", "core.pager=x"],
    ["-c", "alias.x=!x"],
    ["--config-env", "core.pager=X"],
    ["--config-env=core.sshCommand=X"],
    ["--exec-path=/tmp"],
    ["--git-dir=/tmp/x"],
    ["-C", "/tmp/x"],
]
_GIT_SUB = {
    "status": [],
    "diff": [["--output=x"], ["--output", "x"], ["--ext-diff"]],
    "log": [["--output=x"], ["--ext-diff", "-p"]],
    "show": [["--output=x"], ["--ext-diff"]],
}
_OPTIONS: dict[str, list[list[str]]] = {
    "sort": [
        ["-o", "x"],
        ["--output=x"],
        ["-uo", "x"],
        ["--out", "x"],
        ["--compress-program=sh"],
        ["--compress-p", "x"],
    ],
    "uniq": [["in", "out"], ["-c", "in", "out"]],
    "rg": [["--pre", "x"], ["--pre=x"], ["--hostname-bin=x"]],
    "python3": [["-c", "x"], ["-Ic", "x"], ["-m", "x"], ["x.py"], ["-"], ["-Wignore", "-c", "x"]],
}


@st.composite
def poisoned(draw: st.DrawFn, entry: str) -> tuple[str, list[str], list[str]]:
    """(kind, argv words, raw shell words) for an allowlist entry plus one poison."""
    words = shlex.split(entry)
    program = words[0]
    extra = draw(st.lists(_WORDS, max_size=3))
    kinds = ["expansion", "glob"]
    if program in _OPTIONS or program == "git":
        kinds.append("option")
    kind = draw(st.sampled_from(kinds))
    if kind == "option" and program == "git":
        sub = words[1] if len(words) > 1 else draw(st.sampled_from(sorted(_GIT_SUB)))
        choices = [("global", g) for g in _GIT_GLOBAL] + [("sub", s) for s in _GIT_SUB.get(sub, [])]
        where, poison = draw(st.sampled_from(choices))
        if where == "global":
            return kind, ["git", *poison, sub, *extra], []
        return kind, ["git", sub, *extra, *poison], []
    if kind == "option":
        poison = draw(st.sampled_from(_OPTIONS[program]))
        cut = draw(st.integers(0, len(extra)))
        rest = words[1:]
        if program == "python3":
            return kind, [program, *rest, *poison], []
        return kind, [program, *rest, *extra[:cut], *poison, *extra[cut:]], []
    if kind == "glob":
        return kind, [*words, *extra, draw(st.sampled_from(_GLOBS))], []
    return kind, [*words, *extra], [draw(st.sampled_from(_EXPANSIONS))]


def _entries() -> list[str]:
    return list(default_safety_config().allowlist)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_allowlisted_programs_with_a_poison_are_never_allowed(data: st.DataObject) -> None:
    entry = data.draw(st.sampled_from(_entries()))
    kind, words, raw = data.draw(poisoned(entry))
    command = " ".join([shlex.join(words), *raw])
    assert decision(shell(command)) != "allow", command
    if kind != "expansion":  # without a shell there is no expansion
        assert decision(argv(words)) != "allow", words


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_allowlisted_programs_with_a_dangerous_env_key_are_never_allowed(data: st.DataObject) -> None:
    words = shlex.split(data.draw(st.sampled_from(_entries())))
    key = data.draw(
        st.sampled_from(ENV_KEYS) | st.sampled_from(["LD_", "GIT_", "PYTHON", "BASH_FUNC_x"]).map(lambda p: p + "X")
    )
    env = {key: data.draw(_WORDS)}
    assert decision(shell(shlex.join(words), env)) != "allow", (words, key)
    assert decision(argv(words, env)) != "allow", (words, key)


def test_every_default_allowlist_entry_has_poisons() -> None:
    """The property covers the allowlist as shipped (an entry added later gets the generic poisons)."""
    programs = {shlex.split(entry)[0] for entry in _entries()}
    assert programs >= {"ls", "cat", "grep", "rg", "sort", "uniq", "git", "python3"}


def test_control_characters_are_never_read_as_word_separators() -> None:
    """tree-sitter splits words on \\r where bash does not: such a string is complex and high risk."""
    for command in ("ls\rrm -rf x", "echo hi\x0bthere", "cat a\x1b[2K"):
        result = GATE.evaluate(parse_request({"tool": "shell_command", "command": command}))
        assert result.decision.decision.value != "allow", command
        assert result.sanitized.intent is not None and result.sanitized.intent.is_complex
        assert result.sanitized.risk.risk_level in ("high", "critical")
    argv = GATE.evaluate(parse_request({"tool": "shell_exec", "argv": ["ls", "a\rb"]}))
    assert argv.decision.decision.value != "allow"
