"""JavaScript actions through the GitHub hook, end to end: the runner's externals (node 20 as the runner ships it,
``scripts/ci-externals.sh``) taken from the work directory and mounted read-only at /__e, the action's program
run as the runner runs it (``/__e/node20/bin/node "/__w/_actions/<owner>/<repo>/<ref>/index.js"``), allowed only
by an explicit rule on the action (an opaque program is never allowed by default)."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

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
    """A runner whose deployment copied its externals into the work directory (SANDBOX_EXTERNALS)."""
    work = tmp_path / "workspaces" / "team-a" / name
    work.mkdir(parents=True)
    shipped = runner_externals()
    shutil.copytree(shipped, work / "externals", symlinks=True)
    return Runner(
        url=h.url,
        token=token_of("agent-a"),
        work=work,
        name=name,
        externals=shipped,
        context={"SANDBOX_EXTERNALS": "externals"},
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
    taken = Path(externals.mount(runner.work).source)
    # taken out of the work directory, where every step could write it, to where none reaches
    assert not (runner.work / "externals").exists() and (taken / "node20" / "bin" / "node").is_file()
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
    assert not (taken / "node20" / "bin" / "planted").exists()

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
    assert not kept.exists()  # closing the job leaves nothing of them
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
    assert not externals.location(runner.work).exists()
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
