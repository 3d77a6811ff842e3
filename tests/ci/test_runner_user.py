"""The runner and the steps must write the same work directory as one user. The runner writes it as its own
(uid 1001 in actions/runner's image: `images/Dockerfile`, `adduser --uid 1001 runner`); a step writes as its
profile's (1000 in the built-in ones). docs/ci.md says how to make them one: here, the `ci` profile given the
runner's user, as the chart's `ci.profile: {user: ...}` does."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.ci.conftest import CI_POLICY
from tests.support.github_runner import Runner
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
RUNNER_UID = 1001


def _as_the_runner_leaves_it(work: Path) -> None:
    for root, dirs, files in os.walk(work):
        for name in [*dirs, *files]:
            os.chown(os.path.join(root, name), RUNNER_UID, RUNNER_UID, follow_symlinks=False)
    os.chown(work, RUNNER_UID, RUNNER_UID)


async def _service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, profile: str | None) -> Harness:
    if profile is not None:
        profiles = tmp_path / "profiles"
        profiles.mkdir()
        (profiles / "ci.yaml").write_text(profile)
        monkeypatch.setenv("SANDBOX_PROFILES_PATH", str(profiles))
    return await start_service(write_config(tmp_path, **{k: dict(v) for k, v in CI_POLICY.items()}))


@pytest.fixture
async def services(engine: Any) -> AsyncIterator[list[Harness]]:
    started: list[Harness] = []
    yield started
    for h in started:
        await h.stop()


async def _first_step(h: Harness, tmp_path: Path) -> tuple[Runner, Any]:
    work = tmp_path / "workspaces" / "team-a" / "runner-1"
    work.mkdir(parents=True)
    runner = Runner(url=h.url, token=token_of("agent-a"), work=work, name="runner-1")
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    _as_the_runner_leaves_it(work)
    return runner, await runner.invoke(runner.script_step("id -u; echo built > out.txt"))


async def test_a_profile_with_another_user_than_the_runner_s_cannot_write_its_checkout(
    services: list[Harness], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    services.append(h := await _service(tmp_path, monkeypatch, None))
    runner, step = await _first_step(h, tmp_path)
    assert step.exit_code != 0 and "Permission denied" in step.stderr + step.stdout, step
    assert not (runner.work / "app" / "app" / "out.txt").exists()
    await runner.invoke(runner.cleanup_job())


async def test_the_ci_profile_given_the_runner_s_user_writes_its_checkout(
    services: list[Harness], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    services.append(h := await _service(tmp_path, monkeypatch, f'extends: ci\nuser: "{RUNNER_UID}:{RUNNER_UID}"\n'))
    runner, step = await _first_step(h, tmp_path)
    assert step.exit_code == 0, step
    assert step.stdout.split()[-1] == str(RUNNER_UID)
    out = runner.work / "app" / "app" / "out.txt"
    assert out.read_text() == "built\n" and out.stat().st_uid == RUNNER_UID
    cleaned = await runner.invoke(runner.cleanup_job())
    assert cleaned.exit_code == 0, cleaned.stderr
