"""The GitLab driver's pure parts: the config JSON, the exit codes read from the runner's environment, the
exit-code file, the state file, the script's path and size, and what a finished step means for the runner."""

from __future__ import annotations

import io
import json
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.ci.gitlab import driver, protocol
from orchestrator.ci.gitlab.api import client_from_env
from orchestrator.ci.gitlab.protocol import ExitCodes, JobState
from orchestrator.cli.ci_cmd import hook_file
from orchestrator.domain.errors import InputInvalid, SandboxUnavailable
from orchestrator.domain.requests import MAX_SCRIPT_BYTES
from orchestrator.domain.wire import ErrorBody, ExecutionState, ExecutionView, RunResult


def test_the_config_names_the_ci_profiles_mount_and_bash() -> None:
    document = json.loads(json.dumps(protocol.config_document("1.2.3")))
    assert document == {
        "builds_dir": "/__w/builds",
        "cache_dir": "/__w/cache",
        "builds_dir_is_shared": False,
        "driver": {"name": "sandbox-orchestrator", "version": "1.2.3"},
        "job_env": {},
        "shell": "bash",
    }


def test_the_exit_codes_are_read_from_the_environment() -> None:
    codes = ExitCodes.of({"BUILD_FAILURE_EXIT_CODE": "41", "SYSTEM_FAILURE_EXIT_CODE": "42"})
    assert (codes.build_failure, codes.system_failure, codes.exit_code_file) == (41, 42, None)
    fallback = ExitCodes.of({"BUILD_FAILURE_EXIT_CODE": "x", "SYSTEM_FAILURE_EXIT_CODE": "999"})
    assert (fallback.build_failure, fallback.system_failure) == (1, 2)


def test_a_failed_script_writes_only_its_code(tmp_path: Path) -> None:
    target = tmp_path / "build_exit_code"
    codes = ExitCodes.of({"BUILD_FAILURE_EXIT_CODE": "1", "BUILD_EXIT_CODE_FILE": str(target)})
    assert codes.build_failed(3) == 1
    assert target.read_text() == "3\n"
    target.unlink()
    assert codes.build_failed(None) == 1  # a refusal: no code of the script's
    assert not target.exists()


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("POLICY.DENIED", "build"),
        ("APPROVAL.DENIED", "build"),
        ("APPROVAL.TIMEOUT", "build"),
        ("CI.UNSUPPORTED", "build"),
        ("INPUT.INVALID", "build"),
        ("SANDBOX.TIMEOUT", "build"),
        ("SANDBOX.UNAVAILABLE", "system"),
        ("SANDBOX.START_FAILED", "system"),
        ("INTERNAL", "system"),
        ("AUTH.UNAUTHORIZED", "system"),
        ("RESOURCE.NOT_FOUND", "system"),
    ],
)
def test_whose_failure_a_code_is(code: str, kind: str) -> None:
    assert protocol.failure_kind(code) == kind


def test_the_state_file_is_the_users_own_and_keyed_by_the_job(tmp_path: Path) -> None:
    env = {"TMPDIR": str(tmp_path), "CUSTOM_ENV_CI_JOB_ID": "123"}
    assert JobState.load(env) is None
    path = JobState("job-ex-1", "/__w", "img:1", "ci").save(env)
    assert path == tmp_path / "sandbox-gitlab" / "123.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert JobState.load(env) == JobState("job-ex-1", "/__w", "img:1", "ci")
    JobState.remove(env)
    JobState.remove(env)  # idempotent
    assert JobState.load(env) is None
    assert protocol.state_dir({"SANDBOX_CI_STATE_DIR": "/x"}) == Path("/x")


@pytest.mark.parametrize("job_id", ["", "../etc", "a/b", ".hidden"])
def test_a_job_id_that_is_not_one_makes_no_path(tmp_path: Path, job_id: str) -> None:
    with pytest.raises(InputInvalid):
        JobState.path({"TMPDIR": str(tmp_path), "CUSTOM_ENV_CI_JOB_ID": job_id})


def test_the_script_path_is_a_plain_name_in_the_workspace() -> None:
    assert protocol.script_path("/__w/", "step_release") == "/__w/_sandbox/step_release.sh"
    for bad in ("..", "a/b", "", "x y"):
        with pytest.raises(InputInvalid):
            protocol.script_path("/__w", bad)


def test_the_script_is_read_within_a_requests_bound(tmp_path: Path) -> None:
    small = tmp_path / "script"
    small.write_bytes(b"echo hi\n")
    assert protocol.read_script(str(small)) == b"echo hi\n"
    big = tmp_path / "big"
    big.write_bytes(b"#" * (MAX_SCRIPT_BYTES + 1))
    with pytest.raises(InputInvalid, match="larger"):
        protocol.read_script(str(big))
    with pytest.raises(InputInvalid, match="cannot be read"):
        protocol.read_script(str(tmp_path / "missing"))


