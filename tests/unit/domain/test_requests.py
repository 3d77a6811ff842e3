from __future__ import annotations

import pytest

from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.requests import ShellExecRequest, WriteStdinRequest, parse_request


def test_every_tool_parses() -> None:
    samples = [
        {"tool": "shell_exec", "argv": ["ls"]},
        {"tool": "shell", "command": ["ls", "-la"]},
        {"tool": "shell_command", "command": "ls | wc -l"},
        {"tool": "exec_command", "cmd": "python3", "tty": True},
        {"tool": "write_stdin", "session_id": "s1", "chars": "print(1)\n"},
        {"tool": "file_write", "path": "a.txt", "content": "x"},
        {"tool": "apply_patch", "patch": "*** Begin Patch\n*** Add File: a\n+x\n*** End Patch\n"},
        {"tool": "skill_exec", "skill": "lint", "argv": ["ruff", "check"]},
    ]
    for raw in samples:
        assert parse_request(raw).tool == raw["tool"]


def test_frozen_and_extra_forbidden() -> None:
    req = parse_request({"tool": "shell_exec", "argv": ["ls"]})
    assert isinstance(req, ShellExecRequest)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error
        req.argv = ["rm"]  # type: ignore[misc]
    with pytest.raises(InputInvalid) as err:
        parse_request({"tool": "shell_exec", "argv": ["ls"], "surprise": 1})
    assert "surprise" in err.value.message


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"tool": "nope"}, "tool"),
        ({"tool": "shell_exec", "argv": []}, "argv"),
        ({"tool": "shell_exec", "argv": [""]}, "argv"),
        ({"tool": "shell_exec", "argv": ["ls"], "timeout_ms": 0}, "timeout_ms"),
        ({"tool": "shell_exec", "argv": ["ls"], "env": {"BAD KEY": "v"}}, "env"),
        ({"tool": "write_stdin", "chars": "x"}, "session_id"),
        ({"tool": "shell_command", "command": "a\x00b"}, "command"),
        ("not a mapping", "(root)"),
    ],
)
def test_invalid_requests_name_the_field(raw: object, field: str) -> None:
    with pytest.raises(InputInvalid) as err:
        parse_request(raw)
    assert err.value.code == "INPUT.INVALID"
    assert field in err.value.message


def test_errors_never_echo_secret_values() -> None:
    secret = "sk-live-THIS-IS-SECRET"
    bad = [
        {"tool": "shell_exec", "argv": ["ls"], "env": {"TOKEN": secret + "\x00"}},
        {"tool": "write_stdin", "session_id": "s", "chars": 12345, "x": secret},
        {"tool": "file_write", "path": "a", "content": {"nested": secret}},
    ]
    for raw in bad:
        with pytest.raises(InputInvalid) as err:
            parse_request(raw)
        assert secret not in str(err.value)
        assert secret not in repr(err.value.details)


def test_write_stdin_session_is_required() -> None:
    req = parse_request({"tool": "write_stdin", "session_id": "s-1", "chars": "q"})
    assert isinstance(req, WriteStdinRequest)
    assert req.session_id == "s-1"


def test_a_malformed_env_key_is_named_by_position_only() -> None:
    with pytest.raises(InputInvalid) as err:
        parse_request({"tool": "shell_exec", "argv": ["ls"], "env": {"OK": "1", "TOKEN=hunter2-secret": ""}})
    assert "hunter2-secret" not in str(err.value) and "env key #2" in str(err.value)


@pytest.mark.parametrize("key", ["PATH\n", "1ABC", "-X", "A B", "A=B", "A.B", ""])
def test_an_env_key_is_a_whole_name(key: str) -> None:
    """A name is the whole key: not a name with a line break after it (re's $ would take one), nor one with '='."""
    with pytest.raises(InputInvalid):
        parse_request({"tool": "shell_exec", "argv": ["ls"], "env": {key: "1"}})


def test_an_env_key_may_hold_a_hyphen_as_the_github_runner_names_an_action_s_input() -> None:
    request = parse_request({"tool": "shell_exec", "argv": ["ls"], "env": {"INPUT_FETCH-DEPTH": "1"}})
    assert request.env == {"INPUT_FETCH-DEPTH": "1"}  # type: ignore[union-attr]
