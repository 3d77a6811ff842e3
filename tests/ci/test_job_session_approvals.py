""" "Approve for the session" in a CI job covers the rest of that job and nothing else: a runner's jobs share its
workspace (the session of their steps), and a later job there — a main deploy after a pull request's job, say —
asks again. On the real service and engine, through the jobs API."""

from __future__ import annotations

import asyncio

import pytest

from orchestrator.client import AsyncClient
from orchestrator.domain.wire import ExecutionView
from tests.support.service import Harness

pytestmark = pytest.mark.integration

# a feature branch: CI_POLICY has no rule for it, so every step is asked
CI = {"provider": "github", "repository": "org/app", "job": "deploy", "run_id": "501", "ref": "refs/heads/feature"}
STEP = {"argv": ["sh", "-c", "echo deployed"], "step": "deploy"}


async def _settled(client: AsyncClient, execution_id: str) -> ExecutionView:
    for _ in range(300):
        view = await client.get(execution_id)
        if view.state.final:
            return view
        await asyncio.sleep(0.1)
    raise AssertionError(f"{execution_id} never ended")


async def _pending(client: AsyncClient, execution_id: str) -> str:
    for _ in range(100):
        asks = [a for a in (await client.approvals()).items if a.execution_id == execution_id]
        if asks:
            return asks[0].approval_id
        await asyncio.sleep(0.1)
    raise AssertionError(f"{execution_id} was never asked about")


async def test_a_session_approval_of_one_job_does_not_approve_the_next_jobs_step(ci_service: Harness) -> None:
    agent, approver = ci_service.client("agent-a"), ci_service.client("approver-a")
    first = await agent.open_ci_job({"ci": CI, "workspace": "runner-1"})
    asked = await agent.run_ci_step(first.job_id, STEP, wait=0)
    await approver.approve(await _pending(approver, asked.execution_id), "this job only", for_session=True)
    assert (await _settled(agent, asked.execution_id)).state.value == "succeeded"
    # the rest of the job: approved for its session, not asked again
    again = await agent.run_ci_step(first.job_id, STEP, wait=60)
    assert again.state.value == "succeeded", again
    await agent.close_ci_job(first.job_id)

    # the runner's next job, on the same workspace (another run): the same step is asked about again
    second = await agent.open_ci_job({"ci": {**CI, "run_id": "502"}, "workspace": "runner-1"})
    step = await agent.run_ci_step(second.job_id, STEP, wait=0)
    approval_id = await _pending(approver, step.execution_id)
    assert (await agent.get(step.execution_id)).state.value == "pending_approval"
    await approver.deny(approval_id, "not this one")
    assert (await _settled(agent, step.execution_id)).state.value != "succeeded"

    # a job its runner never cleaned up (killed), taken over by the next job there: that one asks again too
    third = await agent.open_ci_job({"ci": {**CI, "run_id": "503"}, "workspace": "runner-2"})
    asked = await agent.run_ci_step(third.job_id, STEP, wait=0)
    await approver.approve(await _pending(approver, asked.execution_id), "this job only", for_session=True)
    assert (await _settled(agent, asked.execution_id)).state.value == "succeeded"
    fourth = await agent.open_ci_job({"ci": {**CI, "run_id": "504"}, "workspace": "runner-2"})  # takes it over
    step = await agent.run_ci_step(fourth.job_id, STEP, wait=0)
    await approver.deny(await _pending(approver, step.execution_id), "not this one")
    for job in (second, fourth):
        await agent.close_ci_job(job.job_id)
