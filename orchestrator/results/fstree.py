"""Reading a tree the sandbox wrote, as hostile input: descriptor-relative, never following a link.

The workspace is written by an untrusted sandbox (CVE-2018-15664 class: a symlink swapped in must never
make the host read, list or change anything outside it). Everything here goes through descriptors:

* A directory is opened with ``openat(parent_fd, name, O_DIRECTORY | O_NOFOLLOW)`` relative to its
  parent's descriptor; no path is ever resolved from the root as a string, so no symlink in any component
  is followed. Going back up uses ``openat(fd, "..")``, checked against the (dev, inode) recorded on the
  way down (a moved directory is noticed, not followed): :class:`Cursor`.
* Regular files are opened only to hash them, with ``O_NOFOLLOW | O_NONBLOCK | O_NOCTTY``, and checked with
  ``fstat`` to be the very regular file (dev, inode) just seen; FIFOs, sockets and devices are never
  opened, and ``O_NONBLOCK`` keeps a FIFO swapped in late from blocking: :func:`hash_file`.
* Set-uid/set-gid bits are removed through an ``O_PATH | O_NOFOLLOW`` descriptor checked the same way:
  :func:`strip_setid`.
* At most a handful of descriptors are open at any depth (the first levels and the current directory), so
  a very deep tree cannot exhaust the descriptor table.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Final, Literal, NamedTuple

from orchestrator.domain.errors import InputInvalid

EntryKind = Literal["file", "dir", "symlink", "other"]

MAX_PATH_BYTES: Final = 4096
"""A directory whose relative path is longer than this (PATH_MAX) is recorded but not descended into."""

DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
SETID_BITS: Final = stat.S_ISUID | stat.S_ISGID
_PINNED_LEVELS: Final = 8
READ_CHUNK: Final = 1 << 20

# notes on a change (stable strings: evidence readers may match on them)
NOTE_BUDGET: Final = "not hashed: budget"
NOTE_PERMISSION: Final = "not hashed: permission denied"
NOTE_NOT_REGULAR: Final = "not hashed: not a regular file"
NOTE_SYMLINK: Final = "not hashed: replaced by a symlink"
NOTE_REPLACED: Final = "not hashed: replaced after snapshot"
NOTE_VANISHED: Final = "not hashed: vanished"
NOTE_CHANGED_WHILE_HASHING: Final = "not hashed: changed while hashing"
NOTE_NOT_LISTED: Final = "contents not listed"
NOTE_SETID_STRIPPED: Final = "set-uid/set-gid bits removed"


class Entry(NamedTuple):
    """What ``lstat`` said about one path."""

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


class Moved(Exception):
    """A directory is no longer the one recorded (dev, inode): it was moved or replaced."""


def kind_of(mode: int) -> EntryKind:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "dir"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def other_note(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    return "unknown file type"


def entry_at(dir_fd: int, name: str) -> Entry:
    """``lstat`` of ``name`` in the directory ``dir_fd`` (a symlink's target read, never followed)."""
    return entry_from_stat(os.stat(name, dir_fd=dir_fd, follow_symlinks=False), dir_fd, name)


def entry_from_stat(st: os.stat_result, dir_fd: int, name: str) -> Entry:
    """The :class:`Entry` of ``name`` in ``dir_fd`` whose ``lstat`` is ``st``."""
    kind = kind_of(st.st_mode)
    target: str | None = None
    if kind == "symlink":
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError:
            target = None
    return Entry(kind, st.st_size, st.st_mode, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev, target)


def display(text: str) -> str:
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


def sort_key(path: str) -> tuple[bytes, ...]:
    """Walk order: depth first, names compared by their bytes."""
    return tuple(os.fsencode(part) for part in path.split("/"))


def parts_of(path: str) -> tuple[str, ...]:
    return tuple(path.split("/")) if path else ()


def join(parent: str, name: str) -> str:
    return f"{parent}/{name}" if parent else name


def reason(error: OSError) -> str:
    if isinstance(error, PermissionError):
        return "permission denied"
    return (error.strerror or errno.errorcode.get(error.errno or 0, "error")).lower()


def open_root(root: Path) -> tuple[int, tuple[int, int]]:
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


class Cursor:
    """A descriptor on one directory of the tree, moved down with ``openat(O_NOFOLLOW)`` and up with
    ``openat("..")``, every step checked against recorded (dev, inode). Keeps the first
    ``_PINNED_LEVELS`` levels and the current directory open, nothing else."""

    __slots__ = ("_current", "_fds", "_ids", "_names")

    def __init__(self, root_fd: int, root_id: tuple[int, int]) -> None:
        self._names: list[str] = []
        self._ids: list[tuple[int, int]] = [root_id]
        self._fds: list[int | None] = [root_fd]
        self._current: tuple[str, ...] | None = ()  # computed when goto needs it: down/up stay O(1)

    @property
    def fd(self) -> int:
        """The descriptor of the current directory."""
        fd = self._fds[-1]
        assert fd is not None
        return fd

    @property
    def depth(self) -> int:
        return len(self._names)

    def down(self, name: str, expected: tuple[int, int] | None = None) -> int:
        """Into the subdirectory ``name`` of the current one (``expected``: its (dev, inode)); its descriptor.
        Raises :class:`Moved` or ``OSError``, and then stays where it was."""
        self._down(name, expected)
        return self.fd

    def up(self) -> int:
        """Back to the parent of the current directory; its descriptor. Raises :class:`Moved` or ``OSError``
        when the way back is no longer the way down."""
        if not self._names:
            raise ValueError("already at the root")
        self._up(len(self._names) - 1)
        return self.fd

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
        self._current = None

    def goto(self, parts: tuple[str, ...], expected: tuple[int, int] | None = None) -> int:
        """The descriptor of the directory ``parts`` (relative to the root). ``expected`` is the
        (dev, inode) the last component must have. Raises :class:`Moved` or ``OSError``."""
        if self._current is None:
            self._current = tuple(self._names)
        if parts == self._current:
            return self.fd
        names = self._names
        common = 0
        limit = min(len(names), len(parts))
        while common < limit and names[common] == parts[common]:
            common += 1
        if common < len(names):
            self._up(common)
        for index in range(common, len(parts)):
            self._down(parts[index], expected if index == len(parts) - 1 else None)
        return self.fd

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
                    parent = os.open("..", DIR_FLAGS, dir_fd=child)
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
        fd = os.open(name, DIR_FLAGS, dir_fd=parent)
        st = os.fstat(fd)
        ident = (st.st_dev, st.st_ino)
        if expected is not None and ident != expected:
            os.close(fd)
            raise Moved(name)
        depth = len(self._fds) - 1
        if depth > _PINNED_LEVELS:
            os.close(parent)
            self._fds[depth] = None
        self._fds.append(fd)
        self._ids.append(ident)
        self._names.append(name)
        self._current = None


def smallest_names(fd: int, keep: int) -> tuple[list[str], bool]:
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


def first_names(fd: int, limit: int) -> tuple[list[str], set[str], bool]:
    """At most ``limit`` names of a directory, sorted by their bytes; which of them are directories (as
    the listing says, never following a link); and whether reading stopped early.

    Reads no more than ``limit + 1`` names (time and memory bounded by ``limit``); when it stops early the
    names are whichever the filesystem returned first, not the smallest."""
    kept: list[str] = []
    dirs: set[str] = set()
    more = False
    with os.scandir(fd) as it:
        for entry in it:
            if len(kept) >= limit:
                more = True
                break
            kept.append(entry.name)
            try:
                if entry.is_dir(follow_symlinks=False):
                    dirs.add(entry.name)
            except OSError:
                pass  # gone meanwhile: its stat will say so
    kept.sort(key=os.fsencode)
    return kept, dirs, more


class Hashed(NamedTuple):
    sha256: str | None
    size: int
    read: int
    note: str | None


def hash_file(dir_fd: int, name: str, expected: Entry, budget: int, buffer: memoryview) -> Hashed:
    """sha256 of the regular file ``name`` in ``dir_fd`` if it is still the file ``expected`` describes and
    holds at most ``budget`` bytes; otherwise a note saying why not (never following a link, never
    blocking on a FIFO). ``buffer`` is the caller's read buffer (one per thread)."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        return Hashed(None, expected.size, 0, open_note(e))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return Hashed(None, expected.size, 0, NOTE_NOT_REGULAR)
        if (st.st_dev, st.st_ino) != (expected.dev, expected.ino):
            return Hashed(None, expected.size, 0, NOTE_REPLACED)
        if st.st_size > budget:
            return Hashed(None, st.st_size, 0, NOTE_BUDGET)
        digest, read = read_hash(fd, st.st_size, buffer)
        if digest is None:
            return Hashed(None, expected.size, read, NOTE_CHANGED_WHILE_HASHING)
        return Hashed(digest, st.st_size, read, None)
    except OSError as e:
        return Hashed(None, expected.size, 0, f"not hashed: {reason(e)}")
    finally:
        os.close(fd)


def open_note(error: OSError) -> str:
    if error.errno == errno.ELOOP:
        return NOTE_SYMLINK
    if isinstance(error, PermissionError):
        return NOTE_PERMISSION
    if isinstance(error, FileNotFoundError):
        return NOTE_VANISHED
    if error.errno in (errno.ENXIO, errno.ENODEV, errno.EWOULDBLOCK):
        return NOTE_NOT_REGULAR
    return f"not hashed: {reason(error)}"


def read_hash(fd: int, size: int, view: memoryview) -> tuple[str | None, int]:
    """sha256 of exactly ``size`` bytes, read through ``view``; None if the file ended early (truncated
    while read)."""
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


def strip_setid(dir_fd: int, name: str, expected: Entry) -> str | None:
    """Remove the set-uid and set-gid bits of the regular file ``name`` in ``dir_fd`` if it is still the file
    ``expected`` describes. Returns None when done, else why not.

    Through an ``O_PATH | O_NOFOLLOW`` descriptor (it needs no permission on the file itself, and a symlink
    swapped in gives a descriptor of the link, which the type check refuses), checked to be that very
    inode, then ``chmod`` of ``/proc/self/fd/N``: the kernel resolves it to exactly that inode."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        return reason(e)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (expected.dev, expected.ino):
            return "replaced while checked"
        if not st.st_mode & SETID_BITS:
            return None
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(st.st_mode) & ~SETID_BITS)
        return None
    except OSError as e:
        return reason(e)
    finally:
        os.close(fd)
