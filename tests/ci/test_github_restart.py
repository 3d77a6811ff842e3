"""A controller restarted in the middle of a GitHub job takes the job's next step: the job is in its store, and what
the steps need of prepare_job's input (the path map, the job container's environment) comes back in the state the
runner hands to every command, signed by the controller. A state that names another tenant's job, or that another
runner of the tenant changed (its paths, its environment: the signature no longer matches), is refused; a job whose
steps have the runner's externals at /__e continues with them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.pipeline import externals
from tests.ci.conftest import CI_POLICY
from tests.ci.test_github_js_action import ACTION, JS_POLICY
from tests.support.github_runner import Runner
from tests.support.runner_externals import NODE_VERSION, runner_externals
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"


async def test_the_hook_continues_a_job_after_a_restart(tmp_path: Path, engine: Any) -> None:
    config = write_config(tmp_path, **json.loads(json.dumps(CI_POLICY)))
    first: Harness | None = await start_service(config)
    second: Harness | None = None
    try:
        work = tmp_path / "workspaces" / "team-a" / "runner-1"
        work.mkdir(parents=True)
        runner = Runner(url=first.url, token=token_of("agent-a"), work=work, name="runner-1")
        prepared = await runner.invoke(
            runner.prepare_job(IMAGE, environmentVariables={"HOME": "/github/home", "LEVEL": "3"})
        )
        assert prepared.exit_code == 0, prepared.stderr
        runner.own_work()
        before = await runner.invoke(runner.script_step('echo "$LEVEL" > level.txt; echo $HOME/x'))
        assert before.exit_code == 0, before
        await first.stop()
        first = None

        second = await start_service(config)
        runner.url = second.url
        assert runner.state is not None  # checked before the job's facts are kept again
        assert runner.state["mac"]
        # another runner of the tenant hands the restarted controller job A's state with its own paths or
        # environment (the mac as prepare_job gave it): refused, and nothing of it kept for runner A's steps
        for forged in (
            {**runner.state, "paths": [["/__w", "/etc"]]},
            {**runner.state, "env": {**runner.state["env"], "LEVEL": "9", "BASH_ENV": "/__w/evil.sh"}},
            {**runner.state, "missing": []},
            {key: value for key, value in runner.state.items() if key != "mac"},
        ):
            stranger = Runner(url=second.url, token=token_of("agent-a"), work=work, name="runner-2", state=forged)
            refused = await stranger.invoke(stranger.script_step("echo hi"))
            assert refused.exit_code == 1 and "INPUT.INVALID" in refused.stderr, refused
            assert "the state was not made by this controller" in refused.stderr, refused.stderr
        other = Runner(url=second.url, token=token_of("agent-b"), work=work, name="runner-1", state=runner.state)
        unseen = await other.invoke(other.script_step("echo hi"))
        assert unseen.exit_code == 1 and "NOT_FOUND" in unseen.stderr, unseen

        after = await runner.invoke(runner.script_step('cat level.txt; echo "$LEVEL"; echo $HOME/x'))
        assert after.exit_code == 0, after.stderr
        # the file step 1 wrote, the job container's environment, its HOME (/github/home) mapped as before
        assert (
            after.stdout.split()[-3:]
            == ["3", "3", "/__w/_temp/_github_home/x"]
            == [*after.stdout.split()[-3:-1], before.stdout.split()[-1]]
        )

        cleaned = await runner.invoke(runner.cleanup_job())
        assert cleaned.exit_code == 0 and "closed after 2 step(s)" in cleaned.stdout, cleaned
    finally:
        for h in (first, second):
            if h is not None:
                await h.stop()


async def test_a_job_with_the_runners_externals_continues_after_a_restart(tmp_path: Path, engine: Any) -> None:
    """/__e is no path of the state: a restarted controller rebuilds it from ``externals``, the directory beside
    the work directory checked again, and the job's JavaScript action runs on the runner's node."""
    config = write_config(tmp_path, **json.loads(json.dumps(JS_POLICY)))
    first: Harness | None = await start_service(config)
    second: Harness | None = None
    try:
        work = tmp_path / "workspaces" / "team-a" / "runner-js"
        work.mkdir(parents=True)
        shutil.copytree(runner_externals(), externals.location(work), symlinks=True)
        runner = Runner(
            url=first.url,
            token=token_of("agent-a"),
            work=work,
            name="runner-js",
            externals=runner_externals(),
            context={"SANDBOX_EXTERNALS": "1"},
        )
        assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
        assert runner.state is not None and runner.state["externals"] is True
        assert "/__e" not in [runner_path for runner_path, _ in runner.state["paths"]]
        runner.own_work()
        await first.stop()
        first = None

        second = await start_service(config)
        runner.url = second.url
        payload, step_env, output = runner.js_action_step("actions/hello", "v1", ACTION, inputs={"greeting": "again"})
        ran = await runner.invoke(payload, step_env=step_env)
        assert ran.exit_code == 0, ran
        assert f"node {NODE_VERSION} at /__e/node20/bin/node" in ran.stdout and "/__e: EROFS" in ran.stdout, ran
        assert output.read_text() == "greeting=again\n"
        listed = await runner.invoke(runner.script_step("ls /__e/node20/bin/node && echo seen"))
        assert listed.exit_code == 0 and "seen" in listed.stdout, listed
        assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
    finally:
        for h in (first, second):
            if h is not None:
                await h.stop()
