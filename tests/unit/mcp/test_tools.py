"""Each tool's published input schema refuses what its model refuses, and takes what it takes: a host that
validates against tools/list never sends a call the server then refuses as malformed, and the other way round."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from pydantic import TypeAdapter, ValidationError

from orchestrator.domain.requests import MAX_ARG_BYTES, MAX_PATH_BYTES, Request
from orchestrator.mcp.tools import BY_NAME, MAX_OUTPUT_TOKENS, TOOLS

CASES: list[tuple[str, dict[str, Any]]] = [
    ("run", {"argv": ["true"]}),
    ("run", {"command": "echo hi", "workdir": "src", "timeout_ms": 1000, "max_output_tokens": 10}),
    ("run", {"argv": ["true"], "command": "true"}),  # both
    ("run", {}),  # neither
    ("run", {"argv": []}),
    ("run", {"argv": ["a\x00b"]}),
    ("run", {"command": ""}),
    ("run", {"argv": ["true"], "shell": True}),  # unknown property
    ("run", {"argv": ["true"], "timeout_ms": 0}),
    ("run", {"argv": ["true"], "max_output_tokens": MAX_OUTPUT_TOKENS + 1}),
    ("run", {"argv": ["true"], "sandbox_permissions": {"network": ["example.test:443"]}, "retry_of": "ex-1"}),
    ("run", {"argv": ["true"], "sandbox_permissions": {"network": ["h:1"], "mounts": []}}),
    ("run", {"argv": "true"}),
    ("exec_command", {"cmd": "cat"}),
    ("exec_command", {"cmd": "cat", "tty": True, "yield_time_ms": 0, "workdir": "."}),
    ("exec_command", {"cmd": "cat", "yield_time_ms": 300_001}),
    ("exec_command", {"cmd": "cat", "yield_time_ms": -1}),
    ("exec_command", {"cmd": "cat", "tty": "yes"}),
    ("exec_command", {"cmd": "cat", "session_id": "x"}),
    ("exec_command", {"cmd": "cat", "yield_time_ms": "100"}),
    ("exec_command", {"cmd": "cat", "yield_time_ms": True}),
    ("write_stdin", {"session_id": "ex-1"}),
    ("write_stdin", {"session_id": "ex-1", "chars": "", "yield_time_ms": 10}),
    ("write_stdin", {"session_id": "", "chars": "x"}),
    ("write_stdin", {"chars": "x"}),
    ("read_file", {"path": "a.txt"}),
    ("read_file", {"path": ""}),
    ("read_file", {"path": "a\x00"}),
    ("write_file", {"path": "a.txt", "content": ""}),
    ("write_file", {"path": "a.txt"}),
    ("apply_patch", {"patch": "--- a/x\n+++ b/x\n"}),
    ("apply_patch", {"patch": ""}),
]


def _schema_accepts(tool: str, arguments: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(arguments, BY_NAME[tool].input_schema(), cls=jsonschema.Draft202012Validator)
    except jsonschema.ValidationError:
        return False
    return True


def _model_accepts(tool: str, arguments: dict[str, Any]) -> bool:
    try:
        BY_NAME[tool].model.model_validate(arguments)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(("tool", "arguments"), CASES)
def test_the_schema_and_the_model_agree(tool: str, arguments: dict[str, Any]) -> None:
    assert _schema_accepts(tool, arguments) == _model_accepts(tool, arguments)


def test_each_schema_is_valid_and_closed() -> None:
    for tool in TOOLS:
        schema = tool.input_schema()
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False, tool.name
        assert tool.description and tool.title


def test_governed_tools_tell_the_model_what_a_refusal_means() -> None:
    for tool in TOOLS:
        if "retry_of" in tool.model.model_fields:
            assert "SANDBOX.RESTRICTED" in tool.description and "retry_of" in tool.description, tool.name


@pytest.mark.parametrize(
    ("tool", "arguments", "request_"),
    [
        (
            "read_file",
            {"path": "p" * MAX_PATH_BYTES},
            {"tool": "shell_exec", "argv": ["cat", "--", "p" * MAX_PATH_BYTES]},
        ),
        (
            "write_file",
            {"path": "p" * MAX_PATH_BYTES, "content": ""},
            {"tool": "file_write", "path": "p" * MAX_PATH_BYTES, "content": ""},
        ),
        ("write_file", {"path": "p" * (MAX_PATH_BYTES + 1), "content": ""}, None),
        ("run", {"argv": ["echo", "w" * MAX_ARG_BYTES]}, {"tool": "shell_exec", "argv": ["echo", "w" * MAX_ARG_BYTES]}),
        ("run", {"argv": ["echo", "w" * (MAX_ARG_BYTES + 1)]}, None),
        ("run", {"command": "c" * MAX_ARG_BYTES}, {"tool": "shell_command", "command": "c" * MAX_ARG_BYTES}),
        ("exec_command", {"cmd": "c" * (MAX_ARG_BYTES + 1)}, None),
    ],
)
def test_at_the_kernels_limits_the_schema_admits_what_the_service_does(
    tool: str, arguments: dict[str, Any], request_: dict[str, Any] | None
) -> None:
    """ASCII at the kernel's limits (bytes, which are characters there): a call the schema admits is no
    INPUT.INVALID of the service; one past them is a protocol error, as the schema says."""
    assert _schema_accepts(tool, arguments) == _model_accepts(tool, arguments) == (request_ is not None)
    if request_ is not None:
        TypeAdapter(Request).validate_python(request_)
