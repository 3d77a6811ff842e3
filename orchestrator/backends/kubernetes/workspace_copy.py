"""Copy mode: the workspace goes into the pod as a tar stream before the command runs, and what the command
left comes back out the same way. Blocking: call off the event loop.

In: the pod's init container ``workspace-in`` waits for a marker file; the controller execs
``head -c N | tar -x`` in it with exactly N bytes of archive on stdin, then the marker, and the command's
container starts on the copied workspace. Out: after the command exited on its own, the controller execs
``tar -c`` in the sidecar ``workspace-out`` (same volume) and mirrors the archive onto its own copy.

The archive that comes out was made from files the workload controlled: it is hostile input. It is
read as a stream, bounded (``copy_max_bytes``); names that are absolute, hold ``..`` or NUL, and member
kinds other than directories, regular files, symlinks and hard links to earlier members are refused;
every write is descriptor-relative and never follows a link (a symlink in the workspace is recreated as a
symlink, never written through). Entries whose content, kind and mode did not change are left untouched
(same inode, same times), so the side-effect record sees only what the command really changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

COPY_IN_MARKER = ".sandbox-orchestrator-copied-in"
CHUNK = 64 * 1024
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class CopyError(Exception):
    """The copy could not be made or applied (the message says what; never file contents)."""


def copy_in_command(container_path: str, size: int) -> list[str]:
    # exactly `size` bytes: tar sees its end of input although the exec's stdin stays open
    return [
        "sh",
        "-c",
        f'head -c {size} | tar -x -f - -C "$1" --no-same-owner --no-same-permissions && : > "$1/{COPY_IN_MARKER}"',
        "copy-in",
        container_path,
    ]


def copy_out_command(container_path: str) -> list[str]:
    return ["tar", "-c", "-f", "-", "--format=posix", "-C", container_path, "."]


def wait_for_copy_command(container_path: str) -> list[str]:
    """The init container: until the copy is in, then the marker is removed (the command never sees it)."""
    marker = f"{container_path}/{COPY_IN_MARKER}"
    return ["sh", "-c", f'until [ -e "{marker}" ]; do sleep 0.05; done; rm -f "{marker}"']


# -- in --------------------------------------------------------------------------------------------------


def _entries(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under ``root`` (relative names, parents first), never following a link."""
    stack = [""]
    while stack:
        relative = stack.pop()
        directory = root / relative if relative else root
        with os.scandir(directory) as listing:
            children = sorted(listing, key=lambda e: e.name)
        for child in children:
            name = f"{relative}/{child.name}" if relative else child.name
            info = child.stat(follow_symlinks=False)
            yield name, info
            if stat.S_ISDIR(info.st_mode):
                stack.append(name)


def pack(root: Path, max_bytes: int) -> BinaryIO:
    """The workspace as a tar archive in a temporary file (rewound), at most ``max_bytes`` long."""
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - handed to the caller, who closes it
    try:
        with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for name, info in _entries(root):
                if not _copyable(info.st_mode):
                    continue  # sockets, fifos, devices: nothing a command can be handed
                member = archive.gettarinfo(str(root / name), arcname=name)
                member.uid = member.gid = 0
                member.uname = member.gname = ""
                if member.isreg():
                    with open(root / name, "rb", opener=_no_follow) as data:
                        archive.addfile(member, data)
                else:
                    archive.addfile(member)
                if spool.tell() > max_bytes:
                    raise CopyError(f"the workspace is larger than the copy limit of {max_bytes} bytes")
        if spool.tell() > max_bytes:
            raise CopyError(f"the workspace is larger than the copy limit of {max_bytes} bytes")
        spool.seek(0)
        return spool
    except BaseException:
        spool.close()
        raise


def _no_follow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


# -- out ---------------------------------------------------------------------------------------------------


@dataclass
class Applied:
    created: int = 0
    replaced: int = 0
    unchanged: int = 0
    removed: int = 0


def _safe_name(name: str) -> str:
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if name.startswith("/") or "\x00" in name or any(p == ".." for p in parts):
        raise CopyError(f"the archive names an entry outside the workspace: {name[:200]!r}")
    return "/".join(parts)


