"""sandboxctl approvals list (the text listing) shows a pending CI step's job as /ui and the terminal prompt do:
repository and run, workflow / job with its key, the step, the ref, event and actor — every value escaped, the
script's content never; an ask without CI context gets no CI lines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.approvals.queue import ApprovalStore
from orchestrator.cli.approvals_cmd import _ci_lines
from orchestrator.cli.main import main
from orchestrator.domain.ci import CiContext
from orchestrator.domain.decisions import ApprovalRequest
from orchestrator.domain.requests import ScriptFile, parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.sanitize import sanitize
from tests.unit.approvals.test_ci_for_approvers import CI  # the same job as the prompt's tests

SECRET = "ghp_interpolatedSecret"


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SANDBOX_EVIDENCE_PATH", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SANDBOX_STATE_DIR", str(tmp_path / "state"))


def _submit(store: ApprovalStore, execution_id: str, raw: dict[str, Any]) -> None:
    sanitized, _ = sanitize(parse_request({"tenant": "ci", "subject": "runner-7", **raw}))
    store.submit(
        ApprovalRequest(
            execution_id=execution_id,
            approval_key=approval_key(sanitized),
            sanitized=sanitized,
            policy_reason="deploying: a person decides",
            timeout_s=300,
        )
    )


def test_a_pending_ci_step_is_listed_with_its_jobs_context(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ApprovalStore(tmp_path / "service.db")
    script = ScriptFile.of("/__w/_temp/d.sh", f"./deploy.sh --token {SECRET}\n").model_dump()
    _submit(
        store, "ex-ci", {"tool": "shell_exec", "argv": ["bash", "-e", "/__w/_temp/d.sh"], "script": script, "ci": CI}
    )
    _submit(store, "ex-plain", {"tool": "shell", "command": ["uname", "-a"]})
    assert main(["approvals", "list", "--db", str(store.path)]) == 0
    out = capsys.readouterr().out
    key = CiContext.model_validate(CI).recorded().job_key
    lines = out.splitlines()
    ci_at = lines.index("    ci:   github octo-org/app run 9001 attempt 2")
    assert lines[ci_at - 2].startswith("ex-ci  runner-7@ci  shell_exec: bash -e /__w/_temp/d.sh")
    assert lines[ci_at : ci_at + 4] == [
        "    ci:   github octo-org/app run 9001 attempt 2",
        f"    job:  Release / deploy (arc-runner-7)  key {key[:16]}",
        "    step: deploy-prod",
        "    ref:  refs/heads/main on push by jane",
    ]
    plain = lines.index(next(line for line in lines if line.startswith("ex-plain")))
    assert lines[plain + 2 :] == []  # no CI lines for an ask without CI context
    assert SECRET not in out


def test_a_stored_ci_context_that_does_not_read_back_is_said_so_never_printed() -> None:
    # the store's JSON is read defensively: a control character (the request model refuses it) is not echoed
    sanitized, _ = sanitize(parse_request({"tool": "shell_exec", "argv": ["true"], "ci": CI}))
    stored = sanitized.model_dump(mode="json")
    stored["context"]["ci"]["job"] = "deploy \x1b[2J"
    assert _ci_lines(stored) == [("ci", "(a CI context that does not read back)")]
    assert _ci_lines({"context": {"ci": None}}) == [] and _ci_lines({}) == []
