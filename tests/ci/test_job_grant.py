"""A CI job bounded by its grant, end to end on the real engine: docs/ci.md's example grant, as written (its
job_key filled in), issued for a job whose steps the policy allows (CI_POLICY: org/* on main); the job's steps
share its budgets, a runaway step is stopped with SANDBOX.GRANT_LIMIT where the budget ends, the next step is
refused with GRANT.EXHAUSTED, and the ledger and the evidence say what each step used. And a bound approves
nothing: a step of a bounded job that the policy asks about waits for a person, and is charged once approved."""

from __future__ import annotations

import asyncio
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


async def _job(ci_service: Harness, tmp_path: Path, ref: str) -> tuple[Runner, str, str]:
    """A job opened by a runner on ``ref``, and the example grant issued for it: the runner, the job, the grant."""
    work = tmp_path / "workspaces" / "team-a" / "runner-1"
    work.mkdir(parents=True)
    runner = Runner(
        url=ci_service.url, token=token_of("agent-a"), work=work, name="runner-1", context={"GITHUB_REF": ref}
    )
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    runner.own_work()
    assert runner.state is not None
    admin = ci_service.client("admin")
    job = await admin.get_ci_job(runner.state["job"])
    grant = await admin.create_grant(_example(job.ci.job_key))
    assert grant.on_exhausted == "refuse" and grant.conditions.ci is not None
    return runner, job.job_id, grant.id


async def test_a_job_of_allowed_steps_is_bounded_and_stopped_with_a_code(ci_service: Harness, tmp_path: Path) -> None:
    # main: CI_POLICY's ci-main rule allows every step outright; nobody is asked, the bound is charged
    runner, job_id, grant_id = await _job(ci_service, tmp_path, "refs/heads/main")
    admin = ci_service.client("admin")

    first = await runner.invoke(runner.script_step("printf 'first step\\n'\n"))
    assert first.exit_code == 0 and "first step" in first.stdout, first

    runaway = await runner.invoke(runner.script_step("printf 'running away\\n'\nsleep 600\n"))
    assert runaway.exit_code != 0 and "running away" in runaway.stdout, runaway
    assert "SANDBOX.GRANT_LIMIT" in runaway.stderr and grant_id in runaway.stderr, runaway.stderr

    refused = await runner.invoke(runner.script_step("printf never\n"))
    assert refused.exit_code == 1 and "GRANT.EXHAUSTED" in refused.stderr, refused
    assert refused.stdout == ""  # not one line of it ran

    after = await admin.get_grant(grant_id)
    assert after.state == "exhausted" and after.remaining.wall_seconds == 0, after
    assert after.used.executions == 2 and 7.9 <= after.used.wall_seconds <= 8.0, after
    ledger = (await admin.grant_charges(grant_id)).items
    assert [c.kind for c in ledger] == ["settled", "settled"]
    assert sum(c.charged.wall_seconds for c in ledger) == pytest.approx(after.used.wall_seconds)

    evidence = ci_service.config.parent / "evidence.jsonl"
    assert record_dicts(evidence, event="approval_decided") == []  # allowed: nothing asked, nothing approved
    charged = record_dicts(evidence, event="grant_charged")
    assert [c["execution_id"] for c in charged] == [c.execution_id for c in ledger]
    [refusal] = [r for r in record_dicts(evidence, event="run_failed") if r.get("error_code") == "GRANT.EXHAUSTED"]
    assert refusal["status"] == "refused"
    [stopped] = [
        r for r in record_dicts(evidence, event="execution_finished") if r["execution_id"] == ledger[1].execution_id
    ]
    assert stopped["error_code"] == "SANDBOX.GRANT_LIMIT", stopped
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
    closed = await admin.get_ci_job(job_id)
    assert closed.state == "closed" and len(closed.steps) == 2


async def test_an_ask_in_a_bounded_job_waits_for_a_person(ci_service: Harness, tmp_path: Path) -> None:
    # a feature branch: no rule allows its steps, so each is asked; the bound has room, and answers none
    runner, _, grant_id = await _job(ci_service, tmp_path, "refs/heads/feature")
    step = asyncio.ensure_future(runner.invoke(runner.script_step("printf 'reviewed step\\n'\n")))
    approver = ci_service.client("approver-a")
    pending = []
    for _ in range(200):
        pending = (await approver.approvals()).items
        if pending or step.done():
            break
        await asyncio.sleep(0.1)
    assert not step.done(), step.result()  # never approved (nor refused) by the bound
    assert len(pending) == 1 and pending[0].ci is not None and pending[0].ci.ref == "refs/heads/feature"
    await approver.approve(pending[0].approval_id, "reviewed")
    ran = await step
    assert ran.exit_code == 0 and "reviewed step" in ran.stdout, ran

    admin = ci_service.client("admin")
    after = await admin.get_grant(grant_id)
    assert after.used.executions == 1 and after.reserved.executions == 0, after  # charged once approved
    [charge] = (await admin.grant_charges(grant_id)).items
    evidence = ci_service.config.parent / "evidence.jsonl"
    [decided] = [
        r for r in record_dicts(evidence, event="approval_decided") if r["execution_id"] == charge.execution_id
    ]
    assert decided["decision"] == "approved" and decided["approver"] != f"grant:{grant_id}", decided
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
