"""From an authorized request to a LaunchSpec: argv, working directory, environment, its owner and deadline."""

from __future__ import annotations

import contextlib
import os
import posixpath
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from orchestrator.backends.base import CommandLaunch, LaunchSpec, SessionLaunch, Workspace
from orchestrator.domain.errors import ConfigInvalid, InputInvalid, OrchestratorError, PolicyDenied, SandboxUnavailable
from orchestrator.domain.requests import (
    EXEC_TOOLS,
    ExecCommandRequest,
    Request,
    ShellCommandRequest,
    ShellExecRequest,
    ShellRequest,
    SkillExecRequest,
)
from orchestrator.gate.interactive import is_interactive_shell
from orchestrator.gate.paths import SYSTEM_PREFIXES
from orchestrator.pipeline.governing import Governing, first_exposure
from orchestrator.profiles import ProfileRegistry, ResolvedProfile

SHELL = ("/bin/bash", "-c")
# an orphan is collected once its deadline has passed by this much (teardown has time to finish)
DEADLINE_GRACE_S = 30.0


def _process_start_ticks(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # field 22 (starttime); the command name in field 2 may contain spaces, so split after ')'
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "0"


def _host_id() -> str:
    """This host *and* pid namespace: a controller in a container (with the host's network, so the same
    host name) has pids a reaper outside it must not look up in its own /proc, and the other way round."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}~pidns{namespace}"


#: set by the Helm chart to the controller pod's namespace/name: unique per replica, and the same after a
#: container restart (a reaper on the cluster asks the owner's Lease whether it lives)
CONTROLLER_ID_ENV = "SANDBOX_CONTROLLER_ID"


def owner_label() -> str:
    """``$SANDBOX_CONTROLLER_ID`` where it is set (a controller pod); else ``host~pidns:pid:start``, naming
    this controller process so that a reaper can tell if it is gone (a recycled pid has another start time)."""
    configured = os.environ.get(CONTROLLER_ID_ENV, "").strip()
    if configured:
        return configured
    pid = os.getpid()
    return f"{_host_id()}:{pid}:{_process_start_ticks(pid)}"


# executions this process is running now: a sandbox it owns that is not among them was left behind
# (e.g. its removal failed while the engine was down) and is an orphan although its owner lives
_ACTIVE: set[str] = set()
# every workspace (real path) a sandbox of this process was given: what governs later runs must stay
# out of all of them, even if a path to it changes later (a reloaded policy, a moved link)
_MOUNTED: set[str] = set()


@contextlib.contextmanager
def active_execution(execution_id: str, workspace: str | os.PathLike[str] | None = None) -> Iterator[None]:
    if workspace is not None:
        _MOUNTED.add(os.path.realpath(workspace))
    _ACTIVE.add(execution_id)
    try:
        yield
    finally:
        _ACTIVE.discard(execution_id)


def hold_active(sandbox_key: str) -> None:
    """A sandbox labelled ``sandbox_key`` (a pre-started one's pool id) is this process's until released:
    the orphan collector leaves it alone (see ``reaper.orphan_reason``)."""
    _ACTIVE.add(sandbox_key)


def release_active(sandbox_key: str) -> None:
    _ACTIVE.discard(sandbox_key)


def is_active_here(execution_id: str | None) -> bool:
    return execution_id in _ACTIVE


def owner_alive(owner: str) -> bool | None:
    """True/False for an owner on this host and in this pid namespace; None when it lives elsewhere
    (another host or container: only its deadline counts)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != _host_id() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    if not os.path.exists(f"/proc/{pid}"):
        return False
    return _process_start_ticks(pid) == start


# never mounted as a workspace (read-write, recursively), nor anything that contains them: the host's system
# directories and our own state; the backend adds its engine's (``Capabilities.protected_paths``)
_PROTECTED = (
    *SYSTEM_PREFIXES,
    "/libx32",
    "/run",
    "/var/run",
    "/var/lib/sandbox-orchestrator",
    "/root/.ssh",
)
#: the service's default workspace root (``<state dir>/workspaces``), the one place below a protected
#: directory where workspaces may live: what governs (the store, evidence) is kept out of them separately
_WORKSPACE_ROOTS = ("/var/lib/sandbox-orchestrator/workspaces",)


def check_workspace(workspace: Path, *, governing: Iterable[Governing] = (), protected: Iterable[str] = ()) -> None:
    """Refuse a workspace that would hand the sandbox the host: /, system directories, the engine's
    socket or state (``protected``: the backend's ``Capabilities.protected_paths``), or any directory that
    contains one of them; or that would put within its reach what governs later runs (``governing``: the
    policy file, profiles, evidence, approval queue, state directories, our own code — see
    ``service.governing``): INPUT.INVALID naming the file. What governs must also have stayed out of every
    earlier workspace of this process: CONFIG.INVALID."""
    real = os.path.realpath(workspace)
    protected = [*_PROTECTED, *protected]
    if real == "/":
        raise InputInvalid("the workspace cannot be / (the whole host would be mounted into the sandbox)")
    in_a_workspace_root = any(real.startswith(root + "/") for root in _WORKSPACE_ROOTS)
    for path in protected:
        if (real == path or real.startswith(path + "/")) and not in_a_workspace_root:
            raise InputInvalid(f"the workspace {real} is a system directory ({path}); use a project directory")
        if path.startswith(real + "/"):
            raise InputInvalid(f"the workspace {real} contains {path}; use a project directory")
    items = list(governing)
    exposed = first_exposure(items, [real])
    if exposed is not None:
        raise InputInvalid(
            f"the workspace {real} cannot be used: {exposed}; keep it outside every workspace",
            details={"file": exposed.item.path},
        )
    check_out_of_earlier_workspaces(items)


def check_out_of_earlier_workspaces(items: Iterable[Governing]) -> None:
    """What governs must not lie where an earlier sandbox of this process could have written it — a
    reloaded policy file, a path whose link was moved since (CONFIG.INVALID naming it)."""
    exposed = first_exposure(items, sorted(_MOUNTED))
    if exposed is not None:
        raise ConfigInvalid(
            f"{exposed} (a workspace an earlier sandbox of this process was given): it may have been "
            "rewritten there; move it out of every workspace and restart",
            details={"file": exposed.item.path},
        )


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
    """Profile defaults plus the request's values for allowlisted names; anything else is refused,
    never silently dropped (the caller would believe it was set)."""
    refused = sorted(set(requested) - set(profile.env_allowlist))
    if refused:
        raise InputInvalid(
            f"env {', '.join(refused)} not allowed by profile {profile.name!r}"
            f" (allowed: {', '.join(profile.env_allowlist) or 'none'})",
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


def profile_egress(profiles: ProfileRegistry, request: Request, default_profile: str) -> tuple[str, ...]:
    """The hosts the profile ``request`` runs with may reach (part of what an exec tool asks); () for other
    tools, or a profile unknown here (its run refuses it, on the record)."""
    if request.tool not in EXEC_TOOLS:
        return ()
    try:
        return profiles.get(request.profile or default_profile).network.allow
    except OrchestratorError:
        return ()


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
        kind=SessionLaunch(tty=request.tty) if session else CommandLaunch(tty=request.tty),
    )
