"""Workspace side effects: what a command created, modified and deleted, as sizes and hashes.

The workspace is written by an untrusted sandbox, so the host reads it as hostile input
(CVE-2018-15664 class: a symlink swapped in must never make the host read or list outside it):

* Every directory is opened with ``openat(parent_fd, name, O_DIRECTORY | O_NOFOLLOW)`` relative to its
  parent's descriptor, and checked with ``fstat`` against the (dev, inode) its ``lstat`` recorded. No path
  is ever resolved from the root as a string, so no symlink in any component is followed. Going back up
  uses ``openat(fd, "..")``, checked against the recorded (dev, inode) of the parent (a moved directory
  is noticed, not followed).
* Symlinks are recorded with their target text (``readlink``), never resolved, never descended into.
* Regular files are opened only to hash them, with ``O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`` and
  checked with ``fstat`` to be the very regular file (dev, inode) the snapshot recorded; FIFOs, sockets and
  devices (kind ``other``) are never opened, and ``O_NONBLOCK`` keeps a FIFO swapped in late from blocking.
* At most a handful of descriptors are open at any depth (the first levels and the current directory), so
  a very deep tree cannot exhaust the descriptor table.

:func:`snapshot` is stat only (no hashing): it is taken before the command runs and must be cheap.
:func:`diff` compares two snapshots and hashes the regular files created or modified, within budgets.
Both block: call them through ``asyncio.to_thread`` from async code. Take the *before* snapshot after
everything the orchestrator itself does to the workspace (ownership, permissions), right before launch.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from orchestrator.domain.canonical import canonical_json, canonical_sha256
from orchestrator.domain.errors import InputInvalid

EntryKind = Literal["file", "dir", "symlink", "other"]

MAX_PATH_BYTES: Final = 4096
"""A directory whose relative path is longer than this (PATH_MAX) is recorded but not descended into."""

PATH_BYTES_PER_ENTRY: Final = 256
"""The walk stops (truncated) when the recorded paths add up to more than ``max_entries`` times this:
bounds the controller's memory against trees built to make every path long."""

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_PINNED_LEVELS: Final = 8
_READ_CHUNK: Final = 1 << 20

# notes (stable strings: evidence readers may match on them)
NOTE_BUDGET: Final = "not hashed: budget"
NOTE_PERMISSION: Final = "not hashed: permission denied"
NOTE_NOT_REGULAR: Final = "not hashed: not a regular file"
NOTE_SYMLINK: Final = "not hashed: replaced by a symlink"
NOTE_REPLACED: Final = "not hashed: replaced after snapshot"
NOTE_PATH_CHANGED: Final = "not hashed: path changed after snapshot"
NOTE_VANISHED: Final = "not hashed: vanished"
NOTE_CHANGED_WHILE_HASHING: Final = "not hashed: changed while hashing"
NOTE_NOT_LISTED: Final = "contents not listed"


class Entry(NamedTuple):
    """What ``lstat`` said about one path (a tuple: snapshots hold up to hundreds of thousands)."""

    kind: EntryKind
    size: int
    mode: int
    """``st_mode``: file type and permission bits."""
    mtime_ns: int
    ctime_ns: int
    ino: int
    dev: int
    link_target: str | None
    """Symlinks: the target as ``readlink`` returned it (undecodable bytes surrogate-escaped); never resolved."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The stat of every path under a workspace root, taken by :func:`snapshot`.

    ``entries`` maps relative paths (``/``-separated, names as ``os.fsdecode`` gives them) to entries, in
    walk order: depth first, names sorted by their bytes, so a path's entries follow it. When ``truncated``
    the walk stopped early and only the entries up to ``last`` (in that order) are known. ``unlisted`` maps
    directories whose contents are unknown to the reason (permission denied, path too long, moved).
    """

    root_dev: int
    root_ino: int
    entries: Mapping[str, Entry]
    truncated: bool = False
    last: tuple[bytes, ...] | None = None
    unlisted: Mapping[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.entries)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class FileChange(_Frozen):
    """One created, modified or deleted path. Never content, never a resolved link."""

    path: str = Field(
        description="Relative path, '/'-separated. A backslash is written '\\\\' and a byte that is not UTF-8 "
        "'\\xNN', so distinct names never look alike."
    )
    kind: EntryKind = Field(description="file | dir | symlink | other (FIFO, socket, device); after the change.")
    size: int | None = Field(
        default=None, ge=0, description="Bytes: files (the size hashed, if hashed), symlinks (target length)."
    )
    mode: int = Field(ge=0, description="Permission bits (setuid/setgid/sticky included), as an integer.")
    sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="Content hash of created/modified regular files, when hashed (see note).",
    )
    link_target: str | None = Field(
        default=None, description="Symlinks: the target text (escaped like path), never resolved."
    )
    note: str | None = Field(
        default=None,
        description="Why a file was not hashed, what it was before a kind change, what kind of 'other' it is; "
        "several notes are joined with '; '.",
    )


