"""GitLab Runner's custom executor driver, end to end: ``sandboxctl ci gitlab …`` called exactly as the runner
calls it, against a real controller, every stage one governed execution in a fresh sandbox on the real engine.

GitLab Runner cannot be built here (its Go module's dependencies are refused by the proxy: see
/work/shared/CI-RUNNERS-ON-THIS-MACHINE.md), so its side is replayed from its sources (gitlab-runner's
``executors/custom/custom.go`` and ``command/command.go``): one process per stage, started in the job's own
temporary directory (``custom-executor*``, also its TMPDIR), with the job's variables as ``CUSTOM_ENV_*``,
``BUILD_FAILURE_EXIT_CODE`` 1, ``SYSTEM_FAILURE_EXIT_CODE`` 2, ``BUILD_EXIT_CODE_FILE`` and ``JOB_RESPONSE_FILE``
in that directory; ``run_exec`` gets ``<tempdir>/script<N>/script`` (mode 0700) and the stage's name (``step_script``
given as ``build_script``); on a timeout or cancel, SIGTERM then SIGKILL. The stage scripts have the shape
``shells/bash.go`` writes (``BashWriter.Finish``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from orchestrator.pipeline.this_process import owner_label
from tests.support.engine import list_managed
from tests.support.service import Harness, free_port, token_of

pytestmark = pytest.mark.integration

SANDBOXCTL = str(Path(sys.executable).parent / "sandboxctl")
BUILD_FAILURE, SYSTEM_FAILURE = 1, 2  # command.go's values today; the driver reads them from the environment


def bash_stage(lines: list[str]) -> str:
    """A stage script as gitlab-runner's BashWriter.Finish writes it (shells/bash.go): errexit and pipefail
    set, the stage's lines run by eval in a subshell with stdin closed, TERM making the script exit 1."""
    body = "\n".join(lines) + "\n"
    return (
        "#!/usr/bin/env bash\n\n"
        "trap 'exit 1' TERM\n\n"
        'case "$(set -o)" in *"pipefail"*) set -o pipefail;; esac; set -o errexit\n'
        "set +o noclobber\n"
        f"(trap 'exit 1' TERM; eval {shlex.quote(body)}) < /dev/null\n"
        "exit 0\n"
    )


@dataclass
class Stage:
    exit_code: int
    stdout: str
    stderr: str


@dataclass
class GitLabRunner:
    """One job as gitlab-runner's custom executor runs it."""

    url: str
    token: str
    tempdir: Path  # the executor's os.MkdirTemp("", "custom-executor")
    job_id: str = "7001"
    extra: dict[str, str] = field(default_factory=dict)
    scripts: int = 0

    def env(self) -> dict[str, str]:
        variables = {
            "CI_JOB_ID": self.job_id,
            "CI_JOB_NAME": "test",
            "CI_JOB_STAGE": "test",
            "CI_PROJECT_PATH": "org/app",
            "CI_PIPELINE_ID": "9001",
            "CI_PIPELINE_SOURCE": "push",
            "CI_COMMIT_BRANCH": "main",
            "CI_COMMIT_REF_NAME": "main",
            "GITLAB_USER_LOGIN": "alice",
            "CI_BUILDS_DIR": "/__w/builds",
            "CI_JOB_SERVICES": "",  # getCIJobServicesEnv: empty without services
        }
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SANDBOX_URL": self.url,
            "SANDBOX_TOKEN": self.token,
            "TMPDIR": str(self.tempdir),
            "BUILD_FAILURE_EXIT_CODE": str(BUILD_FAILURE),
            "SYSTEM_FAILURE_EXIT_CODE": str(SYSTEM_FAILURE),
            "BUILD_EXIT_CODE_FILE": str(self.tempdir / "build_exit_code"),
            "JOB_RESPONSE_FILE": str(self.tempdir / "response.json"),
            **{f"CUSTOM_ENV_{k}": v for k, v in variables.items()},
            **self.extra,
        }

    def script(self, lines: list[str]) -> Path:
        """custom.go's Run: a fresh script<N> directory in the job's temp dir, the script 0700."""
        self.scripts += 1
        directory = self.tempdir / f"script{self.scripts}"
        directory.mkdir()
        path = directory / "script"
        path.write_text(bash_stage(lines))
        path.chmod(0o700)
        return path

    async def start(self, *args: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            SANDBOXCTL,
            "ci",
            "gitlab",
            *args,
            cwd=self.tempdir,
            env=self.env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # the runner makes the driver a process group's leader
        )

    async def stage(self, *args: str, timeout_s: float = 180.0) -> Stage:
        process = await self.start(*args)
        out, err = await asyncio.wait_for(process.communicate(), timeout_s)
        assert process.returncode is not None
        return Stage(process.returncode, out.decode(), err.decode())

    async def run(self, stage: str, lines: list[str]) -> Stage:
        return await self.stage("run", str(self.script(lines)), stage)

    def controller_job(self) -> str:
        state = json.loads((self.tempdir / "sandbox-gitlab" / f"{self.job_id}.json").read_text())
        return str(state["job_id"])


