"""A CI runner's externals (the GitHub runner's ``externals``: the node its JavaScript actions run on), read-only
in a job's sandboxes at ``/__e`` — where the runner mounts them in its own job containers.

Policies trust that node (``trusted_program_dirs: [/__e/node20/bin]``), so nothing a sandbox can write may ever
become it. The deployment puts a copy of the runner's externals where no sandbox reaches: the directory
``.ci-externals/<workspace>`` beside the runner's work directory, in its tenant's directory
(``<service.workspaces>/<tenant>/.ci-externals/<workspace>``). A workspace's name never starts with a dot
(``Workspaces.path``), so no sandbox's mount — a workspace, on Docker or as a claim sub-path on Kubernetes — is
that directory or holds it; what a step writes in its work directory is never taken from there. On Kubernetes
the runner pod's init container copies the runner's ``/home/runner/externals`` into it; on Docker the host's
deployment does (docs/ci.md). It is the runner's, like its work directory: the controller never moves, changes
or removes it.

``check`` (at prepare_job, and when a restarted controller rebuilds a job) holds the directory to what the
deployment makes: a real directory, and ``.ci-externals`` above it one too (opened with O_NOFOLLOW: no link
at either), each owned by root, the controller's user or the owner of the tenant's directory (whoever makes the
tenant's directories), writable by that owner only; no file in it with another hard link (a file shared with a
workspace would be written through it) and no link in it leading out of it. ``mount`` (each step's launch)
checks the two directories again, and gives the step the directory read-only at ``/__e``.

The mount's source is part of the step's resolved profile (``read_only_mounts``), so of its profile hash and its
pool key: the same directory for every job of the workspace. A sandbox pre-started for one job's steps is
retired when that job closes (``Orchestrator.retire_workspace``), whichever way: never handed to a later job's
step; and what it mounts is the runner's own directory, which no sandbox writes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from orchestrator.domain.errors import CiUnsupported, SandboxUnavailable
from orchestrator.profiles import ResolvedMount

#: where the runner's externals are inside its job containers (``ContainerInfo.cs``: /__e), and in a sandbox
TARGET = "/__e"
#: the directory of a tenant's directory that holds its runners' externals (one directory per workspace)
HOLDER = ".ci-externals"


def location(workspace: Path) -> Path:
    """Where the deployment puts the runner's externals for the runner whose work directory is ``workspace``."""
    return workspace.parent / HOLDER / workspace.name


def layout(workspace: Path) -> str:
    """The place, as docs/ci.md names it: ``<service.workspaces>/<tenant>/.ci-externals/<workspace>``."""
    return f"<service.workspaces>/{workspace.parent.name}/{HOLDER}/{workspace.name}"


def mount(workspace: Path) -> ResolvedMount:
    """The read-only mount of the runner's externals at /__e; SANDBOX.UNAVAILABLE when the directory is not (or
    no longer) as ``check`` found it at prepare_job."""
    problem = _directories(workspace, walk=False)
    if problem is not None:
        raise SandboxUnavailable(f"the runner's externals for the workspace {workspace.name!r}: {problem}")
    return ResolvedMount(source=str(location(workspace)), target=TARGET)


def check(workspace: Path) -> ResolvedMount:
    """The runner's externals checked whole (the directories, every file and link in them) and their mount;
    CI.UNSUPPORTED naming the deployment's layout otherwise (missing, a link, another owner, a hard link …)."""
    problem = _directories(workspace, walk=True)
    if problem is not None:
        raise CiUnsupported(
            f"SANDBOX_EXTERNALS: the runner's externals must be a directory the deployment copies them into, beside"
            f" the work directory where no sandbox reaches: {layout(workspace)} ({problem}; docs/ci.md)",
            details={"fields": ["env.SANDBOX_EXTERNALS"]},
        )
    return ResolvedMount(source=str(location(workspace)), target=TARGET)


def _directories(workspace: Path, *, walk: bool) -> str | None:
    """What is wrong with the holder and the externals directory (None: nothing), opened one below the other
    from the tenant's directory, never through a link."""
    tenant = workspace.parent
    fds: list[int] = []
    try:
        try:
            fds.append(os.open(tenant, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW))
        except OSError as err:
            return f"the tenant's directory {tenant} cannot be opened ({err.strerror})"
        owners = {0, os.geteuid(), os.fstat(fds[0]).st_uid}
        for name in (HOLDER, workspace.name):
            shown = f"{HOLDER}/{workspace.name}" if name == workspace.name else HOLDER
            try:
                st = os.lstat(name, dir_fd=fds[-1])
            except FileNotFoundError:
                return f"{shown} does not exist"
            if not stat.S_ISDIR(st.st_mode):
                return f"{shown} is not a directory" + (" (a link)" if stat.S_ISLNK(st.st_mode) else "")
            try:
                fds.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
            except OSError as err:
                return f"{shown} cannot be opened ({err.strerror})"
            st = os.fstat(fds[-1])  # what was opened: the same directory, or the check fails above
            if st.st_uid not in owners:
                return f"{shown} is owned by uid {st.st_uid}, not by root, the controller's or the tenant directory's"
            if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return f"{shown} is writable by others than its owner (mode {stat.S_IMODE(st.st_mode):o})"
        return _content(location(workspace)) if walk else None
    finally:
        for fd in fds:
            os.close(fd)


def _content(directory: Path) -> str | None:
    """A file with another hard link (a workspace's file would be written through it), or a link that leads out
    of the tree (to a sandbox's own paths: /__w), in ``directory``."""
    try:
        for root, dirs, files in os.walk(directory):  # links to directories are not followed
            for name in [*dirs, *files]:
                path = os.path.join(root, name)
                relative = os.path.relpath(path, directory)
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                    return f"it holds {relative!r}, a file with another hard link"
                if stat.S_ISLNK(st.st_mode) and not _resolves_inside(directory, relative):
                    return f"it holds {relative!r}, a link to {os.readlink(path)!r}, outside it"
    except OSError as err:
        return f"it cannot be read ({err.strerror})"
    return None


def _resolves_inside(tree: Path, link: str) -> bool:
    """Whether the link ``link`` (relative to ``tree``) resolves inside ``tree``, where it is mounted (/__e) as
    on this host: component by component, every link followed, never above the tree, never an absolute one."""
    resolved = link.split("/")[:-1]
    todo: list[str] = []
    target = os.readlink(tree / link)
    for _ in range(1024):  # links of links: a loop is no way inside
        if target.startswith("/"):
            return False
        todo = [*target.split("/"), *todo]
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not resolved:
                    return False
                resolved.pop()
                continue
            here = tree.joinpath(*resolved, part)
            if here.is_symlink():
                target = os.readlink(here)
                break
            resolved.append(part)
        else:
            return True
    return False