class SideEffects(_Frozen):
    """The workspace changes of one execution, for evidence (:meth:`to_json`, :meth:`digest`)."""

    created: tuple[FileChange, ...] = Field(default=(), description="New paths, sorted.")
    modified: tuple[FileChange, ...] = Field(default=(), description="Changed paths, sorted.")
    deleted: tuple[FileChange, ...] = Field(default=(), description="Removed paths, sorted (as they were).")
    created_count: int = Field(default=0, ge=0, description="len(created).")
    modified_count: int = Field(default=0, ge=0, description="len(modified).")
    deleted_count: int = Field(default=0, ge=0, description="len(deleted).")
    hashed_bytes: int = Field(default=0, ge=0, description="Bytes read to hash files.")
    truncated: bool = Field(
        default=False,
        description="The listing may be incomplete: a snapshot hit its entry limit, or a directory could not "
        "be listed (that directory carries the note).",
    )

    @model_validator(mode="after")
    def _counts_match(self) -> SideEffects:
        if (self.created_count, self.modified_count, self.deleted_count) != (
            len(self.created),
            len(self.modified),
            len(self.deleted),
        ):
            raise ValueError("counts do not match the lists")
        return self

    def to_dict(self) -> dict[str, JsonValue]:
        """JSON values; fields of a change that do not apply are left out."""
        dumped: dict[str, JsonValue] = self.model_dump(mode="json", exclude_none=True)
        return dumped

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no spaces, UTF-8)."""
        return canonical_json(self.to_dict())

    def digest(self) -> str:
        """sha256 hex of :meth:`to_json`: the whole listing."""
        return canonical_sha256(self.to_dict())

    def summary(self, max_paths: int = 20) -> dict[str, JsonValue]:
        """Counts, digest and the first ``max_paths`` paths of each list: small enough for an evidence record."""
        return {
            "created": self.created_count,
            "modified": self.modified_count,
            "deleted": self.deleted_count,
            "hashed_bytes": self.hashed_bytes,
            "truncated": self.truncated,
            "digest": self.digest(),
            "created_paths": [c.path for c in self.created[:max_paths]],
            "modified_paths": [c.path for c in self.modified[:max_paths]],
            "deleted_paths": [c.path for c in self.deleted[:max_paths]],
        }


# ---------------------------------------------------------------------------------------------- helpers


class _Moved(Exception):
    """A directory is no longer the one recorded (dev, inode): it was moved or replaced."""


def _kind(mode: int) -> EntryKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _other_note(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "unknown file type"


def _display(text: str) -> str:
    """Unambiguous text for a path or link target: '\\' doubled, undecodable bytes as '\\xNN'."""
    if "\\" not in text and (text.isascii() or not any("\udc80" <= c <= "\udcff" for c in text)):
        return text
    out: list[str] = []
    for c in text:
        if c == "\\":
            out.append("\\\\")
        elif "\udc80" <= c <= "\udcff":
            out.append(f"\\x{ord(c) - 0xDC00:02x}")
        else:
            out.append(c)
    return "".join(out)


def _sort_key(path: str) -> tuple[bytes, ...]:
    return tuple(os.fsencode(part) for part in path.split("/"))


def _parts(path: str) -> tuple[str, ...]:
    return tuple(path.split("/")) if path else ()


def _open_root(root: Path) -> tuple[int, tuple[int, int]]:
    """The workspace root itself comes from the orchestrator's configuration (trusted): symlinks in it
    are followed, as the container engine follows them for the bind mount."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise InputInvalid(
            f"workspace root {str(root)!r} cannot be opened as a directory: {e.strerror}",
            details={"field": "root", "errno": errno.errorcode.get(e.errno or 0, str(e.errno))},
        ) from e
    st = os.fstat(fd)
    return fd, (st.st_dev, st.st_ino)


