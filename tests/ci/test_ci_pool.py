"""CI steps from pre-started sandboxes (the config's pool on): a job's first step takes a sandbox the pool began at
prepare_job, every step still runs in a fresh sandbox of its own (served once, nothing of one step's but the
workspace seen by the next), and a job's cleanup leaves no pre-started sandbox of the workspace it removed."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.domain.grants import GrantRequest
from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline.this_process import owner_label
from tests.ci.conftest import CI_POLICY
from tests.support.engine import list_managed
from tests.support.github_runner import Runner
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
CONTEXT = {
    "provider": "github",
    "repository": "org/app",
    "workflow": "build",
    "job": "test",
    "run_id": "7",
    "attempt": 1,
    "ref": "refs/heads/main",
    "event": "push",
}

#: what the sandbox's processes run (the image has no pgrep)
PROCESSES = '"$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " ")"'
#: prints "sleeper seen" when a process `sleep 300` runs in the sandbox
SLEEPER = f'case {PROCESSES} in *"sleep 300"*) echo sleeper seen;; esac\n'
#: the same, looked for up to 5 s: `(sleep 300 &)` returns before its child has exec'd sleep (on a busy machine
#: the child can still be a copy of the shell when it is first looked for)
AWAIT_SLEEPER = (
    f'for i in $(seq 50); do case {PROCESSES} in *"sleep 300"*) echo sleeper seen; break;; esac; sleep 0.1; done\n'
)


async def serve(tmp_path: Path, pool: dict[str, Any]) -> AsyncIterator[Harness]:
    policy = json.loads(json.dumps(CI_POLICY))
    h = await start_service(write_config(tmp_path, pool={"enabled": True, "ttl_s": 60, **pool}, **policy))
    try:
        yield h
    finally:
        await h.stop()  # the service closes: the pool destroys what it holds


@pytest.fixture
async def pooled_service(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    async for h in serve(tmp_path, {"per_key": 1}):
        yield h


#: a job's steps come back to back, each sooner than its sandbox is replaced (a claim never waits for a fill):
#: the ci profile's floor keeps one ready for each of the three steps these tests run
STEPS_FLOOR = 3


@pytest.fixture
async def floor_service(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    floor = {"min_ready": STEPS_FLOOR, "max_ready": STEPS_FLOOR}
    async for h in serve(tmp_path, {"min_ready": 1, "max_ready": 1, "profiles": {"ci": floor}}):
        yield h


def started(evidence: Path) -> list[dict[str, Any]]:
    return [dict(r.data or {}) for r in iter_records(evidence) if r.event == "execution_started"]


async def until(predicate: Any, what: str) -> None:
    for _ in range(200):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(what)


async def test_every_step_of_a_job_takes_a_fresh_pre_started_sandbox(floor_service: Harness, tmp_path: Path) -> None:
    work = tmp_path / "workspaces" / "team-a" / "runner-1"
    work.mkdir(parents=True)
    runner = Runner(url=floor_service.url, token=token_of("agent-a"), work=work, name="runner-1")
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    pool = floor_service.service.orchestrator.pool
    assert pool is not None
    await until(lambda: pool.describe()["ready"] == STEPS_FLOOR, f"prepare_job filled no floor: {pool.describe()}")

    # what a step leaves outside the workspace (a file in /tmp, a process) is not in the next step's sandbox
    script = f"echo mine > /tmp/left; (sleep 300 &)\n{AWAIT_SLEEPER}echo k > kept.txt\n"
    first = await runner.invoke(runner.script_step(script))
    assert first.exit_code == 0 and "sleeper seen" in first.stdout, first
    second = await runner.invoke(runner.script_step(f"test ! -e /tmp/left\n{SLEEPER}cat kept.txt\n"))
    assert second.exit_code == 0 and second.stdout.endswith("k\n") and "seen" not in second.stdout, second
    third = await runner.invoke(runner.script_step("true\n"))
    assert third.exit_code == 0, third.stderr
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0

    evidence = tmp_path / "evidence.jsonl"
    steps = [s for s in started(evidence) if "ci" in s]
    assert len(steps) == 3 and all("pooled" in s for s in steps), steps  # the first one too
    sandboxes = [s["pooled"]["sandbox_id"] for s in steps]
    assert len(set(sandboxes)) == 3
    # from the engine's own records: each of them ran one command and died once
    died = Counter(str(r.data["sandbox_id"]) for r in iter_records(evidence) if r.event == "container_died" and r.data)
    assert all(died[s] == 1 for s in sandboxes), died
    assert verify(evidence).ok


async def test_a_jobs_cleanup_destroys_the_sandboxes_started_for_its_workspace(
    pooled_service: Harness, tmp_path: Path
) -> None:
    agent = pooled_service.client("agent-a")
    job = await agent.open_ci_job({"ci": CONTEXT, "image": IMAGE, "workspace": "job-made"})
    assert job.workspace_created
    path = tmp_path / "workspaces" / "team-a" / "job-made"
    pool = pooled_service.service.orchestrator.pool
    assert pool is not None
    await until(lambda: pool.describe()["ready"] == 1, f"no sandbox started for the job: {pool.describe()}")
    step = await agent.run_ci_step(job.job_id, {"argv": ["true"]}, wait=60)
    assert step.state.value == "succeeded", step
    await until(lambda: pool.describe()["ready"] == 1, f"the step's key was not filled again: {pool.describe()}")

    await agent.close_ci_job(job.job_id)
    assert not path.exists()
    assert pool.describe()["keys"] == 0  # the key of a workspace gone is forgotten
    evidence = tmp_path / "evidence.jsonl"

    def retired() -> list[Any]:
        return [
            r.data
            for r in iter_records(evidence)
            if r.event == "sandbox_discarded" and r.data and r.data["reason"] == "workspace_retired"
        ]

    await until(lambda: len(retired()) == 1, "the ready sandbox was not destroyed at cleanup")
    mine = {s.sandbox_id for s in list_managed() if s.owner == owner_label()}
    assert retired()[0]["sandbox_id"] not in mine


async def test_the_steps_of_a_job_its_grant_bounds_share_one_key(floor_service: Harness, tmp_path: Path) -> None:
    """A grant narrows each step's wall time to what is left of it (another value at each step): the pool's key is
    the profile before that narrowing (the sandbox itself is the same), so every step still takes a pre-started
    sandbox, and the pool holds no key per step."""
    work = tmp_path / "workspaces" / "team-a" / "runner-1"
    work.mkdir(parents=True)
    # a feature branch: no rule of CI_POLICY allows its steps, so each is asked and the grant answers
    runner = Runner(
        url=floor_service.url,
        token=token_of("agent-a"),
        work=work,
        name="runner-1",
        context={"GITHUB_REF": "refs/heads/feature"},
    )
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    assert runner.state is not None
    admin = floor_service.client("admin")
    job = await admin.get_ci_job(runner.state["job"])
    grant = await admin.create_grant(
        GrantRequest.model_validate(
            {
                "tenant": "team-a",
                "conditions": {"ci": {"job_key": job.ci.job_key}},
                "budgets": {"cpu_seconds": 120, "wall_seconds": 60},
                "ttl_s": 600,
                "reason": "one job, its steps narrowed to what is left",
            }
        )
    )
    pool = floor_service.service.orchestrator.pool
    assert pool is not None
    await until(lambda: pool.describe()["ready"] == STEPS_FLOOR, f"prepare_job filled no floor: {pool.describe()}")
    for index in range(3):
        step = await runner.invoke(runner.script_step(f"printf 'step {index}\\n'\n"))
        assert step.exit_code == 0 and f"step {index}" in step.stdout, step
    assert pool.describe()["keys"] == 1, pool.describe()
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0

    evidence = tmp_path / "evidence.jsonl"
    steps = [s for s in started(evidence) if "ci" in s]
    assert len(steps) == 3 and all("pooled" in s for s in steps), steps
    # each narrowed to what was left of the grant: a profile (hash) of its own, yet one key for them all
    narrowed = {
        r.profile_hash for r in iter_records(evidence) if r.event == "execution_started" and "ci" in (r.data or {})
    }
    assert len(narrowed) == 3, narrowed
    assert (await admin.get_grant(grant.id)).used.executions == 3
