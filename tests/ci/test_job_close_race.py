"""A step still being submitted when its job closes — here an ask waiting for its approver while the runner's
request waits for the step (``wait``) — is one of the job's steps: the close cancels it (it never runs in a
workspace removed or handed to the next job), its close record names it, the submission answers that the job
was closed, and the job is never idle meanwhile. On the real service and engine, through the jobs API."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.api.keys import CI_JOBS
from orchestrator.ci.jobs import CiJobs
from orchestrator.domain.errors import ExecutionNotRunning
from orchestrator.evidence import iter_records
from tests.support.service import Harness

pytestmark = pytest.mark.integration

# a feature branch: CI_POLICY has no rule for it, so the step waits for an approver
CI = {"provider": "github", "repository": "org/app", "job": "build", "run_id": "601", "ref": "refs/heads/feature"}


async def test_a_step_submitted_while_its_job_closes_is_cancelled_with_it(ci_service: Harness, tmp_path: Path) -> None:
    agent, approver = ci_service.client("agent-a"), ci_service.client("approver-a")
    job = await agent.open_ci_job({"ci": CI})
    submitted = asyncio.ensure_future(
        agent.run_ci_step(job.job_id, {"argv": ["sh", "-c", "echo ran > ran.txt"], "step": "asked"}, wait=60)
    )
    pending = []
    for _ in range(100):
        pending = (await approver.approvals()).items
        if pending:
            break
        await asyncio.sleep(0.1)
    [ask] = pending
    assert not submitted.done()  # the runner's request still waits for the step

    jobs: CiJobs = ci_service.runner.app[CI_JOBS]
    assert await jobs.expire_idle(datetime.now(UTC) + timedelta(days=2)) == []  # a step under way: not idle

    closed = await agent.close_ci_job(job.job_id)
    assert closed.state == "closed" and closed.steps == [ask.execution_id], closed
    with pytest.raises(ExecutionNotRunning, match="closed while this step was submitted"):
        await submitted
    step = await agent.get(ask.execution_id)
    assert step.state.value == "cancelled", step
    assert ask.execution_id not in [a.execution_id for a in (await approver.approvals()).items]
    assert not (tmp_path / "workspaces" / "team-a" / job.workspace).exists()

    [record] = [r for r in iter_records(tmp_path / "evidence.jsonl") if r.event == "ci_job_closed"]
    assert record.data["cancelled"] == [ask.execution_id]
    assert [(s["execution_id"], s["state"]) for s in record.data["steps"]] == [(ask.execution_id, "cancelled")]
