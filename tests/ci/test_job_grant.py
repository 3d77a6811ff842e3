"""A CI job bounded by its grant, end to end on the real engine: docs/ci.md's example grant, as written (its
job_key filled in), issued for a job whose steps the policy asks about; the job's steps share its budgets, a
runaway step is stopped with SANDBOX.GRANT_LIMIT where the budget ends, the next step is refused with
GRANT.EXHAUSTED (never asked), and the ledger and the evidence say what each step used."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.domain.grants import GrantRequest
from tests.support.evidence import record_dicts
from tests.support.github_runner import Runner
from tests.support.paths import DOCS
from tests.support.service import Harness, token_of

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
SECTION = (DOCS / "ci.md").read_text(encoding="utf-8").split("## Bounding a job", 1)[1].split("\n## ", 1)[0]
EXAMPLE = re.search(r"```json\n(.*?)```", SECTION, re.S)
PLACEHOLDER = "<the job's ci.job_key>"


def _example(job_key: str) -> GrantRequest:
    assert EXAMPLE is not None and PLACEHOLDER in EXAMPLE.group(1), "docs/ci.md: the section's ```json block"
    return GrantRequest.model_validate(json.loads(EXAMPLE.group(1).replace(PLACEHOLDER, job_key)))


async def test_a_job_bounded_by_its_grant_is_stopped_with_a_code(ci_service: Harness, tmp_path: Path) -> None:
    work = tmp_path / "workspaces" / "team-a" / "runner-1"
    work.mkdir(parents=True)
    # a feature branch: no rule allows its steps (CI_POLICY allows main only), so each is asked
    runner = Runner(
        url=ci_service.url,
        token=token_of("agent-a"),
        work=work,
        name="runner-1",
        context={"GITHUB_REF": "refs/heads/feature"},
    )
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    runner.own_work()
    assert runner.state is not None
    admin = ci_service.client("admin")
    job = await admin.get_ci_job(runner.state["job"])
    grant = await admin.create_grant(_example(job.ci.job_key))
    assert grant.on_exhausted == "refuse" and grant.conditions.ci is not None

    # (printf, sleep: on no allowlist of CI_POLICY's: asked, so the grant answers)
    first = await runner.invoke(runner.script_step("printf 'first step\\n'\n"))
    assert first.exit_code == 0 and "first step" in first.stdout, first

    runaway = await runner.invoke(runner.script_step("printf 'running away\\n'\nsleep 600\n"))
    assert runaway.exit_code != 0 and "running away" in runaway.stdout, runaway
    assert "SANDBOX.GRANT_LIMIT" in runaway.stderr and grant.id in runaway.stderr, runaway.stderr

    refused = await runner.invoke(runner.script_step("printf never\n"))
    assert refused.exit_code == 1 and "GRANT.EXHAUSTED" in refused.stderr, refused
    assert refused.stdout == ""  # not one line of it ran

    after = await admin.get_grant(grant.id)
    assert after.state == "exhausted" and after.remaining.wall_seconds == 0, after
    assert after.used.executions == 2 and 7.9 <= after.used.wall_seconds <= 8.0, after
    ledger = (await admin.grant_charges(grant.id)).items
    assert [c.kind for c in ledger] == ["settled", "settled"]
    assert sum(c.charged.wall_seconds for c in ledger) == pytest.approx(after.used.wall_seconds)

    evidence = ci_service.config.parent / "evidence.jsonl"
    # the grant answered all three asks: two yes (each charged), then its final no
    assert _answers_of(evidence, grant.id) == ["approved", "approved", "denied"]
    charged = record_dicts(evidence, event="grant_charged")
    assert [c["execution_id"] for c in charged] == [c.execution_id for c in ledger]
    [refusal] = [r for r in record_dicts(evidence, event="run_failed") if r.get("error_code") == "GRANT.EXHAUSTED"]
    assert refusal["status"] == "refused"
    [stopped] = [
        r for r in record_dicts(evidence, event="execution_finished") if r["execution_id"] == ledger[1].execution_id
    ]
    assert stopped["error_code"] == "SANDBOX.GRANT_LIMIT", stopped
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
    closed = await admin.get_ci_job(job.job_id)
    assert closed.state == "closed" and len(closed.steps) == 2


def _answers_of(path: Path, grant_id: str) -> list[str]:
    return [r["decision"] for r in record_dicts(path, event="approval_decided") if r["approver"] == f"grant:{grant_id}"]