class _Cursor:
    """A descriptor on one directory of the tree, moved down with ``openat(O_NOFOLLOW)`` and up with
    ``openat("..")``, every step checked against recorded (dev, inode). Keeps the first
    ``_PINNED_LEVELS`` levels and the current directory open, nothing else."""

    __slots__ = ("_current", "_fds", "_ids", "_names")

    def __init__(self, root_fd: int, root_id: tuple[int, int]) -> None:
        self._names: list[str] = []
        self._ids: list[tuple[int, int]] = [root_id]
        self._fds: list[int | None] = [root_fd]
        self._current: tuple[str, ...] = ()

    def close(self) -> None:
        """Closes every descriptor but the root's (owned by the caller)."""
        self._truncate(0)

    def _truncate(self, level: int) -> None:
        while len(self._fds) - 1 > level:
            fd = self._fds.pop()
            if fd is not None:
                os.close(fd)
            self._ids.pop()
            self._names.pop()
        self._current = tuple(self._names)

    def goto(self, parts: tuple[str, ...], expected: tuple[int, int] | None = None) -> int:
        """The descriptor of the directory ``parts`` (relative to the root). ``expected`` is the
        (dev, inode) the last component must have. Raises :class:`_Moved` or ``OSError``."""
        if parts == self._current:
            fd = self._fds[-1]
            assert fd is not None
            return fd
        names = self._names
        common = 0
        limit = min(len(names), len(parts))
        while common < limit and names[common] == parts[common]:
            common += 1
        if common < len(names):
            self._up(common)
        for index in range(common, len(parts)):
            self._down(parts[index], expected if index == len(parts) - 1 else None)
        fd = self._fds[-1]
        assert fd is not None
        return fd

    def _up(self, level: int) -> None:
        fds = self._fds
        if fds[level] is not None:
            self._truncate(level)
            return
        depth = len(fds) - 1
        while depth > level:
            child = fds[depth]
            assert child is not None
            if fds[depth - 1] is None:
                try:
                    parent = os.open("..", _DIR_FLAGS, dir_fd=child)
                except OSError:
                    self._reopen(level)
                    return
                st = os.fstat(parent)
                if (st.st_dev, st.st_ino) != self._ids[depth - 1]:
                    os.close(parent)
                    self._reopen(level)
                    return
                fds[depth - 1] = parent
            self._truncate(depth - 1)
            depth -= 1

    def _reopen(self, level: int) -> None:
        """'..' led elsewhere: walk down again from the nearest open ancestor, checking each level."""
        names = list(self._names[:level])
        ids = list(self._ids[: level + 1])
        anchor = max(i for i in range(level + 1) if self._fds[i] is not None)
        self._truncate(anchor)
        for index in range(anchor, level):
            self._down(names[index], ids[index + 1])

    def _down(self, name: str, expected: tuple[int, int] | None) -> None:
        parent = self._fds[-1]
        assert parent is not None
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
        st = os.fstat(fd)
        ident = (st.st_dev, st.st_ino)
        if expected is not None and ident != expected:
            os.close(fd)
            raise _Moved(name)
        depth = len(self._fds) - 1
        if depth > _PINNED_LEVELS:
            os.close(parent)
            self._fds[depth] = None
        self._fds.append(fd)
        self._ids.append(ident)
        self._names.append(name)
        self._current = tuple(self._names)


def _reason(error: OSError) -> str:
    if isinstance(error, PermissionError):
        return "permission denied"
    return (error.strerror or errno.errorcode.get(error.errno or 0, "error")).lower()


def _list(fd: int, keep: int) -> tuple[list[str], bool]:
    """The ``keep`` smallest names of a directory (by their bytes), sorted, and whether there were more.

    Memory stays O(keep) however many names the directory holds, and the names kept are exactly the
    ones a complete walk would visit first, so a truncated snapshot is a prefix of the complete one."""
    seen = 0

    def names(it: Iterator[os.DirEntry[str]]) -> Iterator[str]:
        nonlocal seen
        for entry in it:
            seen += 1
            yield entry.name

    with os.scandir(fd) as it:
        if keep <= 0:
            return [], next(it, None) is not None
        kept = heapq.nsmallest(keep, names(it), key=os.fsencode)
    return kept, seen > len(kept)


