"""The evidence links a CI job, on the real engine through the service: the job's open and close records (who,
tenant, CI context, workspace, profile and image; its steps and how each ended, a refused one, how the job
ended), every step's records naming the job (data.ci.controller_job beside its job_key), never a secret; and no
request names a job itself."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.domain.errors import InputInvalid, PolicyDenied
from orchestrator.evidence import verify
from tests.support.evidence import record_dicts
from tests.support.service import Harness

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
CONTEXT: dict[str, Any] = {
    "provider": "gitlab",
    "repository": "org/app",
    "workflow": "pipeline",
    "job": "build",
    "job_id": "7001",
    "run_id": "9001",
    "ref": "refs/heads/main",
    "event": "push",
    "actor": "octocat",
}
SECRET = "s3cr3t-value-never-recorded"


async def test_a_jobs_open_close_and_steps_are_linked_in_the_evidence(ci_service: Harness) -> None:
    agent = ci_service.client("agent-a")
    job = await agent.open_ci_job({"ci": CONTEXT, "image": IMAGE})
    ok = await agent.run_ci_step(
        job.job_id, {"step": "build_script", "argv": ["sh", "-c", "echo built"], "env": {"TOKEN": SECRET}}, wait=60
    )
    failing = await agent.run_ci_step(job.job_id, {"step": "step_script", "argv": ["sh", "-c", "exit 3"]}, wait=60)
    assert (ok.state.value, failing.state.value) == ("succeeded", "failed")
    with pytest.raises(PolicyDenied):  # the denylist: refused before it runs, on the record
        await agent.run_ci_step(job.job_id, {"step": "after_script", "argv": ["sh", "-c", "sudo id"]})
    closed = await agent.close_ci_job(job.job_id)
    assert closed.steps == [ok.execution_id, failing.execution_id]

    evidence = ci_service.config.parent / "evidence.jsonl"
    assert verify(evidence).ok
    [opened] = record_dicts(evidence, execution_id=job.job_id, event="ci_job_opened")
    assert (opened["tenant"], opened["subject"], opened["reason"]) == ("team-a", "agent-a", "opened by api:agent-a")
    assert opened["data"]["ci"] == {**CONTEXT, "job_key": job.ci.job_key}
    assert opened["data"]["profile"] == "ci" and opened["data"]["image"] == IMAGE
    assert opened["data"]["workspace"] == job.workspace and opened["data"]["workspace_created"] is True

    [ended] = record_dicts(evidence, execution_id=job.job_id, event="ci_job_closed")
    assert ended["status"] == "closed" and ended["reason"] == "closed by api:agent-a"
    assert ended["data"]["steps"] == [
        {"execution_id": ok.execution_id, "state": "succeeded", "exit_code": 0},
        {"execution_id": failing.execution_id, "state": "failed", "exit_code": 3},
    ]
    [refused] = ended["data"]["refused"]
    assert refused["error_code"] == "POLICY.DENIED"
    assert ended["data"]["workspace_removed"] is True and ended["data"]["cancelled"] == []

    # every step's records name the job: its begin record (a run), its refusal (one that never ran)
    for execution_id in (ok.execution_id, failing.execution_id):
        [started] = record_dicts(evidence, execution_id=execution_id, event="execution_started")
        assert started["data"]["ci"]["controller_job"] == job.job_id
        assert started["data"]["ci"]["job_key"] == job.ci.job_key
    [received] = record_dicts(evidence, execution_id=refused["execution_id"], event="request_received")
    assert received["data"]["sanitized"]["context"]["ci"]["controller_job"] == job.job_id
    assert SECRET not in evidence.read_text()


async def test_no_request_names_a_controller_job_itself(ci_service: Harness) -> None:
    agent = ci_service.client("agent-a")
    job = await agent.open_ci_job({"ci": CONTEXT, "image": IMAGE})
    forged = {**CONTEXT, "controller_job": job.job_id}
    with pytest.raises(InputInvalid) as direct:
        await agent.submit({"tool": "shell_exec", "argv": ["true"], "ci": forged})
    assert direct.value.details["fields"] == ["ci.controller_job"]
    with pytest.raises(InputInvalid) as opened:
        await agent.open_ci_job({"ci": forged, "image": IMAGE})
    assert opened.value.details["fields"] == ["ci.controller_job"]
    await agent.close_ci_job(job.job_id)
