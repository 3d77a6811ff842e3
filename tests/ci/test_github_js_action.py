"""JavaScript actions through the GitHub hook, end to end: the runner's externals (node 20 as the runner ships it,
``scripts/ci-externals.sh``), copied by the deployment beside the work directory (``<tenant>/.ci-externals/<name>``,
where no sandbox reaches) and mounted read-only at /__e, the action's program run as the runner runs it
(``/__e/node20/bin/node "/__w/_actions/<owner>/<repo>/<ref>/index.js"``), allowed only by an explicit rule on the
action (an opaque program is never allowed by default). A node a step plants in the work directory is never the
one a later job runs."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.wire import ExecutionState
from orchestrator.pipeline import externals
from orchestrator.pipeline.this_process import owner_label
from tests.ci.conftest import CI_POLICY
from tests.support.engine import list_managed
from tests.support.github_runner import Runner
from tests.support.runner_externals import NODE_VERSION, runner_externals
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "ci.md"


def _docs_policy() -> dict[str, Any]:
    """docs/ci.md's policy for JavaScript actions, as written."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    [block] = [b for b in blocks if b.startswith("# config.yaml: JavaScript actions")]
    loaded: dict[str, Any] = yaml.safe_load(block)
    return loaded


#: the docs' rule for JavaScript actions, and one for run: steps of org/* on main (up to medium risk); nothing
#: else decides: denied (no approval to wait for)
_DOCS = _docs_policy()
JS_POLICY: dict[str, Any] = {
    "safety": {
        **_DOCS["safety"],
        "mode": "ask",
        "default": "deny",
        "allowlist": ["echo", "true", "cat"],
        "denylist": ["sudo"],
        "rules": [
            *_DOCS["safety"]["rules"],
            {
                "name": "org-steps",
                "action": "allow",
                "complex": True,
                "risk_at_most": "medium",
                "ci": {"repository": "org/*", "ref": "refs/heads/main"},
            },
        ],
    },
    "caps": CI_POLICY["caps"],
}

ACTION = """'use strict'
const fs = require('fs')
const path = require('path')
const greeting = process.env.INPUT_GREETING
const into = path.join(process.env.GITHUB_WORKSPACE, 'greeting.txt')
fs.writeFileSync(into, `${greeting} from ${process.env.GITHUB_REPOSITORY}\\n`)
fs.appendFileSync(process.env.GITHUB_OUTPUT, `greeting=${greeting}\\n`)
let planted
try {
  fs.writeFileSync(path.join(path.dirname(process.execPath), 'planted'), 'x')
  planted = 'written'
} catch (err) {
  planted = err.code
}
// (neither the cwd nor true: environment values (GITHUB_WORKSPACE, CI) are redacted from the output)
const inWorkspace = process.cwd() === process.env.GITHUB_WORKSPACE ? 'yes' : 'no'
const node = `node ${process.version} at ${process.execPath}`
console.log(`${node}, in the workspace: ${inWorkspace}; a write into /__e: ${planted}`)
"""