@dataclass(slots=True)
class _Frame:
    parts: tuple[str, ...]
    key: str
    names: list[str]
    index: int = 0


# ---------------------------------------------------------------------------------------------- snapshot


def snapshot(root: Path, *, max_entries: int = 200_000) -> Snapshot:
    """Stat every path under ``root`` (never following a symlink, never reading a file).

    At most ``max_entries`` entries are recorded; past that, or past the path-bytes bound
    (:data:`PATH_BYTES_PER_ENTRY`), the snapshot is ``truncated`` and holds exactly the first entries of the
    walk order (memory stays bounded even for a directory of millions of names). A directory that cannot
    be listed (permission denied, path longer than :data:`MAX_PATH_BYTES`, moved during the walk) is
    recorded with its reason in ``unlisted``. Raises ``InputInvalid`` if ``root`` is not a directory that
    can be opened and listed.
    """
    if max_entries < 0:
        raise ValueError("max_entries must be >= 0")
    root_fd, root_id = _open_root(root)
    try:
        try:
            root_listing = _list(root_fd, max_entries)
        except OSError as e:
            raise InputInvalid(
                f"workspace root {str(root)!r} cannot be listed: {e.strerror}", details={"field": "root"}
            ) from e
        cursor = _Cursor(root_fd, root_id)
        try:
            return _walk(cursor, root_id, root_listing, max_entries)
        finally:
            cursor.close()
    finally:
        os.close(root_fd)


def _walk(
    cursor: _Cursor, root_id: tuple[int, int], root_listing: tuple[list[str], bool], max_entries: int
) -> Snapshot:
    entries: dict[str, Entry] = {}
    unlisted: dict[str, str] = {}
    root_names, truncated = root_listing  # more names than the budget: the walk cannot be complete
    last_key: str | None = None
    path_budget = max_entries * PATH_BYTES_PER_ENTRY
    path_bytes = 0
    stack: list[_Frame] = [_Frame((), "", root_names)]
    while stack:
        frame = stack[-1]
        if frame.index >= len(frame.names):
            stack.pop()
            continue
        name = frame.names[frame.index]
        frame.index += 1
        key = f"{frame.key}/{name}" if frame.key else name
        path_bytes += len(key)
        if len(entries) >= max_entries or path_bytes > path_budget:
            truncated = True
            break
        try:
            fd = cursor.goto(frame.parts)
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # vanished between listing and stat
        except (OSError, _Moved) as e:
            unlisted[frame.key] = "moved during snapshot" if isinstance(e, _Moved) else _reason(e)
            stack.pop()
            continue
        mode = st.st_mode
        kind = _kind(mode)
        target: str | None = None
        if kind == "symlink":
            try:
                target = os.readlink(name, dir_fd=fd)
            except OSError:
                target = None
        entries[key] = Entry(kind, st.st_size, mode, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, target)
        last_key = key
        if kind != "dir":
            continue
        if len(os.fsencode(key)) > MAX_PATH_BYTES:
            unlisted[key] = "path too long"
            continue
        parts = (*frame.parts, name)
        try:
            child_fd = cursor.goto(parts, expected=(st.st_dev, st.st_ino))
            names, more = _list(child_fd, max_entries - len(entries))
        except _Moved:
            unlisted[key] = "moved during snapshot"
            continue
        except OSError as e:
            unlisted[key] = _reason(e)
            continue
        truncated = truncated or more
        stack.append(_Frame(parts, key, names))
    return Snapshot(
        root_dev=root_id[0],
        root_ino=root_id[1],
        entries=entries,
        truncated=truncated,
        last=_sort_key(last_key) if truncated and last_key is not None else (() if truncated else None),
        unlisted=unlisted,
    )


# ---------------------------------------------------------------------------------------------- diff


