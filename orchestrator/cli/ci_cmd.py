"""sandboxctl ci: the CI runners' front doors. ``ci github hook-path`` names the container hook file the
Actions runner runs (ACTIONS_RUNNER_CONTAINER_HOOKS); ``ci gitlab config|prepare|run|cleanup`` is GitLab
Runner's custom executor driver (config_exec, prepare_exec, run_exec, cleanup_exec). The driver is imported
only when a stage runs: the runner starts one process per stage."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from orchestrator.cli.output import Subparsers

_PACKAGE = "sandbox-orchestrator"


def register(sub: Subparsers) -> None:
    ci = sub.add_parser("ci", help="CI runners' front doors: the GitHub container hook, the GitLab driver")
    kinds = ci.add_subparsers(dest="ci_kind", metavar="RUNNER")
    kinds.required = True

    github = kinds.add_parser("github", help="GitHub Actions runner container hooks")
    github_sub = github.add_subparsers(dest="github_command", metavar="COMMAND")
    github_sub.required = True
    hook_path = github_sub.add_parser(
        "hook-path", help="print the hook file's absolute path (for ACTIONS_RUNNER_CONTAINER_HOOKS)"
    )
    hook_path.set_defaults(handler=handle_hook_path)

    gitlab = kinds.add_parser("gitlab", help="GitLab Runner custom executor driver (one stage per call)")
    stages = gitlab.add_subparsers(dest="gitlab_stage", metavar="STAGE")
    stages.required = True
    stages.add_parser("config", help="config_exec: print the executor's config JSON").set_defaults(
        handler=handle_gitlab, stage="config"
    )
    stages.add_parser("prepare", help="prepare_exec: open the job on the controller").set_defaults(
        handler=handle_gitlab, stage="prepare"
    )
    run = stages.add_parser("run", help="run_exec: run one stage script as a governed step")
    run.add_argument("script", metavar="SCRIPT", help="the stage script the runner wrote")
    run.add_argument("stage_name", metavar="STAGE", help="the stage's name (prepare_script, build_script …)")
    run.set_defaults(handler=handle_gitlab, stage="run")
    stages.add_parser("cleanup", help="cleanup_exec: close the job, remove its workspace").set_defaults(
        handler=handle_gitlab, stage="cleanup"
    )


def hook_file() -> Path:
    """orchestrator/ci/github/hook.js (package data), found without importing the controller's hook code."""
    import orchestrator.ci

    return Path(orchestrator.ci.__file__).resolve().parent / "github" / "hook.js"


def handle_hook_path(args: argparse.Namespace) -> int:
    from orchestrator.domain.errors import InternalError

    path = hook_file()
    if not path.is_file():
        raise InternalError(f"the hook file is missing from this installation: {path}")
    print(path)
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(_PACKAGE)
    except PackageNotFoundError:
        return "unknown"


def handle_gitlab(args: argparse.Namespace) -> int:
    from orchestrator.ci.gitlab import driver

    env = dict(os.environ)
    if args.stage == "config":
        return driver.config(env, _version())
    if args.stage == "prepare":
        return driver.prepare(env)
    code = driver.run(env, args.script, args.stage_name) if args.stage == "run" else driver.cleanup(env)
    sys.stdout.flush()
    return code
