"""Auto-approve: a trusted tenant's (or tool's) asks approved without anyone, on the record as the approver
``auto`` with the rule that applied; never a denial turned into a yes; other tenants still ask."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.approvals.auto import AutoApprove
from orchestrator.domain.errors import ConfigInvalid, NoApprovalProvider, PolicyDenied
from orchestrator.pipeline.config import load_config
from orchestrator.pipeline.factory import build_orchestrator

CONFIG = """
approvals:
  provider: none
  auto_approve:
    tenants:
      ci: all
      builds: {tools: [exec]}
      careful: none
"""


def approvals(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in rows if r["event"] == "approval_decided"]


async def test_a_trusted_tenants_asks_are_approved_by_auto_and_others_still_ask(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    evidence = tmp_path / "e.jsonl"
    orch = build_orchestrator(config, evidence_path=evidence)
    try:
        ask = {"tool": "shell_exec", "argv": ["make", "release"]}  # the default policy asks about make
        ci = await orch.authorize({**ask, "tenant": "ci"})
        assert ci.approved_by == "auto"
        assert ci.approval is not None and ci.approval.reason == "auto_approve tenant ci: all"
        builds = await orch.authorize({**ask, "tenant": "builds"})
        assert builds.approved_by == "auto" and builds.approval is not None
        assert builds.approval.reason == "auto_approve tenant builds: tools exec"
        # the tenant's other tools, an unlisted tenant, a tenant set to none: asked (no provider: refused)
        for refused in (
            {"tool": "file_write", "path": "x", "content": "y", "tenant": "builds"},
            {**ask, "tenant": "someone-else"},
            {**ask, "tenant": "careful"},
        ):
            with pytest.raises(NoApprovalProvider):
                await orch.authorize(refused)
        # a denial is never turned into a yes
        with pytest.raises(PolicyDenied):
            await orch.authorize({"tool": "shell_exec", "argv": ["sudo", "id"], "tenant": "ci"})
    finally:
        await orch.aclose()
    recorded = approvals(evidence)
    assert [(r["approver"], r["decision"]) for r in recorded] == [("auto", "approved"), ("auto", "approved")]
    assert recorded[0]["reason"] == "auto_approve tenant ci: all"


def ask(tenant: str, tool: str = "shell_exec", *, hosts: list[str] | None = None, root: bool = False) -> Any:
    from orchestrator.domain.decisions import ApprovalRequest
    from orchestrator.domain.requests import parse_request
    from orchestrator.gate.sanitize import sanitize

    body: dict[str, Any] = {"tool": tool, "tenant": tenant, "sandbox_permissions": {"writable_root": root}}
    body.update({"argv": ["make"]} if tool == "shell_exec" else {"path": "x", "content": "y"})
    if hosts:
        body["sandbox_permissions"]["network"] = hosts
    sanitized, _ = sanitize(parse_request(body))
    return ApprovalRequest(
        execution_id="ex-1",
        approval_key="k",
        sanitized=sanitized,
        policy_reason="asked",
        timeout_s=1,
        network_asked=list(hosts or ()),
    )


def test_the_default_applies_to_unlisted_tenants() -> None:
    auto = AutoApprove.model_validate({"default": {"tools": ["shell_exec"]}, "tenants": {"t": "none"}})
    assert auto.decide(ask("anyone")) is not None
    assert auto.decide(ask("anyone", "file_write")) is None
    assert auto.decide(ask("t")) is None
    assert AutoApprove().decide(ask("anyone")) is None  # off unless configured


def test_escalations_are_approved_only_where_the_entry_names_them() -> None:
    auto = AutoApprove.model_validate(
        {"tenants": {"ci": "all", "builds": {"network": ["*.pythonhosted.org:443", "pypi.org:443"]}}}
    )
    assert auto.decide(ask("ci")) is not None
    assert auto.decide(ask("ci", hosts=["pypi.org:443"])) is None  # all: every tool, no escalation
    assert auto.decide(ask("ci", root=True)) is None
    approved = auto.decide(ask("builds", hosts=["pypi.org:443", "files.pythonhosted.org:443"]))
    assert approved is not None and "network *.pythonhosted.org:443, pypi.org:443" in approved.reason
    assert auto.decide(ask("builds", hosts=["pypi.org:443", "exfil.example:443"])) is None


@pytest.mark.parametrize(
    ("section", "said"),
    [
        ("{tenants: {ci: everything}}", "auto_approve"),
        ("{tenants: {ci: {tools: [rm_rf]}}}", "unknown tool 'rm_rf'"),
        ("{tenants: {ci: {tools: []}}}", "tools"),
        ("{tenants: {ci: {network: ['*:443']}}}", "a bare '*'"),
        ("{default: sometimes}", "default"),
        ("{tenants: {'bad tenant': all}}", "tenants"),
    ],
)
def test_a_bad_auto_approve_section_names_what_is_wrong(tmp_path: Path, section: str, said: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"approvals:\n  auto_approve: {section}\n")
    with pytest.raises(ConfigInvalid) as raised:
        load_config(config)
    assert said in str(raised.value), raised.value
