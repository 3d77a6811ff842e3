"""What governs later commands stays out of every sandbox's reach.

A sandbox writes wherever its workspace lets it: new files, and renames over existing ones (which
needs only the directory to be writable, whoever owns the file). So anything that decides what a
later command may do or how it is contained must not be reachable from a workspace: the policy file
(``--config``), the profile directories (built-in and ``$SANDBOX_PROFILES_PATH``, with their
``seccomp/``), the approval queues (the runs' and the service's store, whatever the provider), the evidence
file, the state directories (the warm server's
socket), the orchestrator's own code and the Python it runs on. Otherwise a command that policy
allows rewrites the policy, and the next run follows it — a rewritten profile even drops gVisor.

Each path is resolved as the kernel resolves it, link by link. It is out of reach when neither the
place it resolves to nor any symbolic link on the way lies in the workspace (a link inside the
workspace can be pointed elsewhere by the sandbox), and, for a directory, when the workspace is not
inside it either (the sandbox could write among its contents). A file that has several hard links
and that a non-root user can write is refused as well: another name of it may lie in a workspace.
"""

from __future__ import annotations

import os
import site
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.domain.errors import ConfigInvalid, InputInvalid
from orchestrator.domain.statedir import state_dir
from orchestrator.gate.paths import SYSTEM_PREFIXES
from orchestrator.pipeline.this_process import THIS_PROCESS

# the orchestrator package itself (this file is orchestrator/pipeline/governing.py): never the root module
# imported for its path, which would pull in the whole public API
_PACKAGE = Path(__file__).parents[1]

_MAX_LINKS = 40  # as the kernel's limit on links followed in one lookup


@dataclass(frozen=True, slots=True)
class Governing:
    """A path whose contents decide what later commands may do."""

    what: str  # for messages: "the policy file (--config)"
    path: str
    tree: bool = False  # a directory: nothing inside it may be a workspace either
    fix: str = "use a workspace that does not contain it"  # what to do when a workspace reaches it


#: the fix when a workspace reaches what the orchestrator is installed from
_NOT_THE_CHECKOUT = "use a project directory as the workspace, never the orchestrator's own checkout or environment"


@dataclass(frozen=True, slots=True)
class Resolution:
    links: tuple[str, ...]  # where each symbolic link followed lives (its own location, in a real directory)
    real: str  # where the path leads (links resolved; a missing tail kept as given)


def resolve(path: str | os.PathLike[str]) -> Resolution:
    """Resolve ``path`` component by component, recording every symbolic link followed."""
    pending = os.path.abspath(path).split("/")
    current = "/"
    links: list[str] = []
    while pending:
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, name)
        try:
            st = os.lstat(candidate)
        except OSError:  # the rest does not exist (yet): it lies where the path says
            return Resolution(tuple(links), os.path.normpath(os.path.join(candidate, *pending)))
        if not stat.S_ISLNK(st.st_mode):
            current = candidate
            continue
        links.append(candidate)
        if len(links) > _MAX_LINKS:
            break
        target = os.readlink(candidate)
        if target.startswith("/"):
            current = "/"
        pending = target.split("/") + pending
    return Resolution(tuple(links), current)


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


@dataclass(frozen=True, slots=True)
class Located:
    """A governing path, resolved once, to be compared with any number of workspaces."""

    item: Governing
    where: Resolution
    shared_writable: str | None  # why another name of the file could be written, if it could


def locate(item: Governing) -> Located:
    where = resolve(item.path)
    try:
        st = os.stat(where.real)
    except OSError:
        return Located(item, where, None)
    several_names = stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and (st.st_uid != 0 or st.st_mode & 0o022)
    why = (
        f"it has {st.st_nlink} hard links and a non-root user can write it: another name of it may lie in a workspace"
        if several_names
        else None
    )
    return Located(item, where, why)


def exposure(located: Located, workspace: str) -> str | None:
    """How a sandbox with the (real) ``workspace`` could change the located item, or None."""
    item, where = located.item, located.where
    for link in where.links:
        if _within(link, workspace):
            return f"its path goes through the symbolic link {link}, which lies in the workspace {workspace}"
    if _within(where.real, workspace):
        shown = "" if where.real == os.path.abspath(item.path) else f" (resolved: {where.real})"
        return f"it lies in the workspace {workspace}{shown}"
    if item.tree and _within(workspace, where.real):
        return f"the workspace {workspace} lies inside it ({where.real})"
    return located.shared_writable