@pytest.fixture
async def js_service(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    h = await start_service(write_config(tmp_path, **json.loads(json.dumps(JS_POLICY))))
    try:
        yield h
    finally:
        await h.stop()


def _runner(h: Harness, tmp_path: Path, name: str = "runner-js") -> Runner:
    """A runner whose deployment copied its externals beside its work directory (docs/ci.md: <service.workspaces>/
    <tenant>/.ci-externals/<name>), with SANDBOX_EXTERNALS=1."""
    work = tmp_path / "workspaces" / "team-a" / name
    work.mkdir(parents=True)
    shipped = runner_externals()
    shutil.copytree(shipped, externals.location(work), symlinks=True)
    return Runner(
        url=h.url,
        token=token_of("agent-a"),
        work=work,
        name=name,
        externals=shipped,
        context={"SANDBOX_EXTERNALS": "1"},
    )


def _no_sandbox_left() -> None:
    assert not [s for s in list_managed() if s.owner == owner_label()]


async def test_a_javascript_action_runs_on_the_runners_node_with_its_externals_read_only(
    js_service: Harness, tmp_path: Path
) -> None:
    runner = _runner(js_service, tmp_path)
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    kept = externals.location(runner.work)
    assert Path(externals.mount(runner.work).source) == kept  # beside the work directory: no sandbox reaches it
    runner.own_work()

    payload, step_env, output = runner.js_action_step("actions/hello", "v1", ACTION, inputs={"greeting": "hello"})
    assert payload["args"]["entryPointArgs"] == ['"/__w/_actions/actions/hello/v1/index.js"']  # as the runner quotes
    ran = await runner.invoke(payload, step_env=step_env)
    assert ran.exit_code == 0, ran
    assert (
        f"node {NODE_VERSION} at /__e/node20/bin/node, in the workspace: yes; a write into /__e: EROFS" in ran.stdout
    ), ran.stdout
    assert (runner.work / "app" / "app" / "greeting.txt").read_text() == "hello from org/app\n"
    assert output.read_text() == "greeting=hello\n"  # what the runner reads back after the step
    assert not (kept / "node20" / "bin" / "planted").exists()

    agent = js_service.client("agent-a")
    step = (await agent.list()).items[0]
    assert step.matched_rule is not None and "trusted-actions" in step.matched_rule, step

    # a run: step sees the same read-only externals where the runner's job container has them
    listed = await runner.invoke(
        runner.script_step("cat /__e/node20/include/node/node_version.h > /dev/null; echo seen")
    )
    assert listed.exit_code == 0 and "seen" in listed.stdout, listed

    cleaned = await runner.invoke(runner.cleanup_job())
    assert cleaned.exit_code == 0, cleaned.stderr
    assert (kept / "node20" / "bin" / "node").is_file()  # the runner's, like its work directory: left as it was
    _no_sandbox_left()


async def test_an_action_no_rule_names_is_denied_and_nothing_runs(js_service: Harness, tmp_path: Path) -> None:
    runner = _runner(js_service, tmp_path)
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    payload, step_env, output = runner.js_action_step("someone/greeter", "v2", ACTION, inputs={"greeting": "hi"})
    denied = await runner.invoke(payload, step_env=step_env)
    assert denied.exit_code == 1 and "POLICY.DENIED" in denied.stderr, denied
    assert denied.stdout == ""
    assert not (runner.work / "app" / "app" / "greeting.txt").exists() and output.read_text() == ""
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
    _no_sandbox_left()


async def test_without_the_externals_a_javascript_action_is_refused(js_service: Harness, tmp_path: Path) -> None:
    """No SANDBOX_EXTERNALS: /__e is on no storage of the job; a step that uses it is refused, never run without."""
    work = tmp_path / "workspaces" / "team-a" / "runner-bare"
    work.mkdir(parents=True)
    runner = Runner(url=js_service.url, token=token_of("agent-a"), work=work, name="runner-bare")
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    payload, step_env, _ = runner.js_action_step("actions/hello", "v1", ACTION, inputs={"greeting": "hello"})
    refused = await runner.invoke(payload, step_env=step_env)
    assert refused.exit_code == 1 and "CI.UNSUPPORTED" in refused.stderr and "SANDBOX_EXTERNALS" in refused.stderr
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
    _no_sandbox_left()


async def test_an_input_whose_name_holds_a_hyphen_reaches_the_action(js_service: Harness, tmp_path: Path) -> None:
    """The runner names an input ``fetch-depth`` INPUT_FETCH-DEPTH (actions/checkout's own inputs are such): no
    shell's variable name, but execve takes it and the action reads it."""
    runner = _runner(js_service, tmp_path)
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    reading = ACTION.replace(
        "const greeting = process.env.INPUT_GREETING", "const greeting = process.env['INPUT_FETCH-DEPTH']"
    )
    payload, step_env, _ = runner.js_action_step("actions/hello", "v1", reading, inputs={"fetch-depth": "1"})
    assert "INPUT_FETCH-DEPTH" in payload["args"]["environmentVariables"]
    ran = await runner.invoke(payload, step_env=step_env)
    assert ran.exit_code == 0, ran
    assert (runner.work / "app" / "app" / "greeting.txt").read_text() == "1 from org/app\n"
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
    _no_sandbox_left()


PLANT = """set -e
mkdir -p /__w/externals/node20/bin
printf '#!/bin/sh\\necho planted node ran\\n' > /__w/externals/node20/bin/node
chmod +x /__w/externals/node20/bin/node
touch /__e/node20/bin/node 2>/dev/null && echo "/__e writable" || echo "/__e read-only"
echo planted
"""


async def test_a_node_a_step_plants_in_the_work_directory_is_never_a_later_jobs(
    js_service: Harness, tmp_path: Path
) -> None:
    """Job N's step writes a node where the old SANDBOX_EXTERNALS took the externals from (the work directory,
    /__w/externals, as the old recipe's ``cp -r`` would have merged into); job N+1 of the same runner runs the
    runner's own node, and the old setting, a directory of the work directory, is refused before any job opens."""
    runner = _runner(js_service, tmp_path, "runner-planted")
    assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
    runner.own_work()
    planted = await runner.invoke(runner.script_step(PLANT))
    assert planted.exit_code == 0 and "planted" in planted.stdout and "/__e read-only" in planted.stdout, planted
    assert (runner.work / "externals" / "node20" / "bin" / "node").is_file()
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0

    old = Runner(
        url=js_service.url,
        token=token_of("agent-a"),
        work=runner.work,
        name=runner.name,
        context={"SANDBOX_EXTERNALS": "externals"},
    )
    refused = await old.invoke(old.prepare_job(IMAGE))
    assert refused.exit_code == 1 and "CI.UNSUPPORTED" in refused.stderr, refused
    assert ".ci-externals/<workspace>" in refused.stderr and "SANDBOX_EXTERNALS=1" in refused.stderr, refused.stderr
    assert len((await js_service.client("agent-a").list()).items) == 1  # job N's step: nothing ran since

    following = _runner_again(js_service, runner)
    assert (await following.invoke(following.prepare_job(IMAGE))).exit_code == 0
    following.own_work()
    payload, step_env, _ = following.js_action_step("actions/hello", "v1", ACTION, inputs={"greeting": "hello"})
    ran = await following.invoke(payload, step_env=step_env)
    assert ran.exit_code == 0, ran
    assert f"node {NODE_VERSION} at /__e/node20/bin/node" in ran.stdout and "planted" not in ran.stdout, ran.stdout
    assert (await following.invoke(following.cleanup_job())).exit_code == 0
    _no_sandbox_left()


def _runner_again(h: Harness, runner: Runner) -> Runner:
    """The same runner's next job: its work directory and externals as the last job left them."""
    return Runner(
        url=h.url,
        token=token_of("agent-a"),
        work=runner.work,
        name=runner.name,
        externals=runner.externals,
        context=dict(runner.context),
    )


async def test_a_request_never_asks_for_the_runners_externals_itself(js_service: Harness, tmp_path: Path) -> None:
    """``externals`` is the controller's, for its CI jobs' steps: POST /v1/executions refuses it (even for the
    workspace of a runner whose externals are deployed), as it refuses ci.controller_job; false (what a request
    model dumps) is no request for them."""
    runner = _runner(js_service, tmp_path)
    agent = js_service.client("agent-a")
    asked = {"tool": "shell_exec", "argv": ["cat", "/__e/node20/include/node/node_version.h"], "tenant": "team-a"}
    with pytest.raises(InputInvalid) as refused:
        await agent.submit({**asked, "session_id": runner.name, "externals": True})
    assert refused.value.details["fields"] == ["externals"] and "never by a request" in str(refused.value)
    assert (await agent.list()).items == []  # nothing decided, nothing ran
    plain = await agent.submit({"tool": "shell_exec", "argv": ["true"], "externals": False}, wait=60)
    assert plain.state is ExecutionState.SUCCEEDED, plain