class _Tree:
    """Descriptor-relative operations under one root directory, never following a link."""

    def __init__(self, root: Path) -> None:
        self.root_fd = os.open(root, _DIR_FLAGS)
        info = os.fstat(self.root_fd)
        self.owner = (info.st_uid, info.st_gid) if os.geteuid() == 0 else None

    def close(self) -> None:
        os.close(self.root_fd)

    @contextlib.contextmanager
    def parent(self, name: str) -> Iterator[tuple[int, str]]:
        """(descriptor of ``name``'s directory, base name); every component a real directory."""
        *dirs, base = name.split("/")
        fd = os.dup(self.root_fd)
        try:
            for part in dirs:
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise CopyError(f"{name[:200]!r}: a parent is not a directory in the workspace") from exc
                os.close(fd)
                fd = child
            yield fd, base
        finally:
            os.close(fd)

    def lstat(self, name: str) -> os.stat_result | None:
        with self.parent(name) as (fd, base):
            try:
                return os.stat(base, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return None

    def remove(self, name: str) -> None:
        with self.parent(name) as (fd, base):
            _remove_at(fd, base)

    def own(self, fd: int, base: str) -> None:
        if self.owner is not None:
            os.chown(base, *self.owner, dir_fd=fd, follow_symlinks=False)


def _remove_at(fd: int, base: str) -> None:
    try:
        info = os.stat(base, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(info.st_mode):
        child = os.open(base, _DIR_FLAGS, dir_fd=fd)
        try:
            for name in os.listdir(child):
                _remove_at(child, name)
        finally:
            os.close(child)
        os.rmdir(base, dir_fd=fd)
    else:
        os.unlink(base, dir_fd=fd)


def _copyable(mode: int) -> bool:
    return stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)


def _existing(root: Path) -> set[str]:
    """What went into the pod (special files never did: their absence coming back deletes nothing)."""
    return {name for name, info in _entries(root) if _copyable(info.st_mode)}


def _same_file(fd: int, base: str, digest: str, size: int) -> bool:
    try:
        handle = os.open(base, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return False
    with os.fdopen(handle, "rb") as current:
        if os.fstat(current.fileno()).st_size != size:
            return False
        hasher = hashlib.sha256()
        while chunk := current.read(CHUNK):
            hasher.update(chunk)
        return hasher.hexdigest() == digest


def apply(archive: BinaryIO, root: Path) -> Applied:
    """Make ``root`` what ``archive`` (a tar stream of the whole workspace) holds."""
    tree = _Tree(root)
    applied = Applied()
    before = _existing(root)
    seen: set[str] = set()
    try:
        with tarfile.open(fileobj=archive, mode="r|") as stream:
            for member in stream:
                name = _safe_name(member.name)
                if not name:
                    continue  # the root itself
                if name in seen:
                    raise CopyError(f"the archive holds {name[:200]!r} twice")
                seen.add(name)
                _apply_member(tree, stream, member, name, applied)
        for name in sorted(before - seen, key=lambda n: n.count("/"), reverse=True):
            if tree.lstat(name) is not None:
                tree.remove(name)
                applied.removed += 1
    except (tarfile.TarError, EOFError) as exc:
        raise CopyError(f"the archive from the pod is not a valid tar stream: {exc}") from exc
    finally:
        tree.close()
    return applied


def _apply_member(tree: _Tree, stream: tarfile.TarFile, member: tarfile.TarInfo, name: str, applied: Applied) -> None:
    mode = member.mode & 0o777
    current = tree.lstat(name)
    with tree.parent(name) as (fd, base):
        if member.isdir():
            if current is not None and stat.S_ISDIR(current.st_mode):
                if stat.S_IMODE(current.st_mode) & 0o777 != mode:
                    os.chmod(base, mode, dir_fd=fd)
                applied.unchanged += 1
                return
            if current is not None:
                _remove_at(fd, base)
            os.mkdir(base, mode, dir_fd=fd)
            tree.own(fd, base)
            applied.created += 1
        elif member.issym():
            if (
                current is not None
                and stat.S_ISLNK(current.st_mode)
                and os.readlink(base, dir_fd=fd) == member.linkname
            ):
                applied.unchanged += 1
                return
            if current is not None:
                _remove_at(fd, base)
            os.symlink(member.linkname, base, dir_fd=fd)
            tree.own(fd, base)
            applied.created += 1
        elif member.islnk():
            target = _safe_name(member.linkname)
            with tree.parent(target) as (target_fd, target_base):
                info = os.stat(target_base, dir_fd=target_fd, follow_symlinks=False)
                if not stat.S_ISREG(info.st_mode):
                    raise CopyError(f"a hard link in the archive to something not a file: {name[:200]!r}")
                if current is not None and (current.st_dev, current.st_ino) == (info.st_dev, info.st_ino):
                    applied.unchanged += 1
                    return
                if current is not None:
                    _remove_at(fd, base)
                os.link(target_base, base, src_dir_fd=target_fd, dst_dir_fd=fd, follow_symlinks=False)
                applied.created += 1
        elif member.isreg():
            _apply_file(tree, stream, member, fd=fd, base=base, current=current, mode=mode, applied=applied)
        else:
            raise CopyError(f"the archive holds a device, fifo or other special file: {name[:200]!r}")


def _apply_file(
    tree: _Tree,
    stream: tarfile.TarFile,
    member: tarfile.TarInfo,
    *,
    fd: int,
    base: str,
    current: os.stat_result | None,
    mode: int,
    applied: Applied,
) -> None:
    source = stream.extractfile(member)
    if source is None:
        raise CopyError(f"no content for {base[:200]!r}")
    temporary = f".so-copy-{os.getpid()}-{base[:100]}"
    handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=fd)
    hasher = hashlib.sha256()
    try:
        with os.fdopen(handle, "wb") as target:
            while chunk := source.read(CHUNK):
                hasher.update(chunk)
                target.write(chunk)
        regular = current is not None and stat.S_ISREG(current.st_mode)
        if (
            regular
            and current is not None
            and stat.S_IMODE(current.st_mode) & 0o777 == mode
            and _same_file(fd, base, hasher.hexdigest(), member.size)
        ):
            os.unlink(temporary, dir_fd=fd)
            applied.unchanged += 1
            return
        os.chmod(temporary, mode, dir_fd=fd)
        os.utime(temporary, (member.mtime, member.mtime), dir_fd=fd)
        tree.own(fd, temporary)
        if current is not None and stat.S_ISDIR(current.st_mode):
            _remove_at(fd, base)
        os.rename(temporary, base, src_dir_fd=fd, dst_dir_fd=fd)
        if current is None:
            applied.created += 1
        else:
            applied.replaced += 1
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=fd)
        raise


class BoundedSpool:
    """Collects a stream into a temporary file, refusing past ``limit`` bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.file: BinaryIO = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > self.limit:
            raise CopyError(f"the workspace coming back is larger than the copy limit of {self.limit} bytes")
        self.file.write(chunk)

    def rewound(self) -> BinaryIO:
        self.file.seek(0)
        return self.file

    def close(self) -> None:
        self.file.close()