def _changed(before: Entry, after: Entry) -> list[str] | None:
    """None when unchanged, else the notes of the change (possibly none)."""
    if before == after:
        return None
    if before.kind != after.kind:
        return [f"was {before.kind}"]
    if after.kind == "file":
        return []  # any stat difference: size, mtime, ctime, inode, mode
    if after.kind == "symlink":
        return None if before.link_target == after.link_target else []
    notes: list[str] = []
    if (before.dev, before.ino) != (after.dev, after.ino):
        notes.append("replaced")
    if before.mode != after.mode:
        notes.append("mode changed")
    return notes or None


def _under(key: str, dirs: Mapping[str, str] | set[str]) -> bool:
    if "" in dirs:
        return True
    cut = key.find("/")
    while cut != -1:
        if key[:cut] in dirs:
            return True
        cut = key.find("/", cut + 1)
    return False


def diff(
    before: Snapshot,
    after: Snapshot,
    root: Path,
    *,
    max_hash_bytes: int = 1 << 30,
    max_file_hash: int = 256 << 20,
) -> SideEffects:
    """What changed from ``before`` to ``after`` (both snapshots of ``root``); hashes what was written.

    * created: in ``after`` only; deleted: in ``before`` only (as they were; deleted files are not hashed,
      their content is gone).
    * modified: a regular file when any of size, mtime, ctime, inode (or device) or mode changed. ctime is
      compared on purpose: a rewrite that restores size and mtime (``touch -r``) still changes ctime, which
      no unprivileged process can set. The price: metadata-only changes (chmod, a new hard link, xattrs)
      also list the file as modified, with its (unchanged) hash. A directory is modified when it was
      replaced or its mode changed (not when entries come and go: those are listed themselves); a symlink
      when its target changed. A kind change (file -> symlink, dir -> file, ...) is modified, with the new
      kind and note ``was <old kind>``.
    * Created and modified regular files are hashed (sha256) by walking descriptors from the root (see the
      module docstring), at most ``max_file_hash`` bytes per file and ``max_hash_bytes`` in all, in path
      order; a file over either is listed with note ``not hashed: budget`` (a file that does not fit in
      what is left is skipped, smaller ones after it are still hashed: deterministic for a given tree).

    Entries past a truncated snapshot's last entry, and under a directory either snapshot could not list,
    are not compared (``truncated`` is then set). Raises ``InputInvalid`` if ``root`` is no longer the
    directory the snapshots were taken of.
    """
    if max_hash_bytes < 0 or max_file_hash < 0:
        raise ValueError("hash budgets must be >= 0")
    root_fd, root_id = _open_root(root)
    try:
        if root_id != (before.root_dev, before.root_ino) or root_id != (after.root_dev, after.root_ino):
            raise InputInvalid(
                f"workspace root {str(root)!r} is not the directory the snapshots were taken of",
                details={"field": "root"},
            )
        cursor = _Cursor(root_fd, root_id)
        try:
            return _diff(before, after, cursor, max_hash_bytes, max_file_hash)
        finally:
            cursor.close()
    finally:
        os.close(root_fd)


@dataclass(slots=True)
class _Pending:
    key: str
    entry: Entry
    notes: list[str]
    sha256: str | None = None
    size: int | None = None


