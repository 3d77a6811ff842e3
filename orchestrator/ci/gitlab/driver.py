"""The custom executor's four stages over the controller's API: ``config`` (the JSON the runner reads),
``prepare`` (opens the controller's CI job: ``POST /v1/ci/jobs``), ``run`` (each stage script one governed
step: ``POST /v1/ci/jobs/{id}/steps``, its output followed on ``GET /v1/executions/{id}/output``),
``cleanup`` (``DELETE /v1/ci/jobs/{id}``: what still runs stopped, the job's workspace removed).

What the runner gives and expects is in ``protocol`` (read from gitlab-runner's ``docs/executors/custom.md``
and ``executors/custom/``). Each stage is a process of its own: ``prepare`` keeps the job's id in a state
file for the others. Each function returns the process's exit code, never raises: a refusal of what the job
asks is the build's failure (``BUILD_FAILURE_EXIT_CODE``, the reason in the job log as ``sandbox: CODE:
message``), anything on our side a system failure (``SYSTEM_FAILURE_EXIT_CODE``, which the runner retries
where it can).
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TextIO

from orchestrator.ci.gitlab import protocol
from orchestrator.ci.gitlab.api import client_from_env
from orchestrator.ci.gitlab.protocol import ExitCodes, JobState
from orchestrator.client.sync import Client
from orchestrator.domain.ci import GITLAB_PREFIX, ci_from_gitlab
from orchestrator.domain.ci_jobs import CiJobRequest, CiStepRequest
from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.requests import ScriptFile
from orchestrator.domain.text import terminal_safe
from orchestrator.domain.wire import ExecutionState, ExecutionView, OutputChunk

__all__ = ["Verdict", "cleanup", "config", "prepare", "run", "verdict"]


def _say(text: str, file: TextIO | None = None) -> None:
    """One line of ours in the job log (stderr: the runner shows both streams), nothing a terminal acts on."""
    out = file or sys.stderr
    out.write(f"sandbox: {terminal_safe(text)}\n")
    out.flush()


def _failed(err: OrchestratorError, codes: ExitCodes) -> int:
    _say(f"{err.code}: {err.message}")
    return codes.build_failure if protocol.failure_kind(err.code) == "build" else codes.system_failure


# -- config_exec ---------------------------------------------------------------------------------------
def config(env: Mapping[str, str], version: str) -> int:
    """Print the config JSON on stdout (the runner parses all of it; our lines go to stderr)."""
    sys.stdout.write(json.dumps(protocol.config_document(version)) + "\n")
    sys.stdout.flush()
    return 0


# -- prepare_exec --------------------------------------------------------------------------------------
def prepare(env: Mapping[str, str]) -> int:
    """Open the job (its CI context from ``CUSTOM_ENV_*``, its image ``CUSTOM_ENV_CI_JOB_IMAGE`` when the job
    names one: checked against the controller's caps now, before any stage runs; its profile ``SANDBOX_PROFILE``
    when the runner's environment names one) and keep its id."""
    codes = ExitCodes.of(env)
    try:
        client = client_from_env(env)
        ci = ci_from_gitlab(env)
        image = env.get(f"{GITLAB_PREFIX}CI_JOB_IMAGE") or None
        JobState.path(env)  # a missing CI_JOB_ID refused before a job is opened that nothing could close
        # the runner process's own environment, never a build variable (CUSTOM_ENV_*: a job may set those)
        profile = env.get("SANDBOX_PROFILE") or None
        view = client.open_ci_job(CiJobRequest(ci=ci, image=image, profile=profile))
        JobState(view.job_id, view.container_path, view.image, view.profile).save(env)
    except OrchestratorError as err:
        return _failed(err, codes)
    except OSError as err:
        _say(f"SANDBOX.UNAVAILABLE: the driver's state cannot be kept: {err.strerror or err}")
        return codes.system_failure
    _say(
        f"job {view.job_id} opened: image {view.image}, profile {view.profile}, workspace at {view.container_path}"
        f" (each stage a governed execution in a fresh sandbox)",
        sys.stdout,
    )
    return 0


# -- run_exec ------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Verdict:
    """What a finished step means for the runner: ``ok``, the job's failure (``build``, with the script's exit
    code when it ran to one) or ours (``system``); ``line`` the reason shown in the job log."""

    kind: Literal["ok", "build", "system"]
    script_exit: int | None = None
    line: str | None = None


def verdict(view: ExecutionView) -> Verdict:
    """The runner's reading of a finished execution."""
    exit_code = view.result.exit_code if view.result is not None else None
    if view.state is ExecutionState.SUCCEEDED:
        return Verdict("ok", 0)
    if view.error is not None:
        line = f"{view.error.code}: {view.error.message}"
        return Verdict(protocol.failure_kind(view.error.code), exit_code, line)
    if view.state is ExecutionState.FAILED and exit_code:
        return Verdict("build", exit_code)  # the script failed: its own output says why
    if view.state is ExecutionState.CANCELLED:
        return Verdict("build", exit_code, "EXECUTION.CANCELLED: the step was cancelled")
    return Verdict("system", exit_code, f"SANDBOX.UNAVAILABLE: the step ended {view.state.value} without a reason")


class _Terminated(BaseException):
    """SIGTERM (the runner's timeout or cancel) or SIGINT during a step."""


@contextmanager
def _signals_end_the_step() -> Iterator[None]:
    def stop(signum: int, _frame: Any) -> None:
        raise _Terminated(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(env: Mapping[str, str], script: str, stage: str) -> int:
    """Run one stage's script as a step of the job: its output to ours as it comes, its end to our exit code.
    SIGTERM or SIGINT cancel the step (``DELETE /v1/executions/{id}``) before exiting; one that comes before
    the step has an id is stopped by ``cleanup`` closing the job."""
    codes = ExitCodes.of(env)
    if stage in protocol.REFUSED_STAGES:
        _say(
            f"CI.UNSUPPORTED: {stage} runs gitlab-runner's helper with the job's token against GitLab; the sandbox"
            " has neither the helper nor that network (cache and artifacts are not supported: see docs/cli.md)"
        )
        return codes.build_failure
    execution_id: str | None = None
    client: Client | None = None
    try:
        with _signals_end_the_step():
            client = client_from_env(env)
            state = JobState.load(env)
            if state is None:
                _say("SANDBOX.UNAVAILABLE: no job of this CI job was prepared (prepare_exec did not succeed)")
                return codes.system_failure
            path = protocol.script_path(state.container_path, stage)
            step = CiStepRequest(
                step=stage,
                argv=["bash", path],  # the script sets errexit and pipefail itself (shells/bash.go)
                script=ScriptFile.of(path, protocol.read_script(script)),
            )
            view = client.run_ci_step(state.job_id, step)
            execution_id = view.execution_id
            view = _followed(client, view)
    except _Terminated as stopped:
        _say(f"stopped by signal {stopped.args[0]}: cancelling the step {execution_id or '(not yet submitted)'}")
        if client is not None and execution_id is not None:
            try:
                client.cancel(execution_id)
            except OrchestratorError as err:
                _say(f"the step could not be cancelled ({err.code}); closing the job at cleanup stops it")
        return codes.build_failure
    except OrchestratorError as err:
        return _failed(err, codes)
    found = verdict(view)
    if found.line is not None:
        _say(found.line)
    if found.kind == "ok":
        return 0
    if found.kind == "build":
        return codes.build_failed(found.script_exit)
    return codes.system_failure


def _followed(client: Client, view: ExecutionView) -> ExecutionView:
    """The step to its end, its output streamed as it comes. An approval the policy asks for is said once,
    with the execution's id and the policy's reason, so that whoever watches the job log knows what to
    decide; the output stream waits it out (and replays what ran before it was opened)."""
    if view.state.final:  # refused when decided: nothing ran
        return view
    if view.state is ExecutionState.PENDING_APPROVAL:
        _say(f"step {view.execution_id} waits for an approval: {view.reason or 'the policy asks'}")
    for item in client.stream(view.execution_id):
        if isinstance(item, OutputChunk):
            out = sys.stdout if item.stream == "stdout" else sys.stderr
            out.write(item.data)
            out.flush()
        else:
            return item
    return client.get(view.execution_id)


# -- cleanup_exec --------------------------------------------------------------------------------------
def cleanup(env: Mapping[str, str]) -> int:
    """Close the job and forget it. Idempotent: no state (prepare failed, cleanup ran) or a job the controller
    no longer knows is success; the runner ignores this stage's result anyway."""
    codes = ExitCodes.of(env)
    try:
        state = JobState.load(env)
        if state is None:
            return 0
        client = client_from_env(env)
        try:
            client.close_ci_job(state.job_id)
        except OrchestratorError as err:
            if err.code != "RESOURCE.NOT_FOUND":
                raise
        JobState.remove(env)
    except OrchestratorError as err:
        _say(f"{err.code}: {err.message}")
        return codes.system_failure
    _say(f"job {state.job_id} closed", sys.stdout)
    return 0
