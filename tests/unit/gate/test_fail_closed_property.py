"""The gate's invariant, in every mode: a request is allowed without approval only if the gate
established its complete intent. Tested in mode allow (only the denylist stands between a request
and a run) over generated chains of wrappers from the program table, nested past the depth limit,
given as a shell string, an argv, or the content of a script file a CI step runs."""

from __future__ import annotations

import shlex
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.requests import ScriptFile, parse_request
from orchestrator.gate.config import SafetyConfig, default_safety_config
from orchestrator.gate.intent import MAX_WRAPPER_DEPTH
from orchestrator.gate.policy import Policy
from orchestrator.gate.sanitize import MAX_ANALYZED_SCRIPT_BYTES, sanitize

_CONFIG = default_safety_config().model_dump()
_CONFIG["mode"] = "allow"
MODE_ALLOW = Policy(SafetyConfig.model_validate(_CONFIG))

DENIED = [
    "rm -rf build",
    "rm --recursive --force build",
    "/bin/rm -fr build",
    "sudo id",
    "doas id",
    "shutdown now",
    "mkfs.ext4 /dev/sdz1",
    "chmod 777 f",
]
BLIND = [
    "python3 -c 'import os'",
    "perl -e 'print 1'",
    "node -e 1",
    "bash",
    "awk 'BEGIN{system(\"id\")}'",
    "sed 'e id' f",
    'eval "$X"',
    "$CMD x",
    "find . -exec {} \\;",
    "cat <<EOF; ls\nx\nEOF",
    "timeout --frobnicate 5 ls",
    "gdb -batch -ex 'shell id' ./a",
]
BENIGN = ["ls -la", "git status", "echo hi", "make test", "cat README.md"]

PREFIXES = [
    "nice", "nice -n 5", "nice -10", "timeout 9", "timeout -s KILL -k 2 5", "env", "env -i", "env A=1",
    "env -u HOME", "setpriv --reuid=1000", "setpriv --nnp", "prlimit --nofile=64", "setarch x86_64",
    "setarch x86_64 -R", "linux64", "linux32", "i386", "chrt -f 10", "taskset -c 0", "ionice -c3",
    "stdbuf -oL", "nohup", "time -p", "setsid -f", "chroot /", "unshare -r", "nsenter -t 1 -m", "gosu root",
    "strace -f", "ltrace -f", "valgrind --leak-check=full", "eatmydata", "faketime 2020-01-01", "fakeroot",
    "proot -0", "xargs", "xargs -0 -n 1", "busybox", "toybox", "/lib64/ld-linux-x86-64.so.2", "ld.so",
    "command", "exec", "exec -a name", "flock /tmp/l", "numactl -l", "runuser -u x --",
    "watch -x", "systemd-run --scope", "xvfb-run -a", "dbus-run-session --", "sshpass -p x",
]  # fmt: skip
_q = shlex.quote
STRINGS: list[Callable[[str], str]] = [
    lambda c: f"bash -c {_q(c)}",
    lambda c: f"sh -lc {_q(c)}",
    lambda c: f"capsh --caps=cap_chown+ep -- -c {_q(c)}",
    lambda c: f"su -c {_q(c)}",
    lambda c: f"su - root -c {_q(c)}",
    lambda c: f"eval {_q(c)}",
    lambda c: f"env -S {_q(c)}",
    lambda c: f"script -qc {_q(c)} /dev/null",
    lambda c: f"flock /tmp/l -c {_q(c)}",
    lambda c: f"watch {_q(c)}",
    lambda c: f"sg staff -c {_q(c)}",
    lambda c: f"tar --to-command={_q(c)} -xf a.tar",
    lambda c: f"git -c core.pager={_q(c)} log",
    lambda c: f"ssh -o ProxyCommand={_q(c)} host",
    lambda c: f"parallel ::: {_q(c)}",
    lambda c: f"trap {_q(c)} EXIT",
    lambda c: f"strace -o {_q('|' + c)} true",
    lambda c: f"bash <<'EOF'\n{c}\nEOF",
    lambda c: f"sh <<< {_q(c)}",
]


@st.composite
def chains(draw: st.DrawFn, inners: list[str]) -> str:
    """An inner command in 0 to MAX_WRAPPER_DEPTH + 6 wrappers (at most 5 that quote it: each doubles
    its quoting, and a request is limited to 256 KiB)."""
    command = draw(st.sampled_from(inners))
    quoting = 0
    for _ in range(draw(st.integers(0, MAX_WRAPPER_DEPTH + 6))):
        if quoting >= 5 or draw(st.booleans()):
            command = f"{draw(st.sampled_from(PREFIXES))} {command}"
        else:
            quoting += 1
            command = draw(st.sampled_from(STRINGS))(command)
    return command


def _decide(command: str) -> tuple[str, str, tuple[str, ...]]:
    sanitized, analysis = sanitize(parse_request({"tool": "shell_command", "command": command}))
    decision = MODE_ALLOW.decide(sanitized, analysis, profile="workspace-write")
    assert analysis is not None
    return decision.decision.value, decision.reason, analysis.unseen


@settings(max_examples=1500, deadline=None)
@given(command=chains(DENIED))
def test_a_denylisted_command_behind_any_wrappers_is_denied(command: str) -> None:
    decision, reason, _ = _decide(command)
    assert decision == "deny", (command, reason)


