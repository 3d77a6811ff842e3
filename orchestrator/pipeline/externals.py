"""A CI runner's externals (the GitHub runner's ``externals``: the node its JavaScript actions run on), read-only
in a job's sandboxes at ``/__e`` — where the runner mounts them in its own job containers.

The deployment puts a copy of the runner's externals into the runner's work directory (the job's workspace,
``SANDBOX_EXTERNALS``). A directory of the workspace is the sandboxes' to write, and a bind mount follows
whatever link stands at its source when the engine mounts it: so the controller *takes* the copy out of the
workspace when the job opens (a rename on the same storage: no copy), to a place beside the workspace that no
workspace is (``.ci-externals/<workspace>/<take>``: a workspace's name never starts with a dot), checks what it
took (a real directory; no file with another hard link, which a sandbox could still write through the workspace),
and every step of the job gets that directory read-only at ``/__e``. It is removed when the job is closed, and
replaced when the next job of the same workspace opens. Each take has a name of its own: the mount's source,
and so the profile hash and the pool's key, differ from one take to the next (a sandbox pre-started with an
earlier job's externals is never handed to a later job's step).
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from pathlib import Path

from orchestrator.domain.errors import CiUnsupported, SandboxUnavailable
from orchestrator.profiles import ResolvedMount

#: where the runner's externals are inside its job containers (``ContainerInfo.cs``: /__e), and in a sandbox
TARGET = "/__e"
#: the directory beside a tenant's workspaces that holds the externals taken from them
HOLDER = ".ci-externals"


def location(workspace: Path) -> Path:
    """Where the externals taken from ``workspace`` are kept (the one take in it)."""
    return workspace.parent / HOLDER / workspace.name


def drop(workspace: Path) -> None:
    """Remove the externals taken from ``workspace`` (none: nothing to do). Never follows a link."""
    holder = workspace.parent / HOLDER
    kept = location(workspace)
    try:
        mode = os.lstat(kept).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(os.lstat(holder).st_mode):
        raise SandboxUnavailable(f"{holder} is not a directory")
    if stat.S_ISDIR(mode):
        shutil.rmtree(kept)  # fd-based on Linux: never follows a link inside
    else:
        os.unlink(kept)


def take(workspace: Path, name: str) -> bool:
    """Take the directory ``name`` of ``workspace`` (the runner's externals) out of it, replacing what an
    earlier job of the workspace left; False when the workspace has no such entry (a step that needs the
    externals is then refused). CI.UNSUPPORTED, and nothing kept, for anything but a real directory whose files
    have no other link."""
    drop(workspace)
    source = workspace / name
    try:
        os.lstat(source)
    except FileNotFoundError:
        return False
    holder = workspace.parent / HOLDER
    holder.mkdir(mode=0o711, exist_ok=True)
    if not stat.S_ISDIR(os.lstat(holder).st_mode):
        raise SandboxUnavailable(f"{holder} is not a directory")
    kept = location(workspace)
    kept.mkdir(mode=0o711)
    taken = kept / uuid.uuid4().hex
    try:
        os.rename(source, taken)  # whatever stands there now is what is checked and kept: nobody else reaches it
    except OSError as err:
        drop(workspace)
        raise CiUnsupported(
            f"SANDBOX_EXTERNALS {name!r} cannot be taken out of the work directory ({err.strerror}): it must be a"
            " directory on the workspace's own storage",
            details={"fields": ["env.SANDBOX_EXTERNALS"]},
        ) from None
    problem = _problem(taken)
    if problem is not None:
        drop(workspace)
        raise CiUnsupported(
            f"SANDBOX_EXTERNALS {name!r} {problem}: copy the runner's externals there (cp -r), never a link",
            details={"fields": ["env.SANDBOX_EXTERNALS"]},
        )
    return True


def _problem(kept: Path) -> str | None:
    if not stat.S_ISDIR(os.lstat(kept).st_mode):
        return "is not a directory"
    for root, _dirs, files in os.walk(kept):  # links to directories are not followed
        for file in files:
            st = os.lstat(os.path.join(root, file))
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                return f"holds {os.path.relpath(os.path.join(root, file), kept)!r}, a file with another hard link"
    return None


def mount(workspace: Path) -> ResolvedMount:
    """The read-only mount of the externals taken from ``workspace`` (SANDBOX.UNAVAILABLE when none were)."""
    kept = location(workspace)
    for path in (kept.parent, kept):
        if not _directory(path):
            raise SandboxUnavailable(
                f"no runner externals were taken for the workspace {workspace.name!r} ({path} is not a directory)"
            )
    takes = os.listdir(kept)
    if len(takes) != 1 or not _directory(kept / takes[0]):
        raise SandboxUnavailable(f"no runner externals were taken for the workspace {workspace.name!r} ({kept})")
    return ResolvedMount(source=str(kept / takes[0]), target=TARGET)


def _directory(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