def _diff(before: Snapshot, after: Snapshot, cursor: _Cursor, max_hash: int, max_file: int) -> SideEffects:
    horizon: tuple[bytes, ...] | None = None
    for snap in (before, after):
        if snap.truncated and snap.last is not None and (horizon is None or snap.last < horizon):
            horizon = snap.last
    skip_dirs: set[str] = set(before.unlisted) | set(after.unlisted)
    truncated = before.truncated or after.truncated or bool(skip_dirs)

    def compared(key: str) -> bool:
        if skip_dirs and _under(key, skip_dirs):
            return False
        return horizon is None or _sort_key(key) <= horizon

    created: list[_Pending] = []
    modified: list[_Pending] = []
    deleted: list[_Pending] = []
    old = before.entries
    for key, entry in after.entries.items():
        previous = old.get(key)
        if previous is None:
            if compared(key):
                created.append(_Pending(key, entry, []))
            continue
        notes = _changed(previous, entry)
        if key in after.unlisted:
            notes = [*(notes or []), f"{NOTE_NOT_LISTED}: {after.unlisted[key]}"]
        if notes is not None and compared(key):
            modified.append(_Pending(key, entry, notes))
    new = after.entries
    for key, entry in old.items():
        if key not in new and compared(key):
            deleted.append(_Pending(key, entry, []))
    for pending in created:
        if pending.key in after.unlisted:
            pending.notes.append(f"{NOTE_NOT_LISTED}: {after.unlisted[pending.key]}")
    for group in (created, modified, deleted):
        group.sort(key=lambda p: _sort_key(p.key))

    to_hash = sorted(
        (p for p in (*created, *modified) if p.entry.kind == "file"),
        key=lambda p: _sort_key(p.key),
    )
    hashed = _hash_files(cursor, to_hash, max_hash, max_file)

    def change(p: _Pending, *, hashed_now: bool) -> FileChange:
        entry = p.entry
        notes = list(p.notes)
        size: int | None = None
        if entry.kind == "file":
            size = p.size if p.size is not None else entry.size
        elif entry.kind == "symlink":
            size = entry.size
        elif entry.kind == "other":
            notes.append(_other_note(entry.mode))
        return FileChange(
            path=_display(p.key),
            kind=entry.kind,
            size=size,
            mode=stat.S_IMODE(entry.mode),
            sha256=p.sha256 if hashed_now else None,
            link_target=_display(entry.link_target) if entry.link_target is not None else None,
            note="; ".join(notes) if notes else None,
        )

    created_out = tuple(change(p, hashed_now=True) for p in created)
    modified_out = tuple(change(p, hashed_now=True) for p in modified)
    deleted_out = tuple(change(p, hashed_now=False) for p in deleted)
    return SideEffects(
        created=created_out,
        modified=modified_out,
        deleted=deleted_out,
        created_count=len(created_out),
        modified_count=len(modified_out),
        deleted_count=len(deleted_out),
        hashed_bytes=hashed,
        truncated=truncated,
    )


def _hash_files(cursor: _Cursor, pending: Sequence[_Pending], max_hash: int, max_file: int) -> int:
    """Hashes each pending regular file in place (sha256, size or a note); returns the bytes read."""
    buffer = bytearray(_READ_CHUNK)
    view = memoryview(buffer)
    total = 0
    for p in pending:
        entry = p.entry
        if entry.size > max_file or total + entry.size > max_hash:
            p.notes.append(NOTE_BUDGET)
            continue
        parts = _parts(p.key)
        try:
            parent = cursor.goto(parts[:-1])
        except (_Moved, OSError):
            p.notes.append(NOTE_PATH_CHANGED)
            continue
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        except OSError as e:
            p.notes.append(_open_note(e))
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                p.notes.append(NOTE_NOT_REGULAR)
                continue
            if (st.st_dev, st.st_ino) != (entry.dev, entry.ino):
                p.notes.append(NOTE_REPLACED)
                continue
            size = st.st_size
            if size > max_file or total + size > max_hash:
                p.notes.append(NOTE_BUDGET)
                continue
            digest, read = _read_hash(fd, size, view)
            total += read
            if digest is None:
                p.notes.append(NOTE_CHANGED_WHILE_HASHING)
                continue
            p.sha256 = digest
            p.size = size
            if size != entry.size or st.st_mtime_ns != entry.mtime_ns:
                p.notes.append("changed after snapshot")
        except OSError as e:
            p.notes.append(f"not hashed: {_reason(e)}")
        finally:
            os.close(fd)
    return total


def _open_note(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return NOTE_SYMLINK
    if isinstance(error, PermissionError):
        return NOTE_PERMISSION
    if isinstance(error, FileNotFoundError):
        return NOTE_VANISHED
    if error.errno in (errno.ENXIO, errno.ENODEV, errno.EWOULDBLOCK):
        return NOTE_NOT_REGULAR
    return f"not hashed: {_reason(error)}"


def _read_hash(fd: int, size: int, view: memoryview) -> tuple[str | None, int]:
    """sha256 of exactly ``size`` bytes; None if the file ended early (truncated while read)."""
    digest = hashlib.sha256()
    remaining = size
    read = 0
    chunk = len(view)
    while remaining > 0:
        n = os.readv(fd, [view[: min(chunk, remaining)]])
        if n == 0:
            return None, read
        digest.update(view[:n])
        remaining -= n
        read += n
    return digest.hexdigest(), read
