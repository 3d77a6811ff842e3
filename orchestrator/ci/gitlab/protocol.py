"""GitLab Runner's custom executor protocol, as the runner speaks it: what each stage gets and must answer.
Pure parts only (no network): the driver (``driver``) does the calls.

Read in the gitlab-runner repository (``gitlabhq/gitlab-runner``):

- ``docs/executors/custom.md``: the stages run as ``config_exec`` (prints JSON on stdout: ``builds_dir``,
  ``cache_dir``, ``builds_dir_is_shared``, ``hostname``, ``driver{name,version}``, ``job_env``, ``shell``),
  ``prepare_exec``, ``run_exec <script> <stage>`` once per stage, ``cleanup_exec`` (its result never
  changes the job's); the job's variables arrive prefixed ``CUSTOM_ENV_``; a failed script is told with
  the exit code in ``BUILD_FAILURE_EXIT_CODE`` (its own code written to ``BUILD_EXIT_CODE_FILE``, so that
  ``allow_failure: exit_codes`` works), our side failing with ``SYSTEM_FAILURE_EXIT_CODE`` (retried for
  ``prepare_exec``, ``get_sources``, ``restore_cache``, ``download_artifacts``); on a timeout or a cancel
  SIGTERM, then SIGKILL after ``graceful_kill_timeout``.
- ``executors/custom/command/command.go``: every stage's environment carries ``TMPDIR`` (the job's own
  temporary directory, removed at cleanup), ``BUILD_FAILURE_EXIT_CODE``, ``SYSTEM_FAILURE_EXIT_CODE``,
  ``BUILD_EXIT_CODE_FILE`` and ``JOB_RESPONSE_FILE``; the codes' values (1, 2) may change in any release:
  they are read, never written here.
- ``executors/custom/custom.go``: ``BUILD_EXIT_CODE_FILE`` is always set (``<tempdir>/build_exit_code``); the
  stage script is ``<tempdir>/script<N>/script`` (mode 0700); ``step_script`` is given to ``run_exec`` as
  ``build_script``.
- ``common/build.go``: the stage names (``prepare_script``, ``get_sources``, ``restore_cache``,
  ``download_artifacts``, ``step_*``, ``build_script``, ``after_script``, ``archive_cache[_on_failure]``,
  ``upload_artifacts_on_success|failure``, ``cleanup_file_variables``); a stage with nothing to do is skipped
  (``ErrSkipBuildStage``): the cache and artifact stages reach the driver only for a job that asks for them.
- ``shells/bash.go``: a stage script is a whole bash script (``#!/usr/bin/env bash``, ``set -o errexit``,
  pipefail, the user's lines in ``eval``, ``exit 0``): it is run as ``bash <script>``, no flags added.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from orchestrator.domain.ci import GITLAB_PREFIX, JOB_ID_PATTERN
from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.requests import MAX_SCRIPT_BYTES

__all__ = [
    "BUILDS_DIR",
    "CACHE_DIR",
    "CONTAINER_PATH",
    "DRIVER_NAME",
    "REFUSED_STAGES",
    "ExitCodes",
    "JobState",
    "config_document",
    "failure_kind",
    "read_script",
    "script_path",
    "state_dir",
]

#: where the ci profile mounts a job's workspace (profiles/ci.yaml ``workspace.container_path``).
#: ``config_exec`` runs before ``prepare_exec`` opens the job, so it cannot ask the controller: the
#: constant is that profile's, and ``run`` uses the path the opened job answered.
CONTAINER_PATH = "/__w"
BUILDS_DIR = f"{CONTAINER_PATH}/builds"
CACHE_DIR = f"{CONTAINER_PATH}/cache"
#: where a stage's script is written in the workspace (beside the builds, never inside a checkout)
SCRIPTS_DIR = "_sandbox"
DRIVER_NAME = "sandbox-orchestrator"

#: stages whose script runs ``gitlab-runner`` (artifacts-uploader, cache-extractor …) with the job's token,
#: over the network to GitLab or the cache server: the sandbox image has no such program and the sandbox no
#: such network. Running them anyway would hand the job token to a sandbox for nothing, and GitLab's guard
#: (``shells/abstract.go`` ``guardRunnerCommand``: "Missing gitlab-runner. … is disabled.") would let the job
#: pass without the cache or artifacts it asked for. They are refused, in the job log, as the job's failure.
REFUSED_STAGES = frozenset(
    {
        "restore_cache",
        "download_artifacts",
        "archive_cache",
        "archive_cache_on_failure",
        "upload_artifacts_on_success",
        "upload_artifacts_on_failure",
    }
)

#: refusals of what the job asks (its script, image or variables): the job's failure, shown in its log.
#: Anything else (the controller unreachable, 5xx, SANDBOX.*, a token refused) is ours: a system failure.
BUILD_FAILURE_CODES = frozenset(
    {
        "POLICY.DENIED",
        "APPROVAL.DENIED",
        "APPROVAL.TIMEOUT",
        "APPROVAL.ABORTED",
        "CI.UNSUPPORTED",
        "INPUT.INVALID",
        "REQUEST.TOO_LARGE",
        "EXECUTION.CANCELLED",
        # the job used what its bounding grant allowed (a runaway job): stopped, its own doing
        "GRANT.EXHAUSTED",
        "SANDBOX.GRANT_LIMIT",
        # the script ran and hit the profile's limits: its own doing
        "SANDBOX.TIMEOUT",
        "SANDBOX.OOM",
        "SANDBOX.PIDS_LIMIT",
        "SANDBOX.OUTPUT_LIMIT",
        "SANDBOX.WORKSPACE_LIMIT",
    }
)

_STAGE_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_JOB_ID = re.compile(JOB_ID_PATTERN)


def failure_kind(code: str) -> Literal["build", "system"]:
    """Whose failure an error code is: the job's (``build``) or ours (``system``, which the runner retries)."""
    return "build" if code in BUILD_FAILURE_CODES else "system"