def _runner(url: str, tmp_path: Path) -> GitLabRunner:
    tempdir = tmp_path / "runner-tmp" / "custom-executor123"
    tempdir.mkdir(parents=True)
    (tempdir / "response.json").write_text(json.dumps({"id": 7001, "token": "jobT0ken"}))
    return GitLabRunner(url=url, token=token_of("agent-a"), tempdir=tempdir)


async def test_a_whole_job_replayed_as_the_runner_calls_the_driver(ci_service: Harness, tmp_path: Path) -> None:
    runner = _runner(ci_service.url, tmp_path)

    configured = await runner.stage("config")
    assert configured.exit_code == 0, configured.stderr
    config = json.loads(configured.stdout)
    assert config["builds_dir"] == "/__w/builds" and config["builds_dir_is_shared"] is False
    assert config["driver"]["name"] == "sandbox-orchestrator" and config["shell"] == "bash"

    prepared = await runner.stage("prepare")
    assert prepared.exit_code == 0, prepared.stderr
    job_id = runner.controller_job()
    assert job_id in prepared.stdout and "profile ci" in prepared.stdout
    state_file = runner.tempdir / "sandbox-gitlab" / f"{runner.job_id}.json"
    assert state_file.stat().st_mode & 0o777 == 0o600
    workspace = tmp_path / "workspaces" / "team-a" / job_id
    assert workspace.is_dir()

    first = await runner.run("prepare_script", ['echo "Running on $(hostname) via sandbox-orchestrator..."'])
    assert first.exit_code == 0, first
    assert "Running on" in first.stdout

    # a real get_sources clones over the network (git fetch from GitLab): that needs an egress allowlist naming
    # the GitLab host; this one makes the project directory as the clone would
    sources = await runner.run(
        "get_sources",
        [
            'echo "Fetching changes..."',
            "mkdir -p /__w/builds/org/app",
            "cd /__w/builds/org/app",
            "printf 'int main(void) { return 0; }\\n' > main.c",
        ],
    )
    assert sources.exit_code == 0, sources
    assert (workspace / "builds" / "org" / "app" / "main.c").is_file()

    built = await runner.run(
        "build_script",  # step_script as custom.go gives it to run_exec
        ["cd /__w/builds/org/app", "echo building; ls", "echo done > built.txt", "echo to-stderr >&2"],
    )
    assert built.exit_code == 0, built
    assert "building" in built.stdout and "main.c" in built.stdout and "to-stderr" in built.stderr
    assert (workspace / "builds" / "org" / "app" / "built.txt").read_text() == "done\n"
    assert not (runner.tempdir / "build_exit_code").exists()

    failing = await runner.run("build_script", ["cd /__w/builds/org/app", "echo about to fail", "exit 3"])
    assert failing.exit_code == BUILD_FAILURE, failing
    assert "about to fail" in failing.stdout
    assert (runner.tempdir / "build_exit_code").read_text().strip() == "3"

    after = await runner.run("after_script", ["echo after; cat /__w/builds/org/app/built.txt"])
    assert after.exit_code == 0, after
    assert "after" in after.stdout and "done" in after.stdout

    refused = await runner.run("upload_artifacts_on_failure", ["gitlab-runner artifacts-uploader --url x"])
    assert refused.exit_code == BUILD_FAILURE and "CI.UNSUPPORTED" in refused.stderr, refused

    cleaned = await runner.stage("cleanup")
    assert cleaned.exit_code == 0, cleaned.stderr
    assert not workspace.exists()  # the job made it: removed at close
    assert not state_file.exists()
    again = await runner.stage("cleanup")  # idempotent: nothing left to close
    assert again.exit_code == 0, again.stderr

    page = await ci_service.client("agent-a").list(limit=20)
    assert [v.state.value for v in page.items] == ["succeeded", "failed", "succeeded", "succeeded", "succeeded"]
    contexts = [v.request["context"]["ci"] for v in page.items]  # newest first
    assert [c["step"] for c in contexts] == [
        "after_script",
        "build_script",
        "build_script",
        "get_sources",
        "prepare_script",
    ]
    assert len({c["job_key"] for c in contexts}) == 1 and contexts[0]["job_id"] == runner.job_id
    assert all(v.request["script"]["path"].startswith("/__w/_sandbox/") for v in page.items)
    # keyed under the evidence's input key: a stage script holds the job's variables
    assert all(set(v.request["script"]) == {"path", "bytes", "hmac_sha256"} for v in page.items)


