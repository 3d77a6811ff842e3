"""Bad input is refused at the edge with INPUT.INVALID (exit 2) naming the field, never its value, and
never reaches INTERNAL: text that is not UTF-8 (lone surrogates: what Python makes of undecodable argv
bytes, or what a \\udXXX escape in JSON gives), NUL where the kernel cannot take it, sizes past what
execve takes. Through the library (every tool alias) and through the real `sandboxctl` process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.requests import (
    MAX_ARG_BYTES,
    MAX_EXEC_BYTES,
    MAX_PATH_BYTES,
    MAX_STDIN_CHARS,
    parse_request,
)
from orchestrator.evidence import EvidenceWriter
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.factory import assemble

BAD = "\udcff"  # the byte 0xff of a command line, as Python hands it over
SECRET = "sk-live-0123456789abcdef"

# one request per tool alias, and the field of it that carries the bad text
TOOL_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"tool": "shell_exec", "argv": ["echo", BAD]}, "argv.1"),
    ({"tool": "shell", "command": ["echo", BAD]}, "command.1"),
    ({"tool": "skill_exec", "skill": "lint", "argv": [BAD]}, "argv.0"),
    ({"tool": "skill_exec", "skill": BAD, "argv": ["ruff"]}, "skill"),
    ({"tool": "shell_command", "command": f"echo {BAD}"}, "command"),
    ({"tool": "exec_command", "cmd": f"echo {BAD}"}, "cmd"),
    ({"tool": "write_stdin", "session_id": "s", "chars": BAD}, "chars"),
    ({"tool": "write_stdin", "session_id": BAD, "chars": "x"}, "session_id"),
    ({"tool": "file_write", "path": "a.txt", "content": BAD}, "content"),
    ({"tool": "file_write", "path": BAD, "content": "x"}, "path"),
    ({"tool": "apply_patch", "patch": BAD}, "patch"),
]
BASES: list[dict[str, Any]] = [
    {"tool": "shell_exec", "argv": ["ls"]},
    {"tool": "shell", "command": ["ls"]},
    {"tool": "shell_command", "command": "ls"},
    {"tool": "exec_command", "cmd": "ls"},
    {"tool": "skill_exec", "skill": "s", "argv": ["ls"]},
    {"tool": "write_stdin", "session_id": "s", "chars": ""},
    {"tool": "file_write", "path": "a", "content": ""},
    {"tool": "apply_patch", "patch": "p"},
]
# fields every tool shares
COMMON_FIELDS: list[tuple[dict[str, Any], str]] = [
    ({"cwd": f"src/{BAD}"}, "cwd"),
    ({"env": {"TOKEN": SECRET + BAD}}, "env"),
    ({"env": {f"T{BAD}": SECRET}}, "env"),
    ({"tenant": BAD}, "tenant"),
    ({"subject": BAD}, "subject"),
    ({"profile": BAD}, "profile"),
    ({"call_id": BAD}, "call_id"),
    ({"sandbox_permissions": {"extra_mounts": [{"source": f"/x{BAD}", "target": "/y"}]}}, "extra_mounts.0.source"),
]


def _refused(raw: Any) -> InputInvalid:
    with pytest.raises(InputInvalid) as err:
        parse_request(raw)
    return err.value


@pytest.mark.parametrize(("raw", "field"), TOOL_FIELDS, ids=lambda x: x if isinstance(x, str) else x["tool"])
def test_text_that_is_not_utf8_is_refused_in_every_tool(raw: dict[str, Any], field: str) -> None:
    err = _refused(raw)
    assert err.code == "INPUT.INVALID" and err.exit_code == 2
    assert err.message.startswith(f"{field}: ") and "UTF-8" in err.message
    assert BAD not in err.message
    json.dumps(err.to_dict()).encode()  # the error itself can always be written


@pytest.mark.parametrize("base", BASES, ids=lambda b: b["tool"])
@pytest.mark.parametrize(("extra", "field"), COMMON_FIELDS, ids=[f for _, f in COMMON_FIELDS])
def test_shared_fields_are_checked_for_every_tool(base: dict[str, Any], extra: dict[str, Any], field: str) -> None:
    err = _refused({**base, **extra})
    assert field in err.message and "UTF-8" in err.message
    assert SECRET not in err.message and BAD not in err.message


def test_an_env_value_is_named_by_its_key_and_a_bad_key_by_its_position() -> None:
    assert "env value of TOKEN" in _refused({**BASES[0], "env": {"A": "1", "TOKEN": BAD}}).message
    assert "env key #2" in _refused({**BASES[0], "env": {"A": "1", BAD: "2"}}).message
    # a value of the wrong type is named by position when its key is malformed (it may be 'NAME=secret')
    message = _refused({**BASES[0], "env": {"A": "1", f"TOKEN={SECRET}": 5}}).message
    assert message == "env: Value error, the env value of #2 must be a string" and SECRET not in message
    assert _refused({**BASES[0], "env": {7: "x"}}).message == "env: Value error, env key #1 must be a string"


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"tool": "shell_exec", "argv": ["ls", "a\x00b"]}, "NUL"),
        ({"tool": "shell", "command": ["ls\x00"]}, "NUL"),
        ({"tool": "shell_exec", "argv": ["ls"], "cwd": "a\x00"}, "NUL"),
        ({"tool": "shell_exec", "argv": ["ls"], "env": {"K": "a\x00b"}}, "NUL"),
        ({"tool": "exec_command", "cmd": "ls\x00"}, "NUL"),
        ({"tool": "file_write", "path": "a\x00", "content": "x"}, "NUL"),
        (
            {
                "tool": "shell_exec",
                "argv": ["ls"],
                "sandbox_permissions": {"extra_mounts": [{"source": "/a\x00", "target": "/b"}]},
            },
            "NUL",
        ),
    ],
)
def test_nul_is_refused_where_the_kernel_cannot_take_it(raw: dict[str, Any], needle: str) -> None:
    assert needle in _refused(raw).message


def test_nul_stays_allowed_where_the_kernel_takes_it() -> None:
    """Standard input and file content are bytes to the kernel: NUL is data there."""
    parse_request({"tool": "write_stdin", "session_id": "s", "chars": "a\x00b"})
    parse_request({"tool": "file_write", "path": "a.bin", "content": "\x00\x01"})


def test_argument_sizes_are_what_execve_takes() -> None:
    fits = "a" * MAX_ARG_BYTES
    parse_request({"tool": "shell_exec", "argv": ["echo", fits]})
    parse_request({"tool": "shell_command", "command": fits})
    assert (
        "argv[1] is longer than the kernel takes"
        in _refused({"tool": "shell_exec", "argv": ["echo", fits + "a"]}).message
    )
    assert "command is longer" in _refused({"tool": "shell_command", "command": fits + "a"}).message
    assert "cmd is longer" in _refused({"tool": "exec_command", "cmd": fits + "a"}).message
    # bytes, not characters: 'é' is two bytes in UTF-8
    wide = "é" * (MAX_ARG_BYTES // 2 + 1)
    assert "longer than the kernel takes" in _refused({"tool": "shell", "command": ["echo", wide]}).message
    value = "v" * (MAX_ARG_BYTES - len("K="))
    parse_request({"tool": "shell_exec", "argv": ["ls"], "env": {"K": value}})
    message = _refused({"tool": "shell_exec", "argv": ["ls"], "env": {"K": value + "v"}}).message
    assert "env value of K is longer" in message and "vvv" not in message


def test_argv_and_env_together_are_bounded() -> None:
    words = ["a" * 100_000] * (MAX_EXEC_BYTES // 100_000 + 1)
    err = _refused({"tool": "skill_exec", "skill": "s", "argv": ["echo", *words]})
    assert "argv and env together" in err.message
    env = {f"K{i}": "v" * 100_000 for i in range(MAX_EXEC_BYTES // 100_000 + 1)}
    assert "argv and env together" in _refused({"tool": "shell_exec", "argv": ["ls"], "env": env}).message


def test_constrained_text_keeps_pydantic_s_own_clear_messages() -> None:
    assert _refused({**BASES[0], "profile": "p" * 129}).message == "profile: String should have at most 128 characters"
    assert _refused({**BASES[0], "tenant": ""}).message == "tenant: String should have at least 1 character"
    assert _refused({**BASES[0], "subject": 7}).message == "subject: Input should be a valid string"


def test_paths_and_stdin_are_bounded() -> None:
    assert (
        "cwd is longer" in _refused({"tool": "shell_exec", "argv": ["ls"], "cwd": "d" * (MAX_PATH_BYTES + 1)}).message
    )
    assert "path" in _refused({"tool": "file_write", "path": "p" * (MAX_PATH_BYTES + 1), "content": ""}).message
    assert "chars" in _refused({"tool": "write_stdin", "session_id": "s", "chars": "c" * (MAX_STDIN_CHARS + 1)}).message


async def test_the_library_refuses_and_records_without_the_value(tmp_path: Path) -> None:
    evidence = tmp_path / "evidence.jsonl"
    orch = assemble(evidence=EvidenceWriter(evidence), policy=PolicySource())
    for raw, field in TOOL_FIELDS:
        with pytest.raises(InputInvalid) as err:
            await orch.authorize({**raw, "env": {"TOKEN": SECRET}})
        assert field in err.value.message
    with pytest.raises(InputInvalid):
        await orch.authorize({"tool": "shell_exec", "argv": ["ls"], "env": {"TOKEN": SECRET + BAD}})
    await orch.aclose()
    text = evidence.read_text(encoding="utf-8")  # still valid UTF-8: nothing undecodable was written
    assert SECRET not in text
    assert [json.loads(line)["error_code"] for line in text.splitlines()][-1] == "INPUT.INVALID"


# -- through the real process --------------------------------------------------------------------

SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]


def sandboxctl(
    *args: str | bytes, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "SANDBOXCTL_WARM": "0", **(env or {})}
    return subprocess.run(
        [*SANDBOXCTL, *args], capture_output=True, text=True, errors="replace", cwd=cwd, env=environ, timeout=60
    )


def _assert_input_invalid(proc: subprocess.CompletedProcess[str], name: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().endswith(
        f"INPUT.INVALID: {name} is not valid UTF-8 (command-line arguments must be UTF-8 text)"
    )
    assert "Traceback" not in proc.stderr and "INTERNAL" not in proc.stderr
    assert SECRET not in proc.stderr + proc.stdout


CLI_CASES: list[tuple[list[str | bytes], str]] = [
    ([b"--", b"echo", b"\xff"], "ARGV #2"),
    ([b"--", b"\xed\xa0\x80"], "ARGV #1"),  # an encoded surrogate is not UTF-8 either
    ([b"--tool", b"shell", b"--", b"echo", b"\xff"], "ARGV #2"),
    ([b"--tool", b"skill_exec", b"--", b"\xc3"], "ARGV #1"),
    ([b"--tool", b"skill_exec", b"--skill", b"\xff", b"--", b"ls"], "--skill"),
    ([b"--shell", b"echo \xff"], "--shell"),
    ([b"--tool", b"exec_command", b"--shell", b"echo \xff"], "--shell"),
    ([b"--cwd", b"\xff", b"--", b"ls"], "--cwd"),
    ([b"--env", b"A=1", b"--env", b"TOKEN=" + SECRET.encode() + b"\xff", b"--", b"ls"], "--env #2"),
    ([b"--env", b"\xff=1", b"--", b"ls"], "--env #1"),
    ([b"--subject", b"\xff", b"--", b"ls"], "--subject"),
    ([b"--tenant", b"\xff", b"--", b"ls"], "--tenant"),
    ([b"--profile", b"\xff", b"--", b"ls"], "--profile"),
    ([b"--config", b"/tmp/\xff.yaml", b"--", b"ls"], "--config"),
    ([b"--workspace", b"/tmp/\xff", b"--", b"ls"], "--workspace"),
]


@pytest.mark.parametrize("verb", ["check", "run"])
@pytest.mark.parametrize(("args", "name"), CLI_CASES, ids=[n + f"-{i}" for i, (_, n) in enumerate(CLI_CASES)])
def test_the_cli_refuses_undecodable_arguments(verb: str, args: list[str | bytes], name: str) -> None:
    """Refused before anything is decided or started (no engine needed): exit 2, named, never shown."""
    _assert_input_invalid(sandboxctl(verb, *args), name)
    proc = sandboxctl(verb, "--json", *args)
    _assert_input_invalid(proc, name)
    assert json.loads(proc.stdout)["error"]["code"] == "INPUT.INVALID"


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ([b"approvals", b"approve", b"\xff"], "ID"),
        ([b"approvals", b"deny", b"ex-1", b"--reason", b"\xff"], "--reason"),
        ([b"evidence", b"show", b"--execution-id", b"\xff"], "--execution-id"),
        ([b"profiles", b"show", b"\xff"], "NAME"),
        ([b"profiles", b"validate", b"\xff.yaml"], "FILE"),
    ],
)
def test_every_verb_refuses_undecodable_arguments(args: list[str | bytes], name: str) -> None:
    _assert_input_invalid(sandboxctl(*args), name)


@pytest.mark.parametrize("timeout", ["inf", "1e400", "nan", "0", "-1e-9"])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused(timeout: str) -> None:
    proc = sandboxctl("run", f"--timeout={timeout}", "--", "true")
    assert proc.returncode == 2 and "INPUT.INVALID: --timeout must be a positive number of seconds" in proc.stderr


@pytest.mark.parametrize("verb", ["check", "run"])
def test_a_workspace_path_that_is_not_utf8_is_refused(tmp_path: Path, verb: str) -> None:
    odd = os.fsencode(tmp_path) + b"/\xff"
    os.mkdir(odd)
    proc = sandboxctl(verb, "--", "ls", cwd=Path(os.fsdecode(odd)), env={"SANDBOX_STATE_DIR": str(tmp_path / "state")})
    assert proc.returncode == 2, proc.stderr
    assert "INPUT.INVALID: the current directory (the default workspace) is not valid UTF-8" in proc.stderr
    assert "Traceback" not in proc.stderr
