"""A job whose runner never cleaned up (killed; an ephemeral runner never comes back to it) is closed once idle for
``service.limits.ci_job_idle_s``, as its cleanup would close it: the workspace it made removed, its close record
saying why. Never while a step of it runs or waits. The sweep is called here with a later clock, on the real
service and engine."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.keys import CI_JOBS
from orchestrator.ci.jobs import CiJobs
from orchestrator.domain.errors import ExecutionNotRunning
from orchestrator.evidence import iter_records
from tests.ci.conftest import CI_POLICY
from tests.support.service import Harness, start_service, write_config

pytestmark = pytest.mark.integration

IDLE_S = 600.0
CI = {"provider": "gitlab", "repository": "org/app", "job": "build", "run_id": "77", "ref": "refs/heads/main"}


@pytest.fixture
async def service(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    policy = json.loads(json.dumps(CI_POLICY))
    h = await start_service(write_config(tmp_path, service={"limits": {"ci_job_idle_s": IDLE_S}}, **policy))
    try:
        yield h
    finally:
        await h.stop()


def _jobs(h: Harness) -> CiJobs:
    jobs: CiJobs = h.runner.app[CI_JOBS]
    return jobs


async def test_an_idle_job_is_closed_as_its_cleanup_would(service: Harness, tmp_path: Path) -> None:
    client = service.client("agent-a")
    job = await client.open_ci_job({"ci": CI})
    workspace = tmp_path / "workspaces" / "team-a" / job.workspace
    step = await client.run_ci_step(
        job.job_id, {"argv": ["sh", "-c", "echo built > out.txt"], "step": "build"}, wait=60
    )
    assert step.state.value == "succeeded" and (workspace / "out.txt").is_file()
    now = datetime.now(UTC)

    assert await _jobs(service).expire_idle(now + timedelta(seconds=IDLE_S - 60)) == []  # not yet
    assert (await client.get_ci_job(job.job_id)).state == "open"
    assert await _jobs(service).expire_idle(now + timedelta(seconds=IDLE_S + 1)) == [job.job_id]
    closed = await client.get_ci_job(job.job_id)
    assert closed.state == "closed" and not workspace.exists()  # the workspace the job made, removed

    records = [r for r in iter_records(tmp_path / "evidence.jsonl") if r.execution_id == job.job_id]
    assert [r.event for r in records] == ["ci_job_opened", "ci_job_closed"]
    assert records[-1].reason is not None and records[-1].reason.startswith("expired: idle for ")
    assert records[-1].data["steps"] == [{"execution_id": step.execution_id, "state": "succeeded", "exit_code": 0}]
    # its runner, back after all, is told the job takes no more steps
    with pytest.raises(ExecutionNotRunning):
        await client.run_ci_step(job.job_id, {"argv": ["true"]})


async def test_a_job_with_a_step_under_way_is_never_expired(service: Harness, tmp_path: Path) -> None:
    client = service.client("agent-a")
    job = await client.open_ci_job({"ci": CI})
    step = await client.run_ci_step(job.job_id, {"argv": ["sleep", "60"], "step": "long"}, wait=0)
    for _ in range(100):
        if (await client.get(step.execution_id)).state.value == "running":
            break
        await asyncio.sleep(0.1)
    later = datetime.now(UTC) + timedelta(days=2)
    assert await _jobs(service).expire_idle(later) == []
    assert (await client.get_ci_job(job.job_id)).state == "open"
    closed = await client.close_ci_job(job.job_id)  # the runner's own cleanup
    assert closed.state == "closed" and (await client.get(step.execution_id)).state.value == "cancelled"