async def test_sigterm_during_a_stage_cancels_its_step(ci_service: Harness, tmp_path: Path) -> None:
    runner = _runner(ci_service.url, tmp_path)
    prepared = await runner.stage("prepare")
    assert prepared.exit_code == 0, prepared.stderr
    agent = ci_service.client("agent-a")

    process = await runner.start("run", str(runner.script(["echo started", "sleep 300"])), "build_script")
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), 120)
    assert b"started" in line
    running = (await agent.list(state="running")).items
    assert len(running) == 1
    execution_id = running[0].execution_id

    process.send_signal(signal.SIGTERM)  # the runner's job timeout or cancel
    try:
        _, err = await asyncio.wait_for(process.communicate(), 30)
    except TimeoutError:  # graceful_kill_timeout passed: SIGKILL
        process.kill()
        raise
    assert process.returncode == BUILD_FAILURE, err
    assert b"cancelling the step" in err

    ended = await agent.get(execution_id, wait=30)
    assert ended.state.value == "cancelled", ended
    for _ in range(20):  # the sandbox is removed as the cancel ends
        left = [s for s in await asyncio.to_thread(list_managed) if s.owner == owner_label()]
        if not left:
            break
        await asyncio.sleep(0.5)
    assert not left, left

    cleaned = await runner.stage("cleanup")
    assert cleaned.exit_code == 0, cleaned.stderr


async def test_an_unreachable_controller_is_a_system_failure(tmp_path: Path) -> None:
    runner = _runner(f"http://127.0.0.1:{free_port()}", tmp_path)
    runner.extra = {"BUILD_FAILURE_EXIT_CODE": "41", "SYSTEM_FAILURE_EXIT_CODE": "42"}  # read, never assumed
    prepared = await runner.stage("prepare")
    assert prepared.exit_code == 42, prepared
    assert "SANDBOX.UNAVAILABLE" in prepared.stderr

    runner.extra["SANDBOX_URL"] = ""
    missing = await runner.stage("prepare")
    assert missing.exit_code == 42 and "SANDBOX_URL is not set" in missing.stderr, missing


async def test_a_stage_the_policy_asks_about_waits_for_an_approver(ci_service: Harness, tmp_path: Path) -> None:
    runner = _runner(ci_service.url, tmp_path)
    runner.extra = {"CUSTOM_ENV_CI_COMMIT_BRANCH": "feature", "CUSTOM_ENV_CI_COMMIT_REF_NAME": "feature"}
    prepared = await runner.stage("prepare")
    assert prepared.exit_code == 0, prepared.stderr
    process = await runner.start("run", str(runner.script(["echo approved-and-ran"])), "build_script")
    approver = ci_service.client("approver-a")
    for _ in range(100):
        pending = (await approver.approvals()).items
        if pending:
            break
        await asyncio.sleep(0.1)
    assert len(pending) == 1 and pending[0].ci is not None and pending[0].ci.ref == "refs/heads/feature"
    await approver.approve(pending[0].approval_id, "reviewed")
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err
    assert f"step {pending[0].execution_id} waits for an approval" in err.decode()
    assert "approved-and-ran" in out.decode()

    denied = await runner.run("after_script", ["sudo rm -rf /"])
    assert denied.exit_code == BUILD_FAILURE, denied
    assert "sandbox: POLICY.DENIED: " in denied.stderr
    assert not (runner.tempdir / "build_exit_code").exists()  # nothing ran: no exit code of the script's
    assert (await runner.stage("cleanup")).exit_code == 0


async def test_the_runner_s_sandbox_profile_names_the_job_s_profile(ci_service: Harness, tmp_path: Path) -> None:
    """SANDBOX_PROFILE from the runner process's own environment, never a build variable (CUSTOM_ENV_*: a job's,
    or config.toml's `environment`, which the custom executor hands over the same way)."""
    runner = _runner(ci_service.url, tmp_path)
    runner.extra = {"SANDBOX_PROFILE": "no-such-profile"}
    refused = await runner.stage("prepare")
    assert refused.exit_code in (BUILD_FAILURE, SYSTEM_FAILURE) and "no-such-profile" in refused.stderr, refused
    assert not (runner.tempdir / "sandbox-gitlab" / f"{runner.job_id}.json").exists()

    runner.extra = {"CUSTOM_ENV_SANDBOX_PROFILE": "no-such-profile"}  # a job's variable: not the runner's setting
    prepared = await runner.stage("prepare")
    assert prepared.exit_code == 0 and "profile ci," in prepared.stdout, prepared
    assert (await runner.stage("cleanup")).exit_code == 0