def policy_file(path: str | os.PathLike[str]) -> Governing:
    return Governing("the policy file (--config)", os.path.abspath(path), fix="keep the config outside the workspace")


def package_and_python() -> list[Governing]:
    """The orchestrator's own code and the Python it runs on: a sandbox that rewrote them would run
    as this user, on the host, at the next command."""
    items = [
        Governing("the orchestrator's code", str(_PACKAGE), tree=True, fix=_NOT_THE_CHECKOUT),
        Governing("the Python environment (sys.prefix)", sys.prefix, tree=True, fix=_NOT_THE_CHECKOUT),
        Governing("the Python installation (sys.base_prefix)", sys.base_prefix, tree=True, fix=_NOT_THE_CHECKOUT),
    ]
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and os.path.isdir(user_site):
        items.append(Governing("the user's site-packages", user_site, tree=True, fix=_NOT_THE_CHECKOUT))
    return items


def approval_queue(path: str | os.PathLike[str]) -> Governing:
    return Governing(
        "the approval queue (approvals.queue_path)", os.path.abspath(path), fix="keep the queue outside the workspace"
    )


def service_store(path: str | os.PathLike[str]) -> Governing:
    """The service's state store: its asks wait there and its approvers' answers land there."""
    return Governing(
        "the service's store (service.store)",
        os.path.abspath(path),
        fix="keep the service's store outside the workspace",
    )


def state_directories() -> list[Governing]:
    """This run's state directory and the default one (another run may use it): the warm server's
    socket, the approval queue, the evidence. A workspace may lie inside one (its files are named,
    never walked), not contain it."""
    return [
        Governing(
            "the orchestrator's own state directory (SANDBOX_STATE_DIR)",
            os.path.abspath(d),
            fix="use a workspace that does not contain the state directory",
        )
        for d in dict.fromkeys((state_dir(), state_dir({})))
    ]


def governing_paths(
    *,
    evidence: str | os.PathLike[str],
    profile_dirs: Iterable[str | os.PathLike[str]] = (),
    extra: Iterable[Governing] = (),
) -> list[Governing]:
    """Everything that governs an orchestrator's runs, named for messages: the state directories, the
    evidence file, ``extra`` (what its config names: the policy file, the approval queue), the profile
    directories, the code."""
    evidence_file = Governing(
        "the evidence file (--evidence, SANDBOX_EVIDENCE_PATH)",
        os.path.abspath(evidence),
        fix="keep the evidence file outside the workspace",
    )
    items = [*state_directories(), evidence_file, *extra]
    items.extend(
        Governing(
            "the profiles directory",
            os.path.abspath(d),
            tree=True,
            fix=f"{_NOT_THE_CHECKOUT}; keep SANDBOX_PROFILES_PATH's directories outside it",
        )
        for d in profile_dirs
    )
    items.extend(package_and_python())
    return items


@dataclass(frozen=True, slots=True)
class Exposed:
    item: Governing
    why: str

    def __str__(self) -> str:
        return f"{self.item.what} {self.item.path} is within a sandbox's reach: {self.why}"


def first_exposure(items: Iterable[Governing], workspaces: Iterable[str]) -> Exposed | None:
    """The first item a sandbox with one of the (real) ``workspaces`` could change, or None. Each
    item is resolved once, whatever the number of workspaces."""
    spaces = list(workspaces)
    if not spaces:
        return None
    for item in items:
        located = locate(item)
        for workspace in spaces:
            why = exposure(located, workspace)
            if why is not None:
                return Exposed(item, why)
    return None


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
    the rest of this module): INPUT.INVALID naming the file. What governs must also have stayed out of every
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
            f"the workspace {real} cannot be used: {exposed} (a sandbox could rewrite it, and so what later runs"
            f" may do); {exposed.item.fix}",
            details={"file": exposed.item.path},
        )
    check_out_of_earlier_workspaces(items)


def check_out_of_earlier_workspaces(items: Iterable[Governing]) -> None:
    """What governs must not lie where an earlier sandbox of this process could have written it — a
    reloaded policy file, a path whose link was moved since (CONFIG.INVALID naming it)."""
    exposed = first_exposure(items, THIS_PROCESS.mounted())
    if exposed is not None:
        raise ConfigInvalid(
            f"{exposed} (a workspace an earlier sandbox of this process was given): it may have been "
            "rewritten there; move it out of every workspace and restart",
            details={"file": exposed.item.path},
        )
