"""Egress for a CI job comes from its profile's allowlist, never from an open network: a runner set for pull
requests names a profile with egress to the forge only (SANDBOX_PROFILE, the runner pod's own setting), and the
policy lets pull requests' steps run in that profile and nowhere else (rules on ``ci:`` and ``profile:``).

The forge is an HTTP server in a network namespace this test run makes (tests/support/egress.py)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.egress import HTTP_PORT, EgressNet, egress_net
from tests.support.github_runner import Runner
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
FORGE = f"web.test:{HTTP_PORT}"
PULL_REQUEST = {"GITHUB_EVENT_NAME": "pull_request", "GITHUB_REF": "refs/pull/7/merge"}
# in the job's checkout (a program the gate sees run as a file, not code it cannot read)
FETCH_PY = """
import sys, urllib.request
for url in ("http://web.test:8080/hello", "http://tls.test:8080/hello"):
    try:
        urllib.request.urlopen(url, timeout=10).read()
        print("reached", url)
    except Exception as exc:
        print("refused", url, type(exc).__name__, getattr(exc, "code", ""))
"""
FETCH = "python3 fetch.py\n"


@pytest.fixture(scope="module")
def net(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EgressNet]:
    with egress_net(tmp_path_factory.mktemp("ci-egress-net")) as made:
        yield made


@pytest.fixture
async def service(
    tmp_path: Path, net: EgressNet, engine: Any, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    # docs/ci.md's two files, as written, the forge's name replaced by this run's server's
    profile_text, config_text = (b.replace(DOCS_FORGE, FORGE) for b in _docs_files())
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "ci-forge.yaml").write_text(profile_text)
    monkeypatch.setenv("SANDBOX_PROFILES_PATH", str(profiles))
    policy = yaml.safe_load(config_text)
    policy["safety"].update(mode="ask", denylist=["sudo"], approval_timeout_s=5)
    policy.update(caps={"allowed_images": ["sandbox-orchestrator/*"]}, egress={"hosts": net.hosts})
    h = await start_service(write_config(tmp_path, **json.loads(json.dumps(policy))))
    try:
        yield h
    finally:
        await h.stop()


DOCS = Path(__file__).resolve().parents[2] / "docs" / "ci.md"
DOCS_FORGE = "forge.example:443"


def _docs_files() -> tuple[str, str]:
    blocks = re.findall(r"```yaml\n(.*?)```", DOCS.read_text(encoding="utf-8"), flags=re.S)
    [profile] = [b for b in blocks if b.startswith("# profiles/ci-forge.yaml")]
    [config] = [b for b in blocks if b.startswith("# config.yaml") and "pr-in-ci-forge" in b]
    return profile, config


def _runner(h: Harness, tmp_path: Path, name: str, **env: str) -> Runner:
    work = tmp_path / "workspaces" / "team-a" / name
    work.mkdir(parents=True)
    return Runner(url=h.url, token=token_of("agent-a"), work=work, name=name, context={**PULL_REQUEST, **env})


async def test_a_pull_request_runner_set_reaches_the_forge_and_nothing_else(service: Harness, tmp_path: Path) -> None:
    runner = _runner(service, tmp_path, "pr-runner-1", SANDBOX_PROFILE="ci-forge")
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0, prepared.stderr
    assert "profile ci-forge" in prepared.stdout
    (runner.work / "app" / "app" / "fetch.py").write_text(FETCH_PY)
    runner.own_work()
    fetched = await runner.invoke(runner.script_step(FETCH))
    assert fetched.exit_code == 0, fetched.stderr
    assert "reached http://web.test:8080/hello" in fetched.stdout, fetched.stdout
    # the same far host and port under a name the allowlist does not hold: the proxy says no
    assert "refused http://tls.test:8080/hello HTTPError 403" in fetched.stdout, fetched.stdout
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0


async def test_a_pull_request_in_the_default_profile_is_denied(service: Harness, tmp_path: Path) -> None:
    runner = _runner(service, tmp_path, "pr-runner-2")
    prepared = await runner.invoke(runner.prepare_job(IMAGE))
    assert prepared.exit_code == 0 and "profile ci," in prepared.stdout, prepared
    (runner.work / "app" / "app" / "fetch.py").write_text(FETCH_PY)
    runner.own_work()
    step = await runner.invoke(runner.script_step(FETCH))
    assert step.exit_code != 0 and "POLICY.DENIED" in step.stderr, step
    assert "pull requests run in the ci-forge profile only" in step.stderr
    assert "reached" not in step.stdout
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
