"""A request's script file (``ShellExecRequest.script``, a CI step) placed in its workspace before the run.

The gate decided on the script's content; what runs must be exactly that content, not whatever the workspace
holds at that path (an earlier step, or anything else with access to the workspace, may have written there).
So the controller writes the content itself, where the argv names it, just before the sandbox starts (and
before the workspace's before-snapshot: it is not one of the run's side effects; the begin record names it
with its digest).

The workspace is the user's directory and may hold anything: every step is descriptor-relative and never
follows a link (``openat(O_NOFOLLOW)`` from the workspace's root down, a missing directory created there), and
the file is made under a fresh name and renamed over the path, so an existing file there — a hard link to a
file elsewhere, a symlink — is replaced, never written through.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import secrets
import stat
from pathlib import Path

from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.requests import ScriptFile

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_FIELDS = {"fields": ["script.path"]}
SCRIPT_MODE = 0o644
DIRECTORY_MODE = 0o755


def _refused(message: str) -> InputInvalid:
    return InputInvalid(f"script.path: {message}", details=dict(_FIELDS))


def script_target(script: ScriptFile, *, root: str, workdir: str) -> list[str]:
    """The components of where the script goes, relative to the workspace: its path read in the sandbox (absolute,
    or relative to the working directory ``workdir``), which must be a file inside the workspace mount ``root``."""
    inside = posixpath.normpath(posixpath.join(workdir, script.path))
    prefix = root.rstrip("/") + "/"
    if not inside.startswith(prefix) or inside == root:
        raise _refused(f"{script.path!r} is not a file inside the workspace ({root}): the script is written there")
    return posixpath.relpath(inside, root).split("/")


def _own_like(dir_fd: int, name: str) -> None:
    """A file or directory made here belongs to whoever owns the directory it is in (the sandbox's user owns its
    workspace), when this process may give it away."""
    if os.geteuid() != 0:
        return
    parent = os.fstat(dir_fd)
    os.chown(name, parent.st_uid, parent.st_gid, dir_fd=dir_fd, follow_symlinks=False)


def _subdirectory(parent: int, name: str, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except FileNotFoundError:
        pass
    except OSError as err:
        if err.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _refused(f"{shown!r} is not a directory of the workspace (a file or a symbolic link)") from None
        raise
    try:
        os.mkdir(name, DIRECTORY_MODE, dir_fd=parent)
        _own_like(parent, name)
    except FileExistsError:
        pass  # made meanwhile: opened below like any other (never followed if it is a link)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as err:
        if err.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _refused(f"{shown!r} is not a directory of the workspace (a file or a symbolic link)") from None
        raise


def _replace(dir_fd: int, name: str, data: bytes, shown: str) -> None:
    temporary = f".sandbox-script-{secrets.token_hex(8)}"
    fd = os.open(temporary, _FILE_FLAGS, SCRIPT_MODE, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, SCRIPT_MODE)  # whatever the umask
        finally:
            os.close(fd)
        _own_like(dir_fd, temporary)
        try:
            os.rename(temporary, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except IsADirectoryError:
            raise _refused(f"{shown!r} is a directory of the workspace") from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=dir_fd)
        raise


def place_script(workspace: Path, script: ScriptFile, *, root: str, workdir: str, writable: bool) -> str:
    """Write ``script``'s content at its path in ``workspace`` (the directory the sandbox sees at ``root``); the
    path inside the sandbox is returned. INPUT.INVALID naming ``script.path`` when it is not a file of the
    workspace, a directory on the way is a file or a link, the workspace is mounted read-only (``writable``
    False: nothing may change it for the run), or the file cannot be written. Blocking: call off the loop."""
    parts = script_target(script, root=root, workdir=workdir)
    if not writable:
        raise _refused("the profile mounts the workspace read-only: a script file cannot be placed in it")
    data = script.content
    try:
        fd = os.open(workspace, _DIR_FLAGS)
    except OSError as err:
        raise _refused(f"the workspace cannot be opened: {err.strerror or err}") from None
    try:
        for depth, part in enumerate(parts[:-1], start=1):
            child = _subdirectory(fd, part, "/".join(parts[:depth]))
            os.close(fd)
            fd = child
        _replace(fd, parts[-1], data, "/".join(parts))
    except InputInvalid:
        raise
    except OSError as err:
        raise _refused(f"the script cannot be written into the workspace: {err.strerror or err}") from None
    finally:
        os.close(fd)
    return posixpath.join(root, *parts)


def read_workspace_file(workspace: Path, parts: list[str], *, limit: int) -> bytes:
    """The bytes of the regular file ``parts`` below ``workspace``, read as place_script writes: from the
    workspace's root down, never following a link. INPUT.INVALID naming ``script.path`` when it is missing,
    not a regular file, reached through a link, or larger than ``limit``. Blocking: call off the loop."""
    shown = "/".join(parts)
    try:
        fd = os.open(workspace, _DIR_FLAGS)
    except OSError as err:
        raise _refused(f"the workspace cannot be opened: {err.strerror or err}") from None
    try:
        for part in parts[:-1]:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
        try:
            status = os.fstat(file_fd)
            if not stat.S_ISREG(status.st_mode):
                raise _refused(f"{shown!r} is not a regular file of the workspace")
            if status.st_size > limit:
                raise _refused(f"{shown!r} is larger than {limit} bytes")
            data = os.read(file_fd, limit + 1)
            chunks = [data]
            while data and sum(map(len, chunks)) <= limit:
                data = os.read(file_fd, limit + 1)
                chunks.append(data)
            content = b"".join(chunks)
            if len(content) > limit:
                raise _refused(f"{shown!r} is larger than {limit} bytes")
            return content
        finally:
            os.close(file_fd)
    except InputInvalid:
        raise
    except OSError as err:
        if err.errno in (errno.ENOTDIR, errno.ELOOP):
            raise _refused(f"{shown!r} is reached through a file or a symbolic link") from None
        raise _refused(f"{shown!r} cannot be read from the workspace: {err.strerror or err}") from None
    finally:
        os.close(fd)
