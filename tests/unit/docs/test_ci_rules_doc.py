"""docs/configuration.md's CI example, as written: its YAML loaded as a config file, and every row of the two
tables after it decided by that config (policy, then approval rules). Change the example and this follows."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.domain.decisions import ApprovalRequest
from orchestrator.domain.requests import ScriptFile, parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.policy import Policy
from orchestrator.gate.sanitize import sanitize
from orchestrator.pipeline.config import load_config
from tests.support.paths import DOCS

TEXT = (DOCS / "configuration.md").read_text(encoding="utf-8")
SECTION = TEXT[TEXT.index("## Rules on CI context") :]
CONFIG = re.search(r"```yaml\n(.*?)```", SECTION, re.S)
CELL = r"`((?:[^`\\]|\\.)*)`"
DECISIONS = re.findall(rf"^\| {CELL} \| {CELL} \| (allow|ask|deny) \(`([^`]+)`[^|]*\|$", SECTION, re.M)
APPROVALS = re.findall(rf"^\| {CELL} \| (approved \(`rule:[^`]+`\)|a person .*?) \|$", SECTION, re.M)
JOB = {"provider": "github", "repository": "octo-org/app", "job": "build", "run_id": "1"}
PATH = "/__w/_temp/4f2a.sh"


def _cell(text: str) -> str:
    return text.replace("\\|", "|")  # a table cell's escaped pipe


def _request(ci: str, script: str = "true") -> dict[str, Any]:
    return {
        "tool": "shell_exec",
        "argv": ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", PATH],
        "script": ScriptFile.of(PATH, _cell(script) + "\n").model_dump(),
        "ci": {**JOB, **yaml.safe_load(_cell(ci))},
    }


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    assert CONFIG is not None, "the section's ```yaml block"
    path = tmp_path_factory.mktemp("ci") / "config.yaml"
    path.write_text(CONFIG.group(1), encoding="utf-8")
    return path


def test_the_tables_are_there() -> None:
    assert len(DECISIONS) == 7 and len(APPROVALS) == 2


@pytest.mark.parametrize(("ci", "script", "decision", "matched"), DECISIONS, ids=[f"row{i}" for i in range(1, 8)])
def test_each_step_is_decided_as_the_table_says(
    config_file: Path, ci: str, script: str, decision: str, matched: str
) -> None:
    policy = Policy(load_config(config_file).safety)
    sanitized, analysis = sanitize(parse_request(_request(ci, script)))
    found = policy.decide(sanitized, analysis, profile="ci")
    assert (found.decision.value, found.matched_rule) == (decision, matched), found.reason


@pytest.mark.parametrize(("ci", "outcome"), APPROVALS, ids=["release-bot", "a-person"])
def test_each_ask_is_answered_as_the_table_says(config_file: Path, ci: str, outcome: str) -> None:
    config = load_config(config_file)
    sanitized, analysis = sanitize(parse_request(_request(ci, "./deploy.sh prod")))
    assert Policy(config.safety).decide(sanitized, analysis, profile="ci").decision.value == "ask"
    ask = ApprovalRequest(
        execution_id="ex-1", approval_key=approval_key(sanitized), sanitized=sanitized, policy_reason="r", timeout_s=5
    )
    answer = RuleApprover(RuleApprovalsConfig(rules=config.approvals.rules)).match(ask)
    if outcome.startswith("approved"):
        assert answer is not None and f"{answer.outcome.value} (`{answer.approver}`)" == outcome
    else:
        assert answer is None