@dataclass(frozen=True, slots=True)
class ExitCodes:
    """The exit codes and the exit-code file the runner gave this stage (``command.go``)."""

    build_failure: int
    system_failure: int
    exit_code_file: str | None

    @classmethod
    def of(cls, env: Mapping[str, str]) -> ExitCodes:
        """Read from the environment. The runner always sets both codes; run by hand without them, 1 and 2
        (the runner's values today) keep the driver usable."""
        return cls(
            build_failure=_code(env.get("BUILD_FAILURE_EXIT_CODE"), 1),
            system_failure=_code(env.get("SYSTEM_FAILURE_EXIT_CODE"), 2),
            exit_code_file=env.get("BUILD_EXIT_CODE_FILE") or None,
        )

    def build_failed(self, script_exit: int | None) -> int:
        """The script failed: its code written where the runner reads it (only the integer: anything more
        is "unknown Custom executor executable exit code"), the build failure code returned."""
        if script_exit is not None and self.exit_code_file:
            with open(self.exit_code_file, "w", encoding="ascii") as out:
                out.write(f"{script_exit}\n")
        return self.build_failure


def _code(text: str | None, default: int) -> int:
    try:
        value = int(text or "")
    except ValueError:
        return default
    return value if 0 < value < 256 else default


def config_document(version: str) -> dict[str, Any]:
    """What ``config_exec`` prints: the builds and cache directories inside the job's workspace (one per job,
    so never shared), the driver's name for the job log's ``Using custom executor`` line, bash."""
    return {
        "builds_dir": BUILDS_DIR,
        "cache_dir": CACHE_DIR,
        "builds_dir_is_shared": False,
        "driver": {"name": DRIVER_NAME, "version": version},
        "job_env": {},
        "shell": "bash",
    }


def script_path(container_path: str, stage: str) -> str:
    """Where a stage's script is in the sandbox: ``<mount>/_sandbox/<stage>.sh`` (a stage name from the
    runner; anything but a plain name is refused rather than made into a path)."""
    if _STAGE_NAME.fullmatch(stage) is None or stage in (".", ".."):
        raise InputInvalid("the stage name must be 1-128 of letters, digits, '_', '.' and '-'")
    return f"{container_path.rstrip('/')}/{SCRIPTS_DIR}/{stage}.sh"


def read_script(path: str) -> bytes:
    """The stage script the runner wrote on this host, at most what a request carries (INPUT.INVALID past it)."""
    try:
        with open(path, "rb") as script:
            data = script.read(MAX_SCRIPT_BYTES + 1)
    except OSError as err:
        raise InputInvalid(f"the stage script {path} cannot be read: {err.strerror or err}") from None
    if len(data) > MAX_SCRIPT_BYTES:
        raise InputInvalid(f"the stage script is larger than {MAX_SCRIPT_BYTES} bytes")
    return data


def state_dir(env: Mapping[str, str]) -> Path:
    """Where the job's state is kept between the stages (each a process of its own): ``SANDBOX_CI_STATE_DIR``,
    else ``$TMPDIR/sandbox-gitlab`` (the runner sets TMPDIR to the job's own temporary directory, removed
    with the job)."""
    given = env.get("SANDBOX_CI_STATE_DIR")
    if given:
        return Path(given)
    return Path(env.get("TMPDIR") or tempfile.gettempdir()) / "sandbox-gitlab"


@dataclass(frozen=True, slots=True)
class JobState:
    """What ``prepare`` learnt and the later stages need: the controller's job and where its steps see the
    workspace. Kept as ``<state dir>/<CI_JOB_ID>.json``, mode 0600."""

    job_id: str
    container_path: str
    image: str
    profile: str

    @staticmethod
    def path(env: Mapping[str, str]) -> Path:
        ci_job_id = env.get(f"{GITLAB_PREFIX}CI_JOB_ID") or ""
        if _JOB_ID.fullmatch(ci_job_id) is None:
            raise InputInvalid(f"{GITLAB_PREFIX}CI_JOB_ID is missing or not a job id")
        return state_dir(env) / f"{ci_job_id}.json"

    def save(self, env: Mapping[str, str]) -> Path:
        """Written whole (a temporary file renamed over), readable by this user only."""
        target = self.path(env)
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(
                {
                    "job_id": self.job_id,
                    "container_path": self.container_path,
                    "image": self.image,
                    "profile": self.profile,
                },
                out,
            )
        os.replace(temporary, target)
        return target

    @classmethod
    def load(cls, env: Mapping[str, str]) -> JobState | None:
        """The state ``prepare`` kept, None when there is none (prepare failed, or cleanup ran)."""
        try:
            raw = json.loads(cls.path(env).read_text(encoding="utf-8"))
            return cls(
                job_id=str(raw["job_id"]),
                container_path=str(raw["container_path"]),
                image=str(raw["image"]),
                profile=str(raw["profile"]),
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise InputInvalid(f"the driver's state file is unreadable: {type(err).__name__}") from None

    @classmethod
    def remove(cls, env: Mapping[str, str]) -> None:
        cls.path(env).unlink(missing_ok=True)