@settings(max_examples=1500, deadline=None)
@given(command=chains(BLIND))
def test_what_the_gate_cannot_see_is_never_allowed(command: str) -> None:
    decision, reason, unseen = _decide(command)
    assert decision != "allow", (command, reason)
    assert decision == "deny" or unseen, (command, reason)


@settings(max_examples=800, deadline=None)
@given(command=chains(BENIGN))
def test_an_allow_means_complete_intent(command: str) -> None:
    decision, reason, unseen = _decide(command)
    if decision == "allow":
        assert not unseen, (command, reason)
    else:
        assert decision == "deny" or unseen or "opaque" in reason, (command, reason)


def test_argv_requests_hold_the_same_invariant() -> None:
    for argv in (
        ["setpriv", "--reuid=1000", "rm", "-rf", "build"],
        ["prlimit", "--nofile=64", "rm", "-rf", "build"],
        ["/lib64/ld-linux-x86-64.so.2", "/bin/rm", "-rf", "build"],
        ["nice"] * 12 + ["rm", "-rf", "build"],
        ["timeout", "9"] * 10 + ["sudo", "id"],
    ):
        sanitized, analysis = sanitize(parse_request({"tool": "shell_exec", "argv": argv}))
        assert MODE_ALLOW.decide(sanitized, analysis, profile="p").decision.value == "deny", argv
    sanitized, analysis = sanitize(parse_request({"tool": "shell_exec", "argv": ["python3", "-c", "x"]}))
    assert MODE_ALLOW.decide(sanitized, analysis, profile="p").decision.value == "ask"


# A CI step is a script file the runner wrote (``bash --noprofile --norc -e -o pipefail …/_temp/<id>.sh``, the
# format of actions/runner's ScriptHandlerHelpers.cs): its content is decided on as a ``bash -c`` string is, so
# the same invariant holds for whatever the script holds, and for content the gate cannot read.
SCRIPT = "/__w/_temp/0b5e1f52-step.sh"
STEP = ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", SCRIPT]


def _decide_script(content: bytes | str, argv: list[str] = STEP) -> tuple[str, str, tuple[str, ...]]:
    raw = {"tool": "shell_exec", "argv": argv, "script": ScriptFile.of(SCRIPT, content).model_dump()}
    sanitized, analysis = sanitize(parse_request(raw))
    decision = MODE_ALLOW.decide(sanitized, analysis, profile="ci")
    assert analysis is not None
    return decision.decision.value, decision.reason, analysis.unseen


def _lines(inners: list[str]) -> st.SearchStrategy[str]:
    """A script of a few such chains, one a line, one of them drawn from ``inners``."""
    return st.builds(
        lambda before, chain, after: "\n".join([*before, chain, *after]) + "\n",
        st.lists(chains(BENIGN), max_size=2),
        chains(inners),
        st.lists(chains(BENIGN), max_size=2),
    )


@settings(max_examples=400, deadline=None)
@given(script=_lines(DENIED))
def test_a_denylisted_command_anywhere_in_a_step_s_script_is_denied(script: str) -> None:
    decision, reason, _ = _decide_script(script)
    assert decision == "deny", (script, reason)


@settings(max_examples=400, deadline=None)
@given(script=_lines(BLIND))
def test_what_the_gate_cannot_see_in_a_script_is_never_allowed(script: str) -> None:
    decision, reason, unseen = _decide_script(script)
    assert decision != "allow", (script, reason)
    assert decision == "deny" or unseen, (script, reason)


@settings(max_examples=300, deadline=None)
@given(script=_lines(BENIGN))
def test_a_script_is_allowed_only_with_its_complete_intent(script: str) -> None:
    decision, reason, unseen = _decide_script(script)
    if decision == "allow":
        assert not unseen, (script, reason)
    else:
        assert decision == "deny" or unseen or "opaque" in reason, (script, reason)


@settings(max_examples=300, deadline=None)
@given(content=st.binary(max_size=200))
def test_content_the_gate_cannot_read_is_never_allowed(content: bytes) -> None:
    """Any bytes: what is not text without NUL is unseen (binary, not UTF-8), never allowed; text is decided on."""
    decision, reason, unseen = _decide_script(content)
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or "\x00" in text:
        assert decision == "ask" and any("cannot be analyzed" in u for u in unseen), (content, reason)
    if decision == "allow":
        assert not unseen, (content, reason)


@settings(max_examples=100, deadline=None)
@given(script=_lines(BENIGN), interpreter=st.sampled_from(["python3", "perl", "node", "ruby"]))
def test_a_script_for_another_interpreter_is_never_allowed(script: str, interpreter: str) -> None:
    decision, reason, unseen = _decide_script(script, [interpreter, SCRIPT])
    assert decision == "ask", (script, reason)
    assert f"the script {SCRIPT} is code for '{interpreter}', which the gate does not read" in unseen


def test_a_script_longer_than_the_gate_reads_is_asked_and_one_nobody_runs_too() -> None:
    decision, _, unseen = _decide_script("true\n" * (MAX_ANALYZED_SCRIPT_BYTES // 5 + 1))
    assert decision == "ask"
    assert unseen == (
        f"the script {SCRIPT} cannot be analyzed: it is {(MAX_ANALYZED_SCRIPT_BYTES // 5 + 1) * 5} bytes, more than"
        f" the gate reads ({MAX_ANALYZED_SCRIPT_BYTES})",
    )
    decision, _, unseen = _decide_script("true\n", ["make", "-f", SCRIPT])
    assert decision == "ask"
    assert unseen == (f"the script {SCRIPT} is not what a shell of the command runs: what reads it cannot be told",)