def test_the_controller_is_named_by_the_environment(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="SANDBOX_URL"):
        client_from_env({})
    with pytest.raises(SandboxUnavailable, match="no token"):
        client_from_env({"SANDBOX_URL": "http://h:1"})
    with pytest.raises(SandboxUnavailable, match="SANDBOX_TOKEN_FILE"):
        client_from_env({"SANDBOX_URL": "http://h:1", "SANDBOX_TOKEN_FILE": str(tmp_path / "none")})
    with pytest.raises(SandboxUnavailable, match="not usable"):
        client_from_env({"SANDBOX_URL": "ftp://h", "SANDBOX_TOKEN": "t"})
    token = tmp_path / "token"
    token.write_text("secret\n")
    client = client_from_env({"SANDBOX_URL": "http://h:1/", "SANDBOX_TOKEN_FILE": str(token), "SANDBOX_TOKEN": "x"})
    assert client.base_url == "http://h:1" and client._token == "secret"  # the file first, as hook.js


def _view(state: ExecutionState, exit_code: int | None = None, error: str | None = None) -> ExecutionView:
    now = datetime.now(UTC)
    result: Any = None
    if exit_code is not None:
        result = RunResult(
            ok=exit_code == 0,
            execution_id="ex-1",
            decision="allow",
            exit_code=exit_code,
            stdout="",
            stderr="",
            truncated=False,
            timed_out=False,
            oom_killed=False,
            duration_ms=1,
            side_effects=None,
            error=None,
        )
    return ExecutionView(
        execution_id="ex-1",
        state=state,
        tenant="t",
        subject="s",
        tool="shell_exec",
        created_at=now,
        updated_at=now,
        request={},
        result=result,
        error=None if error is None else ErrorBody(code=error, message="why"),
    )


def test_what_a_finished_step_means_for_the_runner() -> None:
    assert driver.verdict(_view(ExecutionState.SUCCEEDED, 0)).kind == "ok"
    failed = driver.verdict(_view(ExecutionState.FAILED, 3))
    assert (failed.kind, failed.script_exit, failed.line) == ("build", 3, None)
    denied = driver.verdict(_view(ExecutionState.REFUSED, error="POLICY.DENIED"))
    assert (denied.kind, denied.script_exit, denied.line) == ("build", None, "POLICY.DENIED: why")
    timed_out = driver.verdict(_view(ExecutionState.FAILED, 137, error="SANDBOX.TIMEOUT"))
    assert (timed_out.kind, timed_out.script_exit) == ("build", 137)
    assert driver.verdict(_view(ExecutionState.FAILED, error="SANDBOX.START_FAILED")).kind == "system"
    assert driver.verdict(_view(ExecutionState.CANCELLED)).kind == "build"


def test_the_cache_and_artifact_stages_are_refused_in_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"BUILD_FAILURE_EXIT_CODE": "41", "BUILD_EXIT_CODE_FILE": str(tmp_path / "code")}
    for stage in sorted(protocol.REFUSED_STAGES):
        assert driver.run(env, str(tmp_path / "unused"), stage) == 41
        assert f"sandbox: CI.UNSUPPORTED: {stage} " in capsys.readouterr().err
    assert not (tmp_path / "code").exists()


def test_run_and_cleanup_without_a_controller(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    env = {"TMPDIR": str(tmp_path), "CUSTOM_ENV_CI_JOB_ID": "9", "SYSTEM_FAILURE_EXIT_CODE": "42"}
    assert driver.cleanup(env) == 0  # nothing prepared: nothing to close
    assert driver.run(env, str(tmp_path / "s"), "build_script") == 42
    assert "SANDBOX_URL is not set" in capsys.readouterr().err


def test_config_prints_only_the_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    assert driver.config({}, "0.1.0") == 0
    assert json.loads(out.getvalue())["driver"]["version"] == "0.1.0"


def test_the_github_hook_file_is_shipped() -> None:
    assert hook_file().is_file() and hook_file().name == "hook.js"


def test_sandboxctl_ci_commands(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.cli.main import main

    assert main(["ci", "github", "hook-path"]) == 0
    assert Path(capsys.readouterr().out.strip()) == hook_file()
    monkeypatch.delenv("SANDBOX_URL", raising=False)
    monkeypatch.setenv("SYSTEM_FAILURE_EXIT_CODE", "42")
    monkeypatch.setenv("TMPDIR", "/nonexistent")
    monkeypatch.setenv("CUSTOM_ENV_CI_JOB_ID", "1")
    assert main(["ci", "gitlab", "cleanup"]) == 0  # nothing was prepared
    assert main(["ci", "gitlab", "run", "/nonexistent/script", "build_script"]) == 42
    assert main(["ci", "gitlab"]) == 2  # a stage is required
