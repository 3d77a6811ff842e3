"""The whole decision flow with real evidence files: records, codes, caching, no secrets."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.domain.decisions import ApprovalRequest, ApprovalResult
from orchestrator.domain.errors import (
    ApprovalAborted,
    ApprovalDenied,
    ApprovalTimeout,
    InputInvalid,
    NoApprovalProvider,
    PolicyDenied,
)
from orchestrator.evidence import EvidenceWriter, verify
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.factory import assemble, build_orchestrator
from orchestrator.pipeline.orchestrator import Orchestrator

SECRET = "hunter2-super-secret"

APPROVALS = RuleApprovalsConfig.model_validate(
    {
        "rules": [
            {"name": "tests", "argv_glob": "pytest*", "outcome": "approved_for_session"},
            {"name": "make", "argv_prefix": "make", "outcome": "approved"},
            {"name": "halt", "argv_prefix": "kill", "outcome": "abort"},
        ]
    }
)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def events(path: Path, execution_id: str) -> list[str]:
    return [r["event"] for r in records(path) if r["execution_id"] == execution_id]


@pytest.fixture
def evidence_path(tmp_path: Path) -> Path:
    return tmp_path / "evidence.jsonl"


def make(evidence_path: Path, approvals: Any = None) -> Orchestrator:
    return assemble(evidence=EvidenceWriter(evidence_path), policy=PolicySource(), approvals=approvals)


async def test_allow_records_request_and_durable_decision(evidence_path: Path) -> None:
    orch = make(evidence_path)
    auth = await orch.authorize({"tool": "shell_exec", "argv": ["ls"], "env": {"TOKEN": SECRET}, "call_id": "c1"})
    # the decision record is on disk before authorize returns (nothing may run before that)
    assert events(evidence_path, auth.execution_id) == ["request_received", "decision_made"]
    decision = records(evidence_path)[-1]
    assert decision["decision"] == "allow" and decision["call_id"] == "c1"
    assert decision["policy_version_hash"] == auth.gate.decision.policy_version_hash
    assert auth.approved_by == "policy" and auth.approval is None
    await orch.aclose()
    assert SECRET not in evidence_path.read_text()
    assert verify(evidence_path).ok


async def test_deny_is_recorded_with_its_code(evidence_path: Path) -> None:
    orch = make(evidence_path)
    with pytest.raises(PolicyDenied) as err:
        await orch.authorize({"tool": "shell_command", "command": "sudo rm -rf /"})
    execution_id = err.value.details["execution_id"]
    assert events(evidence_path, execution_id) == ["request_received", "decision_made", "run_failed"]
    assert records(evidence_path)[-1]["error_code"] == "POLICY.DENIED"
    await orch.aclose()


async def test_ask_without_provider_fails_fast(evidence_path: Path) -> None:
    orch = make(evidence_path)
    started = asyncio.get_running_loop().time()
    with pytest.raises(NoApprovalProvider):
        await orch.authorize({"tool": "shell_exec", "argv": ["make"]})
    assert asyncio.get_running_loop().time() - started < 1
    assert records(evidence_path)[-1]["error_code"] == "CONFIG.NO_APPROVAL_PROVIDER"
    await orch.aclose()


async def test_rule_approvals_and_session_cache(evidence_path: Path) -> None:
    orch = make(evidence_path, RuleApprover(APPROVALS))
    ask = {"tool": "shell_exec", "argv": ["pytest", "-q"], "session_id": "agent-1"}
    first = await orch.authorize(ask)
    assert first.approval is not None and first.approval.outcome == "approved_for_session"
    assert events(evidence_path, first.execution_id) == [
        "request_received",
        "decision_made",
        "approval_requested",
        "approval_decided",
    ]
    again = await orch.authorize({**ask, "call_id": "other-call"})
    assert again.approved_by == "session-cache"
    assert events(evidence_path, again.execution_id) == ["request_received", "decision_made", "approval_decided"]
    other_session = await orch.authorize({**ask, "session_id": "agent-2"})
    assert other_session.approved_by == "rule:tests"
    with pytest.raises(ApprovalDenied):
        await orch.authorize({"tool": "shell_exec", "argv": ["npm", "publish"]})
    with pytest.raises(ApprovalAborted):
        await orch.authorize({"tool": "shell_exec", "argv": ["kill", "1"]})
    assert [r["error_code"] for r in records(evidence_path) if r["event"] == "run_failed"] == [
        "APPROVAL.DENIED",
        "APPROVAL.ABORTED",
    ]
    await orch.aclose()
    assert verify(evidence_path).ok


async def test_write_stdin_to_an_approved_exec_session_skips_the_ask(evidence_path: Path) -> None:
    orch = make(evidence_path, RuleApprover(APPROVALS))
    session = await orch.authorize({"tool": "exec_command", "cmd": "make shell"})
    stdin = await orch.authorize({"tool": "write_stdin", "session_id": session.execution_id, "chars": SECRET})
    assert stdin.approved_by == f"exec-session:{session.execution_id}"
    kinds = events(evidence_path, stdin.execution_id)
    assert kinds == ["request_received", "decision_made", "approval_decided"]
    received = next(r for r in records(evidence_path) if r["execution_id"] == stdin.execution_id)
    assert received["data"]["sanitized"]["stdin"]["bytes"] == len(SECRET)
    # another tenant writing to that session id is asked like anything else (rules default: denied)
    with pytest.raises(ApprovalDenied):
        await orch.authorize(
            {"tool": "write_stdin", "session_id": session.execution_id, "chars": "x", "tenant": "other"}
        )
    # input to an unknown session is asked like anything else (rules default: denied)
    with pytest.raises(ApprovalDenied):
        await orch.authorize({"tool": "write_stdin", "session_id": "ex-unknown", "chars": "x"})
    await orch.aclose()
    assert SECRET not in evidence_path.read_text()


class _Silent:
    name = "silent"

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        await asyncio.sleep(3600)
        raise AssertionError


async def test_timeout_denies_and_is_recorded_as_timeout(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("safety:\n  approval_timeout_s: 0.2\n")
    evidence = tmp_path / "e.jsonl"
    orch = build_orchestrator(config, evidence_path=evidence, approvals=_Silent())
    with pytest.raises(ApprovalTimeout):
        await orch.authorize({"tool": "shell_exec", "argv": ["make"]})
    decided = [r for r in records(evidence) if r["event"] == "approval_decided"]
    assert decided[-1]["decision"] == "timeout"
    assert records(evidence)[-1]["error_code"] == "APPROVAL.TIMEOUT"
    await orch.aclose()


async def test_invalid_input_is_recorded_without_values(evidence_path: Path) -> None:
    orch = make(evidence_path)
    with pytest.raises(InputInvalid):
        await orch.authorize({"tool": "shell_exec", "argv": [], "env": {"K": SECRET}})
    last = records(evidence_path)[-1]
    assert (last["event"], last["error_code"]) == ("run_failed", "INPUT.INVALID")
    assert "argv" in last["data"]["fields"]
    await orch.aclose()
    assert SECRET not in evidence_path.read_text()


async def test_config_file_wires_rule_approvals(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        "approvals:\n  provider: rules\n  rules:\n    - name: make\n      argv_prefix: make\n      outcome: approved\n"
    )
    orch = build_orchestrator(config, evidence_path=tmp_path / "e.jsonl")
    assert (await orch.authorize({"tool": "shell_exec", "argv": ["make"]})).approved_by == "rule:make"
    await orch.aclose()


async def test_session_grants_do_not_cross_tenants_or_policy_versions(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("safety:\n  mode: ask\n")
    evidence = tmp_path / "e.jsonl"
    orch = build_orchestrator(config, evidence_path=evidence, approvals=RuleApprover(APPROVALS))
    ask = {"tool": "shell_exec", "argv": ["pytest"], "session_id": "agent-7", "tenant": "a"}
    assert (await orch.authorize(ask)).approved_by == "rule:tests"
    assert (await orch.authorize(ask)).approved_by == "session-cache"
    assert (await orch.authorize({**ask, "tenant": "b"})).approved_by == "rule:tests"
    config.write_text("safety:\n  mode: ask\n  allowlist: [ls, pwd]\n")
    os.utime(config, ns=(time.time_ns(), time.time_ns() + 5_000_000))
    assert (await orch.authorize(ask)).approved_by == "rule:tests"  # new policy: asked again
    await orch.aclose()
