"""A CI step asked about, decided in /ui: a GitHub job's `deploy-prod` step on main waits in the hook (the runner's
job log says so) while an approver, in a real browser, sees the job it belongs to (run, job, step, ref, event,
actor, the script's keyed digest) and approves; the step then runs and the runner gets its exit code.

The browser, its guard and the service are the approvals page's own (tests/api/test_ui_browser.py); here the
service's policy is a CI one: a deploy on main asks a person, the rest of org/* on main is allowed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_ui_browser import RUN_S, TEST_S, UI, chromium, screenshot, sign_in, ui
from tests.support.github_runner import Runner
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

__all__ = ["chromium", "ui"]  # the page's fixtures, used here with this module's service

IMAGE = "sandbox-orchestrator/default:latest"
ON_MAIN = {"repository": "org/*", "ref": "refs/heads/main"}


@pytest.fixture
async def ui_harness(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    safety = {
        "mode": "ask",
        "denylist": ["sudo"],
        "approval_timeout_s": 120,
        "rules": [
            {"name": "deploy-on-main", "action": "ask", "ci": {"step": "deploy*", "ref": "refs/heads/main"},
             "reason": "a deploy: a person decides in /ui"},
            {"name": "ci-main", "action": "allow", "complex": True, "risk_at_most": "high", "ci": ON_MAIN},
        ],
    }  # fmt: skip
    h = await start_service(write_config(tmp_path, safety=safety, caps={"allowed_images": ["sandbox-orchestrator/*"]}))
    try:
        yield h
    finally:
        await h.stop()


async def test_a_deploy_step_waits_for_a_person_who_sees_its_job(ui_harness: Harness, ui: UI, tmp_path: Path) -> None:
    from playwright.async_api import expect

    work = tmp_path / "workspaces" / "team-a" / "runner-ui"
    work.mkdir(parents=True)
    runner = Runner(url=ui_harness.url, token=token_of("agent-a"), work=work, name="runner-ui")
    async with asyncio.timeout(TEST_S):
        prepared = await runner.invoke(runner.prepare_job(IMAGE))
        assert prepared.exit_code == 0, prepared.stderr
        runner.own_work()
        built = await runner.invoke(runner.script_step("echo built"), step_env={"GITHUB_ACTION": "build"})
        assert built.exit_code == 0 and "built" in built.stdout, built  # allowed: no one asked

        deploy = runner.script_step("echo deploying; echo deployed > deployed.txt")
        step = asyncio.create_task(runner.invoke(deploy, step_env={"GITHUB_ACTION": "deploy-prod"}))
        page = ui.page
        await sign_in(ui, "approver-a")
        card = page.locator("li.approval")
        await expect(card).to_have_count(1)
        argv = ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail"]
        await expect(card.locator("h3 code")).to_contain_text(
            json.dumps(argv, separators=(",", ":"))[:-1] + ',"/__w/_temp/'
        )
        for shown in (
            "a deploy: a person decides in /ui",
            "github org/app run 4242 attempt 1",
            "build / test (runner-ui)",
            "deploy-prod",
            "refs/heads/main on push by octocat",
            "hmac-sha256",
        ):
            await expect(card).to_contain_text(shown)
        assert not step.done()  # the runner's step waits for the person
        await screenshot(ui, "ui-ci-approval.png")

        await card.get_by_label("Reason (recorded in the evidence)").fill("release 1.2")
        await card.get_by_role("button", name="Approve", exact=True).click()
        await expect(card).to_have_count(0)
        ran = await asyncio.wait_for(step, RUN_S)
        assert ran.exit_code == 0, ran
        assert "waiting for approval" in ran.stderr and "deploying" in ran.stdout
        assert (work / "app" / "app" / "deployed.txt").read_text() == "deployed\n"
        assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
        ui.check_clean()
