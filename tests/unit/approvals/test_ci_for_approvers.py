"""What an approver sees of a CI step: its job's context (the terminal prompt, the approvals list's ``ci``, which
/ui shows) and its script's digest, never the script's content."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from orchestrator.approvals.queue import PendingApproval
from orchestrator.approvals.terminal import render_prompt
from orchestrator.domain.decisions import ApprovalRequest
from orchestrator.domain.requests import ScriptFile, parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.sanitize import sanitize

CI: dict[str, Any] = {
    "provider": "github",
    "repository": "octo-org/app",
    "workflow": "Release",
    "job": "deploy",
    "job_id": "arc-runner-7",
    "step": "deploy-prod",
    "run_id": "9001",
    "attempt": 2,
    "ref": "refs/heads/main",
    "event": "push",
    "actor": "jane",
}
CONTENT = "./deploy.sh --token ghp_interpolatedSecret\n"
RAW = {
    "tool": "shell_exec",
    "argv": ["bash", "-e", "/__w/_temp/d.sh"],
    "script": ScriptFile.of("/__w/_temp/d.sh", CONTENT).model_dump(),
    "ci": CI,
    "tenant": "ci",
    "subject": "runner-7",
}


def _ask(raw: dict[str, Any]) -> ApprovalRequest:
    sanitized, _ = sanitize(parse_request(raw))
    return ApprovalRequest(
        execution_id="ex-1",
        approval_key=approval_key(sanitized),
        sanitized=sanitized,
        policy_reason="deploying: a person decides",
        timeout_s=300,
    )


def test_the_terminal_prompt_names_the_job_the_step_and_the_script_s_digest() -> None:
    ask = _ask(RAW)
    assert ask.sanitized.context.ci is not None and ask.sanitized.script is not None
    key, digest = ask.sanitized.context.ci.job_key, ask.sanitized.script.sha256
    assert render_prompt(ask).splitlines() == [
        "Approval needed (deploying: a person decides)",
        "  tool:    shell_exec",
        "  command: bash -e /__w/_temp/d.sh",
        f"  script:  /__w/_temp/d.sh ({len(CONTENT)} bytes, sha256 {digest[:16]}…)",
        "  risk:    medium ('bash' runs the script /__w/_temp/d.sh)",
        "  who:     runner-7@ci",
        "  ci:      github octo-org/app run 9001 attempt 2",
        f"  job:     Release / deploy (arc-runner-7)  key {key[:16]}",
        "  step:    deploy-prod",
        "  ref:     refs/heads/main on push by jane",
        f"  key:     {ask.approval_key[:16]}  timeout: 300s",
        "Approve? [y]es / [s]ession / [n]o / [a]bort: ",
    ]
    assert "ghp_" not in render_prompt(ask)


def test_a_gitlab_step_s_prompt_names_its_stage() -> None:
    ci = {"provider": "gitlab", "repository": "g/p", "job": "rspec 1/3", "run_id": "5", "stage": "test"}
    lines = render_prompt(_ask({"tool": "shell_exec", "argv": ["true"], "ci": {**ci, "step": "step_script"}}))
    assert "  step:    stage test, step_script" in lines.splitlines()
    assert "  job:     rspec 1/3  key " in lines


def test_the_approvals_list_gives_the_ci_context_apart() -> None:
    ask = _ask(RAW)
    pending = PendingApproval(
        id="ex-1",
        approval_key=ask.approval_key,
        tenant="ci",
        subject="runner-7",
        sanitized=ask.sanitized.public(),
        policy_reason=ask.policy_reason,
        created_at=1_800_000_000.0,
        deadline=1_800_000_300.0,
    )
    view = pending.view(now=1_800_000_100.0)
    assert view.ci is not None
    assert view.ci.model_dump(exclude_none=True) == {**CI, "job_key": ask.sanitized.context.ci.job_key}  # type: ignore[union-attr]
    wire = json.loads(view.model_dump_json())
    assert wire["ci"]["job_key"] == wire["request"]["context"]["ci"]["job_key"]
    assert wire["request"]["script"]["bytes"] == len(CONTENT)
    assert "ghp_" not in view.model_dump_json()
    plain = dataclasses.replace(pending, sanitized=_ask({"tool": "shell_exec", "argv": ["true"]}).sanitized.public())
    assert plain.view(now=1_800_000_100.0).ci is None
