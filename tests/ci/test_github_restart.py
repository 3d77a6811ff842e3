"""A controller restarted in the middle of a GitHub job takes the job's next step: the job is in its store, and what
the steps need of prepare_job's input (the path map, the job container's environment) comes back in the state the
runner hands to every command. A state that names another tenant's job, or maps a runner path outside the job's
workspace, is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.ci.conftest import CI_POLICY
from tests.support.github_runner import Runner
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
        forged = {**runner.state, "paths": [["/__w", "/etc"]]}
        stranger = Runner(url=second.url, token=token_of("agent-a"), work=work, name="runner-1", state=forged)
        refused = await stranger.invoke(stranger.script_step("echo hi"))
        assert refused.exit_code == 1 and "INPUT.INVALID" in refused.stderr and "/etc" in refused.stderr, refused
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
