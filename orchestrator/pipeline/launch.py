"""From an authorized request to a LaunchSpec: argv, working directory, environment, its owner and deadline."""

from __future__ import annotations

import os
import posixpath
import time
from pathlib import Path

from orchestrator.backends.base import CommandLaunch, LaunchSpec, SessionLaunch, Workspace
from orchestrator.domain.errors import InputInvalid, PolicyDenied, SandboxUnavailable
from orchestrator.domain.requests import (
    ApplyPatchRequest,
    ExecCommandRequest,
    FileWriteRequest,
    Request,
    ShellCommandRequest,
    ShellExecRequest,
    ShellRequest,
    SkillExecRequest,
)
from orchestrator.gate.interactive import is_interactive_shell
from orchestrator.pipeline import externals
from orchestrator.pipeline.this_process import owner_label
from orchestrator.profiles import ResolvedProfile
from orchestrator.profiles.models import env_admitted, is_code_loading_env

SHELL = ("/bin/bash", "-c")
# The file tools run in a sandbox like any command (the workspace is the sandbox's, links and all, and the write
# is one of the run's side effects); their content arrives on stdin, never in the argv or the environment. The
# programs are fixed: the path is an argument, never part of a script.
WRITE_FILE = (
    "/bin/sh",
    "-c",
    'umask 022; dir=$(dirname -- "$1") && mkdir -p -- "$dir" && cat > "$1"',
    "file_write",
)
# git's apply (in the default image; it works outside a repository too): a unified or git diff, all or nothing
APPLY_PATCH = ("git", "apply", "--verbose", "--whitespace=nowarn", "-")
# an orphan is collected once its deadline has passed by this much (teardown has time to finish)
DEADLINE_GRACE_S = 30.0


def command_argv(request: Request) -> tuple[str, ...]:
    """Exactly what runs: an argv as given, a shell string through bash -c as given."""
    if isinstance(request, (ShellExecRequest, SkillExecRequest)):
        return tuple(request.argv)
    if isinstance(request, ShellRequest):
        return tuple(request.command)
    if isinstance(request, ShellCommandRequest):
        return (*SHELL, request.command)
    if isinstance(request, ExecCommandRequest):
        return (*SHELL, request.cmd)
    if isinstance(request, FileWriteRequest):
        return (*WRITE_FILE, request.path)
    if isinstance(request, ApplyPatchRequest):
        return APPLY_PATCH
    raise InputInvalid(f"tool {request.tool!r} does not run a command in a sandbox")


def container_workdir(profile: ResolvedProfile, workspace: Path, cwd: str | None) -> str:
    """The working directory inside the container: always inside the workspace mount, and an
    existing directory of the workspace on the host (CVE-2024-21626 class: never left to the image)."""
    root = profile.workspace.container_path
    if not cwd:
        return root
    if cwd.startswith("/"):
        inside = posixpath.normpath(cwd)
        if inside != root and not inside.startswith(root.rstrip("/") + "/"):
            raise InputInvalid(f"cwd {cwd!r} is outside the workspace ({root})")
        relative = posixpath.relpath(inside, root)
    else:
        relative = posixpath.normpath(cwd)
    if relative == ".." or relative.startswith("../"):
        raise InputInvalid(f"cwd {cwd!r} leaves the workspace")
    host_dir = os.path.realpath(workspace / relative)
    real_root = os.path.realpath(workspace)
    if host_dir != real_root and not host_dir.startswith(real_root + os.sep):
        raise InputInvalid(f"cwd {cwd!r} resolves outside the workspace")
    if not os.path.isdir(host_dir):
        raise InputInvalid(f"cwd {cwd!r} is not a directory in the workspace")
    return posixpath.normpath(posixpath.join(root, relative))


def sandbox_env(profile: ResolvedProfile, requested: dict[str, str]) -> dict[str, str]:
    """Profile defaults plus the request's values for the names its env_allowlist admits (a name, or a glob
    such as ``*``, never a code-loading name); anything else is refused, never silently dropped (the caller
    would believe it was set)."""
    refused = sorted(name for name in requested if not env_admitted(profile.env_allowlist, name))
    if refused:
        code = [name for name in refused if is_code_loading_env(name)]
        never = (
            f"; {', '.join(code)} change{'s' if len(code) == 1 else ''} which code runs: never allowed" if code else ""
        )
        raise InputInvalid(
            f"env {', '.join(refused)} not allowed by profile {profile.name!r}"
            f" (allowed: {', '.join(profile.env_allowlist) or 'none'}{never})",
            details={"fields": [f"env.{k}" for k in refused]},
        )
    return {**profile.env, **requested}


def refuse_unavailable_escalations(request: Request) -> None:
    """Approved escalations this backend cannot give are refused, never silently dropped."""
    perms = request.sandbox_permissions
    if perms.network is True:
        raise SandboxUnavailable(
            "unrestricted network was approved, but a sandbox never gets one: name the hosts it needs "
            "(sandbox_permissions.network: [host:port, ...]), reached through the egress proxy"
        )
    if perms.extra_mounts:
        raise SandboxUnavailable("extra mounts were approved but are not supported in this release")


def check_session_allowed(profile: ResolvedProfile, argv: tuple[str, ...]) -> None:
    """POLICY.DENIED when the profile takes no sessions, or no interactive shell and ``argv`` starts one."""
    if not profile.sessions_enabled:
        raise PolicyDenied(f"profile {profile.name!r} does not allow interactive sessions (sessions.enabled)")
    if not profile.interactive_shells and is_interactive_shell(argv):
        raise PolicyDenied(
            f"profile {profile.name!r} does not allow an interactive shell or REPL in a session "
            "(sessions.interactive_shells): run the command itself instead"
        )


def launch_spec(
    execution_id: str,
    request: Request,
    profile: ResolvedProfile,
    workspace: Path,
    *,
    now: float | None = None,
    session: bool = False,
) -> LaunchSpec:
    """The spec of ``request``'s command: a one-shot command, or with ``session`` one whose input stays open."""
    if isinstance(request, ShellExecRequest) and request.externals:  # a CI job's runner externals, read-only
        profile = profile.with_read_only_mounts((externals.mount(workspace),))
    started = time.time() if now is None else now
    deadline = started + profile.wall_timeout_s + DEADLINE_GRACE_S
    return LaunchSpec(
        execution_id=execution_id,
        argv=command_argv(request),
        profile=profile,
        workspace=Workspace(str(workspace)),
        workdir=container_workdir(profile, workspace, request.cwd),
        env=sandbox_env(profile, dict(request.env)),
        owner=owner_label(),
        deadline_unix=deadline,
        kind=SessionLaunch(tty=request.tty) if session else CommandLaunch(stdin=_stdin(request), tty=request.tty),
    )


def _stdin(request: Request) -> bytes | None:
    """What a file tool's program reads: the content or the patch (the gate saw it; evidence keeps its digest)."""
    if isinstance(request, FileWriteRequest):
        return request.content.encode("utf-8")
    if isinstance(request, ApplyPatchRequest):
        return request.patch.encode("utf-8")
    return None
