"""The hooks repository's own examples (tests/ci/github_examples, copied unchanged), replayed as the runner
invokes the hook: the JSON on stdin with the response file the runner made and the state prepare_job answered
(the runner hands that back on every later command), the job's variables in the environment.

prepare-job.json asks for what no sandbox is given (test_github_hook.py); so the job is prepared the way the
runner builds that input for a job container of our images, and the two step examples are then replayed as
they are: run-script-step.json runs (`bash -e example-script.sh` in /__w/repo/repo, NODE_ENV set, PATH
prepended), run-container-step.json is refused for what it asks that no sandbox gets."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.ci.conftest import CI_POLICY
from tests.support.github_runner import Runner
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).with_name("github_examples")
IMAGE = "sandbox-orchestrator/default:latest"


@pytest.fixture
async def service(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    """CI_POLICY, and what the example's prependPath needs: a PATH set by the runner changes which programs run,
    which the gate cannot see; here org/* on main is trusted with that (opaque: true, on CI context)."""
    policy = json.loads(json.dumps(CI_POLICY))
    opaque = {"name": "ci-main-path", "action": "allow", "complex": True, "opaque": True, "risk_at_most": "high",
              "ci": {"repository": "org/*", "ref": "refs/heads/main"}}  # fmt: skip
    policy["safety"]["rules"].insert(0, opaque)
    h = await start_service(write_config(tmp_path, **policy))
    try:
        yield h
    finally:
        await h.stop()


def _example(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((EXAMPLES / name).read_text())
    return payload


async def test_the_step_examples_replayed_in_a_prepared_job(service: Harness, tmp_path: Path) -> None:
    work = tmp_path / "workspaces" / "team-a" / "runner-1"
    work.mkdir(parents=True)
    runner = Runner(url=service.url, token=token_of("agent-a"), work=work, name="runner-1")
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    assert runner.state is not None  # what the runner hands back from now on, in place of the example's
    checkout = work / "repo" / "repo"  # the example's workingDirectory, /__w/repo/repo
    checkout.mkdir(parents=True)
    shutil.copy(EXAMPLES / "example-script.sh", checkout / "example-script.sh")
    runner.own_work()

    script = await runner.invoke(_example("run-script-step.json"))
    assert script.exit_code == 0, script
    assert script.stdout.splitlines()[-1] == "Hello World", script.stdout

    container = await runner.invoke(_example("run-container-step.json"))
    assert container.exit_code == 1 and "CI.UNSUPPORTED" in container.stderr, container
    for refused in ("args.createOptions ('--cpus 1'", "args.userMountVolumes", "args.portMappings"):
        assert refused in container.stderr, container.stderr
    assert "Hello World" not in container.stdout  # nothing of it ran

    cleaned = await runner.invoke({"command": "cleanup_job", "responseFile": None, "args": {}, "state": {}})
    assert cleaned.exit_code == 0, cleaned.stderr
    page = await service.client("agent-a").list(limit=10)
    assert [v.state.value for v in page.items] == ["succeeded"]  # the one step that ran, and no other
    (ran,) = page.items
    # the runner's PATH and the example's script in one wrapper the controller wrote (and the gate read)
    assert ran.request["argv"][-1] == ran.request["script"]["path"], ran.request
    assert ran.request["argv"][-1].startswith("/__w/_temp/_sandbox/") and ran.request["cwd"] == "repo/repo"
    assert ran.request["env_keys"] == ["NODE_ENV"]
