"""A controller restarted mid-job continues the job, on the real engine: the open job is in the service's state
store, so after the restart the job is there (its steps so far), its next step runs in the same workspace, a
step that was running when the controller stopped ended with it (cancelled, its sandbox removed), and the
cleanup removes the workspace; the job's close record names every step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.domain.errors import NotFound
from orchestrator.domain.wire import ExecutionState
from orchestrator.pipeline.this_process import owner_label
from tests.ci.conftest import CI_POLICY
from tests.support.engine import list_managed
from tests.support.evidence import record_dicts
from tests.support.service import Harness, start_service, write_config

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
CONTEXT: dict[str, Any] = {
    "provider": "gitlab",
    "repository": "org/app",
    "job": "build",
    "job_id": "7002",
    "run_id": "9002",
    "ref": "refs/heads/main",
}


async def test_a_restarted_controller_continues_the_job(tmp_path: Path, engine: Any) -> None:
    config = write_config(tmp_path, **json.loads(json.dumps(CI_POLICY)))
    first: Harness | None = await start_service(config)
    second: Harness | None = None
    try:
        agent = first.client("agent-a")
        job = await agent.open_ci_job({"ci": CONTEXT, "image": IMAGE})
        workspace = tmp_path / "workspaces" / "team-a" / job.workspace
        made = await agent.run_ci_step(
            job.job_id, {"step": "get_sources", "argv": ["sh", "-c", "echo kept > f"]}, wait=60
        )
        assert made.state is ExecutionState.SUCCEEDED, made
        running = await agent.run_ci_step(job.job_id, {"step": "step_script", "argv": ["sh", "-c", "sleep 300"]})
        assert not running.state.final, running
        await first.stop()  # the controller stops mid-job, a step running
        first = None

        second = await start_service(config)
        again = second.client("agent-a")
        resumed = await again.get_ci_job(job.job_id)
        assert resumed.state == "open" and resumed.steps == [made.execution_id, running.execution_id]
        stopped = await again.get(running.execution_id)
        assert stopped.state is ExecutionState.CANCELLED, stopped  # it ended with the controller that ran it
        assert workspace.is_dir() and (workspace / "f").read_text() == "kept\n"

        after = await again.run_ci_step(job.job_id, {"step": "build_script", "argv": ["sh", "-c", "cat f"]}, wait=60)
        assert after.state is ExecutionState.SUCCEEDED and after.result is not None, after
        assert after.result.stdout == "kept\n"

        closed = await again.close_ci_job(job.job_id)
        assert closed.state == "closed" and closed.steps == [
            made.execution_id,
            running.execution_id,
            after.execution_id,
        ]
        assert not workspace.exists()
        assert not [s for s in list_managed() if s.owner == owner_label()]

        [record] = record_dicts(tmp_path / "evidence.jsonl", execution_id=job.job_id, event="ci_job_closed")
        assert [(s["execution_id"], s["state"]) for s in record["data"]["steps"]] == [
            (made.execution_id, "succeeded"),
            (running.execution_id, "cancelled"),
            (after.execution_id, "succeeded"),
        ]
    finally:
        for harness in (first, second):
            if harness is not None:
                await harness.stop()


async def test_a_job_closed_before_the_restart_stays_closed(tmp_path: Path, engine: Any) -> None:
    config = write_config(tmp_path, **json.loads(json.dumps(CI_POLICY)))
    first = await start_service(config)
    try:
        agent = first.client("agent-a")
        job = await agent.open_ci_job({"ci": CONTEXT, "image": IMAGE})
        await agent.close_ci_job(job.job_id)
    finally:
        await first.stop()
    second = await start_service(config)
    try:
        with pytest.raises(NotFound):
            await second.client("agent-a").run_ci_step(job.job_id, {"argv": ["true"]})
    finally:
        await second.stop()
