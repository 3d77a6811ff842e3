"""The GitHub Actions container hook, end to end: the hook file the runner runs (node, no package), the
controller answering the protocol, every step one governed execution in a fresh sandbox on the real engine."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from orchestrator.domain.wire import ExecutionState
from orchestrator.pipeline.this_process import owner_label
from tests.support.engine import list_managed
from tests.support.evidence import record_dicts
from tests.support.github_runner import Runner
from tests.support.service import Harness, token_of

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).with_name("github_examples")
IMAGE = "sandbox-orchestrator/default:latest"


def _runner(h: Harness, tmp_path: Path, name: str = "runner-1") -> Runner:
    work = tmp_path / "workspaces" / "team-a" / name
    work.mkdir(parents=True)
    return Runner(url=h.url, token=token_of("agent-a"), work=work, name=name)


async def test_the_examples_prepare_job_is_refused_for_what_no_sandbox_gets(
    ci_service: Harness, tmp_path: Path
) -> None:
    runner = _runner(ci_service, tmp_path)
    payload = json.loads((EXAMPLES / "prepare-job.json").read_text())
    run = await runner.invoke(payload)
    assert run.exit_code == 1, run
    assert "CI.UNSUPPORTED" in run.stderr and "services" in run.stderr, run.stderr
    assert run.response is None


async def test_a_whole_job_runs_each_step_in_a_sandbox(ci_service: Harness, tmp_path: Path) -> None:
    runner = _runner(ci_service, tmp_path)
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    assert prepared.response is not None and prepared.response["isAlpine"] is False
    assert "engine's socket" in prepared.stderr
    runner.own_work()

    first = await runner.invoke(runner.script_step('echo "hello from $PWD"; echo built > out.txt; echo $HOME'))
    assert first.exit_code == 0, first.stderr
    assert "hello from /__w/app/app" in first.stdout and "/__w/_temp/_github_home" in first.stdout
    assert (runner.work / "app" / "app" / "out.txt").read_text() == "built\n"

    failing = await runner.invoke(runner.script_step("echo before; exit 3"))
    assert failing.exit_code == 3 and "before" in failing.stdout, failing

    contained = await runner.invoke(runner.container_step(IMAGE, "cat", ["/__w/app/app/out.txt"]))
    assert contained.exit_code == 0 and contained.stdout.endswith("built\n"), contained

    cleaned = await runner.invoke(runner.cleanup_job())
    assert cleaned.exit_code == 0, cleaned.stderr
    assert runner.work.is_dir()  # the runner's own work directory: the job did not make it


async def test_a_denied_step_fails_with_its_code_and_nothing_runs(ci_service: Harness, tmp_path: Path) -> None:
    runner = _runner(ci_service, tmp_path)
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    denied = await runner.invoke(runner.script_step("echo fine\nsudo touch /marker\n"))
    assert denied.exit_code == 1 and "POLICY.DENIED" in denied.stderr and "sudo" in denied.stderr, denied
    assert denied.stdout == ""  # not one line of it ran
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0


async def test_an_image_the_caps_do_not_name_is_refused_at_prepare(ci_service: Harness, tmp_path: Path) -> None:
    runner = _runner(ci_service, tmp_path)
    run = await runner.invoke(runner.prepare_job("node:22"))
    assert run.exit_code == 1 and "POLICY.DENIED" in run.stderr and "node:22" in run.stderr, run
    assert run.response is None


async def test_a_timed_out_step_is_cancelled_and_leaves_no_sandbox(ci_service: Harness, tmp_path: Path) -> None:
    runner = _runner(ci_service, tmp_path)
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    slow = await runner.invoke(runner.script_step("echo started\nsleep 120\n"), timeout_s=8, grace_s=10)
    assert slow.exit_code == 130 and "cancelled" in slow.stderr, slow
    agent = ci_service.client("agent-a")
    last = (await agent.list()).items[0]
    for _ in range(100):
        if last.state.final:
            break
        await asyncio.sleep(0.2)
        last = await agent.get(last.execution_id)
    assert last.state is ExecutionState.CANCELLED, last
    assert not [s for s in list_managed() if s.owner == owner_label()]
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0


async def test_a_prepare_job_that_fails_once_the_job_is_open_leaves_it_closed(
    ci_service: Harness, tmp_path: Path
) -> None:
    """Not only a CI.UNSUPPORTED refusal: whatever fails once prepare_job opened the job (here more runner paths
    than the state a job hands back holds: a state that does not validate) closes it before the error is
    answered; nothing of it stays open for its expiry to find."""
    runner = _runner(ci_service, tmp_path, "runner-many")
    payload = runner.prepare_job(IMAGE)
    many = [
        {"sourceVolumePath": f"{runner.work}/m{i}", "targetVolumePath": f"/m{i}", "readOnly": False} for i in range(70)
    ]
    payload["args"]["container"]["systemMountVolumes"] += many
    failed = await runner.invoke(payload)
    assert failed.exit_code == 1 and failed.response is None, failed
    evidence = Path(yaml.safe_load(ci_service.config.read_text())["evidence"]["path"])
    [opened] = record_dicts(evidence, event="ci_job_opened")
    [closed] = record_dicts(evidence, execution_id=opened["execution_id"], event="ci_job_closed")
    assert closed["status"] == "closed", closed
    assert (await ci_service.client("agent-a").get_ci_job(opened["execution_id"])).state == "closed"
    again = await runner.invoke(runner.prepare_job(IMAGE))  # the runner's next try opens a job of its own
    assert again.exit_code == 0, again.stderr
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
