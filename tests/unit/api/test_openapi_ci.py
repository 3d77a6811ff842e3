"""The OpenAPI document states what the service checks of a CI step: the CI context's patterns and lengths, the
script's base64 and its size, and the approvals list's ci."""

from __future__ import annotations

import re

from orchestrator.api.openapi import NO_NUL, build_document
from orchestrator.domain import ci
from orchestrator.domain.requests import BASE64_PATTERN, MAX_PATH_BYTES, MAX_SCRIPT_BASE64
from orchestrator.pipeline.config import ServiceLimits

SCHEMAS = build_document("0", ServiceLimits())["components"]["schemas"]


def _string(prop: dict[str, object]) -> dict[str, object]:
    branches = prop.get("anyOf")
    if isinstance(branches, list):
        return next(b for b in branches if isinstance(b, dict) and b.get("type") == "string")
    return prop


def test_every_request_may_carry_a_ci_context_and_shell_exec_a_script() -> None:
    for name in ("ShellExecRequest", "ShellRequest", "ShellCommandRequest", "FileWriteRequest", "SessionRequest"):
        assert SCHEMAS[name]["properties"]["ci"]["anyOf"][0] == {"$ref": "#/components/schemas/CiContext"}, name
    assert SCHEMAS["ShellExecRequest"]["properties"]["script"]["anyOf"][0] == {
        "$ref": "#/components/schemas/ScriptFile"
    }
    assert "script" not in SCHEMAS["ShellCommandRequest"]["properties"]


def test_the_ci_context_s_checks_are_in_the_document() -> None:
    props = SCHEMAS["CiContext"]["properties"]
    assert SCHEMAS["CiContext"]["required"] == ["provider", "repository", "job", "run_id"]
    assert SCHEMAS["CiContext"]["additionalProperties"] is False
    assert props["provider"]["enum"] == ["github", "gitlab"]
    expected = {
        "repository": (ci.REPOSITORY_PATTERN, ci.REPOSITORY_MAX),
        "workflow": (ci.LABEL_PATTERN, ci.LABEL_MAX),
        "job": (ci.LABEL_PATTERN, ci.LABEL_MAX),
        "stage": (ci.LABEL_PATTERN, ci.LABEL_MAX),
        "step": (ci.LABEL_PATTERN, ci.LABEL_MAX),
        "job_id": (ci.JOB_ID_PATTERN, 128),
        "action": (ci.ACTION_PATTERN, ci.ACTION_MAX),
        "run_id": (ci.RUN_ID_PATTERN, 20),
        "ref": (ci.REF_PATTERN, ci.REF_MAX),
        "event": (ci.EVENT_PATTERN, 64),
        "actor": (ci.ACTOR_PATTERN, ci.ACTOR_MAX),
    }
    for field, (pattern, limit) in expected.items():
        schema = _string(props[field])
        assert (schema["pattern"], schema["maxLength"], schema["minLength"]) == (pattern, limit, 1), field
        re.compile(pattern)  # what a client's generator reads: Python's re takes it
    attempt = props["attempt"]["anyOf"][0]
    assert (attempt["minimum"], attempt["maximum"]) == (1, ci.MAX_ATTEMPT)


def test_the_script_s_checks_are_in_the_document() -> None:
    props = SCHEMAS["ScriptFile"]["properties"]
    assert SCHEMAS["ScriptFile"]["required"] == ["path", "content_base64"]
    assert (props["content_base64"]["pattern"], props["content_base64"]["maxLength"]) == (
        BASE64_PATTERN,
        MAX_SCRIPT_BASE64,
    )
    assert (props["path"]["pattern"], props["path"]["maxLength"]) == (NO_NUL, MAX_PATH_BYTES)


def test_the_approvals_list_names_the_ci_context() -> None:
    prop = SCHEMAS["PendingApprovalView"]["properties"]["ci"]
    assert prop["anyOf"][0] == {"$ref": "#/components/schemas/CiRecord"}
    assert SCHEMAS["CiRecord"]["properties"]["job_key"]["pattern"] == "^[0-9a-f]{64}$"
