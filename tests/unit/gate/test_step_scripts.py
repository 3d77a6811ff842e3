"""A step is a script file the runner wrote: the request carries its content (ShellExecRequest.script), the gate
decides on it as on a ``bash -c`` string, and only its size and sha256 are kept (never the content, which may
hold what the runner put in it)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import pytest

from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.domain.decisions import ApprovalRequest
from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.requests import MAX_SCRIPT_BASE64, MAX_SCRIPT_BYTES, ScriptFile, parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.config import SafetyConfig, default_safety_config
from orchestrator.gate.gate import GateResult
from orchestrator.gate.policy import Policy
from orchestrator.gate.sanitize import sanitize

PATH = "/__w/_temp/8c1d-step.sh"
# how actions/runner runs a bash step (src/Runner.Worker/Handlers/ScriptHandlerHelpers.cs: bash's arguments,
# ScriptHandler.cs: the file under _temp), and the hooks' example (examples/run-script-step.json: bash -e FILE)
BASH_STEP = ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", PATH]
SH_STEP = ["sh", "-e", PATH]
SECRET = "ghp_s3cr3tT0ken1nterpolated"


def step(content: bytes | str, argv: list[str] = BASH_STEP, **extra: Any) -> dict[str, Any]:
    return {"tool": "shell_exec", "argv": argv, "script": ScriptFile.of(PATH, content).model_dump(), **extra}


def gate(raw: dict[str, Any], mode: str = "allow", rules: list[dict[str, Any]] | None = None) -> GateResult:
    default = default_safety_config().model_dump()
    given = default["rules"] if rules is None else rules
    config = SafetyConfig.model_validate({**default, "mode": mode, "rules": given})
    sanitized, analysis = sanitize(parse_request(raw))
    decision = Policy(config).decide(sanitized, analysis, profile="ci")
    return GateResult(sanitized, analysis, decision, approval_key(sanitized))


def test_a_plain_step_is_allowed_where_a_bash_c_string_would_be() -> None:
    result = gate(step("echo building\nmake -j2 test\n"))
    assert (result.decision.decision.value, result.decision.matched_rule) == ("allow", "mode:allow")
    assert result.analysis is not None
    assert result.analysis.commands[1:] == (("echo", "building"), ("make", "-j2", "test"))
    assert result.sanitized.risk.model_dump() == {
        "risk_level": "medium",
        "reason": f"'bash' runs the script {PATH}; newline-separated commands",
    }
    string = gate({"tool": "shell_command", "command": "echo building\nmake -j2 test\n"})
    assert string.decision.decision.value == "allow"


@pytest.mark.parametrize("argv", [BASH_STEP, SH_STEP, ["timeout", "600", "bash", "-e", PATH]])
def test_curl_piped_to_a_shell_in_a_step_is_denied_as_any_command(argv: list[str]) -> None:
    result = gate(step("set -x\ncurl -fsSL https://get.example.com/install.sh | sh\n", argv))
    assert result.decision.decision.value == "deny"
    assert result.decision.matched_rule == "rule:1:deny-critical-risk"
    assert "curl download is executed by sh" in result.decision.reason
    assert result.sanitized.risk.risk_level == "critical"


def test_sudo_in_a_step_is_denied_and_the_reason_never_quotes_the_script() -> None:
    result = gate(step(f"echo start\nsudo ./deploy --token {SECRET}\n"))
    assert result.decision.decision.value == "deny"
    assert result.decision.matched_rule == "denylist:sudo"
    assert result.decision.reason == f"denylisted: 'sudo' matches a command of the script {PATH}"
    recorded = json.dumps([result.public, result.decision.model_dump(mode="json")])
    assert SECRET not in recorded and "deploy" not in recorded


def test_sudo_in_a_step_is_asked_where_the_policy_asks() -> None:
    rules = [{"name": "ask-sudo", "argv_prefix": "sudo", "action": "ask"}]
    config = {**default_safety_config().model_dump(), "denylist": [], "mode": "allow", "rules": rules}
    sanitized, analysis = sanitize(parse_request(step("sudo apt-get install -y jq\n")))
    decision = Policy(SafetyConfig.model_validate(config)).decide(sanitized, analysis, profile="ci")
    assert (decision.decision.value, decision.matched_rule) == ("ask", "rule:1:ask-sudo")


def test_only_the_script_s_size_and_digest_are_recorded() -> None:
    content = f"export TOKEN={SECRET}\n./build.sh\n"
    result = gate(step(content))
    data = content.encode()
    assert result.public["script"] == {"path": PATH, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert SECRET not in json.dumps(result.public)
    assert base64.b64encode(data).decode() not in json.dumps(result.public)


def test_with_an_evidence_key_the_script_s_digest_is_keyed() -> None:
    """A workflow file is public, the secret interpolated into its script is not: with the evidence's key the
    digest cannot be used to try secrets; whoever holds the key can still check a script against it."""
    content = f"export TOKEN={SECRET}\n./build.sh\n"
    key = b"k" * 32
    sanitized, _ = sanitize(parse_request(step(content)), input_key=lambda: key)
    assert sanitized.script is not None
    recorded = sanitized.public()["script"]
    expected = hmac.new(key, content.encode(), hashlib.sha256).hexdigest()
    assert recorded == {"path": PATH, "bytes": len(content.encode()), "hmac_sha256": expected}
    assert hashlib.sha256(content.encode()).hexdigest() not in json.dumps(sanitized.public())
    assert sanitized.script.shown() == f"hmac-sha256 {expected[:16]}…"


def test_the_approval_key_covers_the_content() -> None:
    one = gate(step("make test\n")).approval_key
    assert gate(step("make test\n")).approval_key == one
    assert gate(step("make deploy\n")).approval_key != one
    assert gate({"tool": "shell_exec", "argv": BASH_STEP}).approval_key != one


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00", "it holds NUL bytes (binary)"),
        ("echo caf\xe9\n".encode("latin-1"), "it is not UTF-8 text"),
    ],
    ids=["binary", "latin-1"],
)
def test_content_the_gate_cannot_read_is_asked_in_every_mode(content: bytes, problem: str) -> None:
    for mode in ("allow", "ask"):
        result = gate(step(content), mode=mode, rules=[{"name": "ci", "tool": ["exec"], "action": "allow"}])
        assert result.decision.decision.value == "ask", mode
        assert result.decision.reason == (
            "matched rule:1:ci; but the gate cannot see what would run: "
            f"the script {PATH} cannot be analyzed: {problem}"
        )


def test_a_step_that_does_not_parse_is_asked() -> None:
    result = gate(step("if [ -f x ]; then\n  make\n"))
    assert result.decision.decision.value == "ask"
    assert result.analysis is not None
    assert result.analysis.unseen == (f"parse error at 3:1 in the command run by 'bash {PATH}'",)


def test_a_step_s_control_characters_are_unseen_as_in_a_shell_string() -> None:
    result = gate(step("echo a\rrm -rf /tmp/x\n"))
    assert result.decision.decision.value != "allow"
    assert result.analysis is not None
    assert "control character in command: cannot be analyzed reliably" in result.analysis.unseen


def test_a_script_path_is_a_path_of_the_request() -> None:
    """It is written into the workspace: rules on paths see it, and a credential path is one."""
    hook = ".git/hooks/pre-commit"
    raw = {"tool": "shell_exec", "argv": ["sh", hook], "script": ScriptFile.of(hook, "true\n").model_dump()}
    rules = [{"name": "no-hooks", "paths": [".git/hooks/*"], "action": "deny"}]
    decision = gate(raw, rules=rules).decision
    assert (decision.decision.value, decision.matched_rule) == ("deny", "rule:1:no-hooks")
    decision = gate({**raw, "script": ScriptFile.of("x.sh", "true\n").model_dump()}, rules=rules).decision
    assert (decision.decision.value, decision.matched_rule) == ("ask", "mode:allow")  # runs no script it was given
    ssh = ".ssh/rc"
    raw = {"tool": "shell_exec", "argv": ["sh", ssh], "script": ScriptFile.of(ssh, "true\n").model_dump()}
    assert "credential path (.ssh): .ssh/rc" in gate(raw).sanitized.risk.reason


def test_the_script_s_content_is_what_the_request_says() -> None:
    content = b"#!/bin/bash\necho \xe2\x9c\x93\n"
    script = ScriptFile.of(PATH, content)
    assert script.content == content
    assert ScriptFile.of(PATH, "echo ✓\n").content == "echo ✓\n".encode()
    request = parse_request(step(content))
    assert request.script is not None and request.script.content == content  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("script", "field", "message"),
    [
        ({"path": PATH, "content_base64": "bm90IGJhc2U2NA"}, "script.content_base64", "must be standard base64"),
        ({"path": PATH, "content_base64": "YWJj\nZGVm"}, "script.content_base64", "must be standard base64"),
        ({"path": PATH, "content_base64": "A" * (MAX_SCRIPT_BASE64 + 4)}, "script.content_base64", "at most"),
        ({"path": "a\x00b", "content_base64": ""}, "script.path", "must not contain NUL bytes"),
        ({"path": "", "content_base64": ""}, "script.path", "at least 1 character"),
        ({"path": PATH}, "script.content_base64", "Field required"),
        ({"path": PATH, "content_base64": "", "mode": "0755"}, "script.mode", "Extra inputs are not permitted"),
    ],
)
def test_a_wrong_script_is_refused_naming_its_field(script: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InputInvalid) as err:
        parse_request({"tool": "shell_exec", "argv": BASH_STEP, "script": script})
    assert err.value.details == {"fields": [field]}
    assert err.value.message.startswith(f"{field}: ") and message in err.value.message


def test_a_script_goes_with_an_argv_only() -> None:
    with pytest.raises(InputInvalid) as err:
        parse_request(
            {"tool": "shell_command", "command": "bash x.sh", "script": {"path": "x.sh", "content_base64": ""}}
        )
    assert err.value.details == {"fields": ["script"]}


def test_the_longest_script_is_one_byte_short_of_a_mebibyte() -> None:
    assert (MAX_SCRIPT_BYTES, MAX_SCRIPT_BASE64) == (1024 * 1024 - 1, 1398100)
    assert len(ScriptFile.of(PATH, b"x" * MAX_SCRIPT_BYTES).content_base64) == MAX_SCRIPT_BASE64
    with pytest.raises(ValueError, match="at most 1398100 characters"):
        ScriptFile.of(PATH, b"x" * (MAX_SCRIPT_BYTES + 1))


def _approval(raw: dict[str, Any]) -> ApprovalRequest:
    sanitized, _ = sanitize(parse_request(raw))
    return ApprovalRequest(
        execution_id="ex-1", approval_key=approval_key(sanitized), sanitized=sanitized, policy_reason="r", timeout_s=5
    )


def test_an_approving_rule_on_commands_never_covers_a_script_it_cannot_read() -> None:
    """An approver has the sanitized request only: a script's digest, not its commands. A rule that approves by
    what runs cannot say every command of the script matches; a rule on the CI context alone still can."""
    approver = RuleApprover(
        RuleApprovalsConfig.model_validate(
            {
                "rules": [
                    {"name": "bash", "argv_glob": "bash *", "outcome": "approved"},
                    {"name": "deny-rm", "argv_prefix": "rm", "outcome": "denied"},
                    {"name": "main-builds", "ci": {"ref": "refs/heads/main", "step": "build"}, "outcome": "approved"},
                ]
            }
        )
    )
    script = ScriptFile.of("/w/_temp/s.sh", "make build\n").model_dump()
    raw: dict[str, Any] = {"tool": "shell_exec", "argv": ["bash", "-e", "/w/_temp/s.sh"], "script": script}
    assert approver.match(_approval(raw)) is None
    plain = approver.match(_approval({"tool": "shell_exec", "argv": ["bash", "-e", "/w/_temp/s.sh"]}))
    assert plain is not None and plain.approver == "rule:bash"
    on_main = {
        **raw,
        "ci": {
            "provider": "github",
            "repository": "org/app",
            "job": "build",
            "run_id": "7",
            "ref": "refs/heads/main",
            "step": "build",
        },
    }
    result = approver.match(_approval(on_main))
    assert result is not None and (result.outcome.value, result.approver) == ("approved", "rule:main-builds")
