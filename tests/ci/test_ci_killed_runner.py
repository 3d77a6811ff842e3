"""A runner that dies leaves no sandbox: the hook SIGKILLed mid-step (its connection drops: the step is cancelled,
its sandbox removed), and a runner that never called cleanup_job (its next job, same RUNNER_NAME and so the same
workspace, takes the workspace over and closes the old job: what still ran of it stopped; the runner's externals,
beside its work directory, the new job's too), each on the real engine, counting this run's sandboxes by their
owner label."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.domain.wire import ExecutionState, ExecutionView
from orchestrator.pipeline import externals
from orchestrator.pipeline.this_process import owner_label
from tests.support.containment import processes_mentioning
from tests.support.engine import list_managed
from tests.support.github_runner import Runner
from tests.support.runner_externals import runner_externals
from tests.support.service import Harness, token_of

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
GONE_WITHIN_S = 30.0


def _runner(h: Harness, tmp_path: Path, name: str, *, with_externals: bool = False) -> Runner:
    work = tmp_path / "workspaces" / "team-a" / name
    work.mkdir(parents=True, exist_ok=True)
    runner = Runner(url=h.url, token=token_of("agent-a"), work=work, name=name)
    if with_externals:  # the deployment's copy beside the work directory (docs/ci.md)
        shutil.copytree(runner_externals(), externals.location(work), symlinks=True, dirs_exist_ok=True)
        runner.context["SANDBOX_EXTERNALS"] = "1"
    return runner


def _ours() -> list[str]:
    return [s.sandbox_id for s in list_managed() if s.owner == owner_label()]


async def _until(what: str, check: Callable[[], bool], timeout_s: float = GONE_WITHIN_S) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not check():
        assert asyncio.get_running_loop().time() < deadline, f"not within {timeout_s:g} s: {what}"
        await asyncio.sleep(0.2)


async def _final(h: Harness, execution_id: str) -> ExecutionView:
    agent = h.client("agent-a")
    view = await agent.get(execution_id)
    deadline = asyncio.get_running_loop().time() + GONE_WITHIN_S
    while not view.state.final:
        assert asyncio.get_running_loop().time() < deadline, view
        await asyncio.sleep(0.2)
        view = await agent.get(execution_id)
    return view


async def test_a_runner_killed_mid_step_leaves_no_sandbox(ci_service: Harness, tmp_path: Path) -> None:
    runner = _runner(ci_service, tmp_path, "runner-killed")
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    marker = f"4{secrets.randbelow(10**6):06d}.5"  # `sleep <marker>`: findable on the host while it runs
    process, payload, _ = await runner.spawn(runner.script_step(f"echo started\nsleep {marker}\n"))
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps(payload).encode() + b"\n")
    await process.stdin.drain()
    process.stdin.close()
    assert await asyncio.wait_for(process.stdout.readline(), 120) == b"started\n"  # the step runs, streaming
    running = _ours()
    assert len(running) == 1, running
    # "started" is printed before the shell has exec'd sleep: on a busy machine that can take a moment
    await _until(f"sleep {marker} running", lambda: bool(processes_mentioning(f"sleep {marker}")), 5.0)

    process.kill()  # the runner dies: SIGKILL, no handler runs, the connection just drops
    assert await process.wait() == -9

    step = (await ci_service.client("agent-a").list()).items[0]
    assert (await _final(ci_service, step.execution_id)).state is ExecutionState.CANCELLED
    await _until("the step's sandbox removed", lambda: not _ours())
    await _until("the step's processes gone", lambda: not processes_mentioning(f"sleep {marker}"))

    # the job itself is still open (the runner may come back): its cleanup closes it, leaving nothing
    assert runner.state is not None
    job = await ci_service.client("agent-a").get_ci_job(runner.state["job"])
    assert job.state == "open" and job.steps == [step.execution_id]
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
    assert not _ours()


async def test_the_next_job_of_a_runner_that_never_cleaned_up_takes_its_workspace_over(
    ci_service: Harness, tmp_path: Path
) -> None:
    dead = _runner(ci_service, tmp_path, "runner-reborn", with_externals=True)
    assert (await dead.invoke(dead.prepare_job(IMAGE))).exit_code == 0
    dead.own_work()
    assert dead.state is not None
    first = dead.state["job"]
    kept = externals.location(dead.work)
    assert Path(externals.mount(dead.work).source) == kept and (kept / "node20" / "bin" / "node").is_file()
    # a step of it still runs when its runner dies (submitted through the jobs API: no hook follows it whose
    # connection could drop)
    agent = ci_service.client("agent-a")
    marker = f"5{secrets.randbelow(10**6):06d}.5"
    left = await agent.run_ci_step(first, {"step": "left-running", "argv": ["sleep", marker]})
    await _until("the orphaned step's sandbox running", lambda: bool(processes_mentioning(f"sleep {marker}")), 120)
    assert len(_ours()) == 1

    # the runner comes back under its name (the same work directory, its externals beside it): its next job's
    # prepare_job takes the workspace over
    reborn = _runner(ci_service, tmp_path, "runner-reborn", with_externals=True)
    prepared = await reborn.invoke(reborn.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    assert reborn.state is not None and reborn.state["job"] != first
    old = await agent.get_ci_job(first)
    assert old.state == "closed", old
    assert (await _final(ci_service, left.execution_id)).state is ExecutionState.CANCELLED
    await _until("the old job's sandbox removed", lambda: not _ours())
    assert not processes_mentioning(f"sleep {marker}")
    assert Path(externals.mount(reborn.work).source) == kept  # the runner's, for each of its jobs

    reborn.own_work()
    step = await reborn.invoke(
        reborn.script_step("cat /__e/node20/include/node/node_version.h > /dev/null; echo on the runners node")
    )
    assert step.exit_code == 0 and "on the runners node" in step.stdout, step.stderr

    # the old job's runner never comes back to clean it up; the new one does: nothing is left but the runner's
    # own work directory and externals
    assert (await reborn.invoke(reborn.cleanup_job())).exit_code == 0
    assert list(kept.parent.iterdir()) == [kept] and (kept / "node20" / "bin" / "node").is_file()
    assert not _ours()


async def test_a_step_whose_runner_never_returns_ends_at_its_deadline_leaving_nothing(
    ci_service: Harness, tmp_path: Path
) -> None:
    """No hook follows it, no next job of its runner comes, nobody closes the job: the step still ends at its
    own deadline, its sandbox removed."""
    runner = _runner(ci_service, tmp_path, "runner-gone")
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    assert runner.state is not None
    marker = f"6{secrets.randbelow(10**6):06d}.5"
    agent = ci_service.client("agent-a")
    orphan = await agent.run_ci_step(
        runner.state["job"], {"step": "orphan", "argv": ["sleep", marker], "timeout_ms": 3000}
    )
    await _until("the orphaned step running", lambda: bool(processes_mentioning(f"sleep {marker}")), 120)
    ended = await _final(ci_service, orphan.execution_id)
    assert ended.state is ExecutionState.FAILED and ended.error is not None, ended
    assert ended.error.code == "SANDBOX.TIMEOUT", ended.error
    await _until("its sandbox removed", lambda: not _ours())
    assert not processes_mentioning(f"sleep {marker}")
    assert (await agent.get_ci_job(runner.state["job"])).state == "open"  # the job waits for a runner, idle
