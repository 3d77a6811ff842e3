"""After a run: what it changed in the workspace, in one bounded pass; set-id bits it left are removed.

Two walks, in this order, so that entries the run created can never hide a change to what existed:

1. **What existed** (:meth:`_Collector.existing`): every path of the *before* snapshot is looked up by name
   (``fstatat`` relative to its parent's descriptor), never by listing a directory, so its cost is the
   snapshot's size whatever the run added. Changed files are hashed first (the hash budgets go to them
   before any created file).
2. **What is new** (:meth:`_Collector.created`): the tree is walked depth first, names sorted, reading at
   most ``len(before) + max_new_entries`` names in all (time and memory bounded however many the run
   made); every entry not in the snapshot is created. Directories deeper than ``MAX_PATH_BYTES`` bytes of
   path are still walked, for set-id bits only (no path is kept for them).

Both walks are descriptor-relative and never follow a link (:mod:`orchestrator.results.fstree`). A
regular file the run left set-uid or set-gid (created, or given the bits) has them removed; a file that
had them before the run (same inode) keeps them. Whatever could not be examined or done is a *problem*:
the record is then not ``complete`` (a failure: ``SANDBOX.SIDE_EFFECTS_INCOMPLETE``).

Call it after the sandbox is gone (nothing writes the tree any more); it blocks: from async code, through
``asyncio.to_thread``.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from orchestrator.domain.errors import InputInvalid
from orchestrator.results.fstree import (
    MAX_PATH_BYTES,
    NOTE_BUDGET,
    NOTE_SETID_STRIPPED,
    READ_CHUNK,
    SETID_BITS,
    Cursor,
    Entry,
    Moved,
    entry_at,
    entry_from_stat,
    first_names,
    hash_file,
    join,
    open_root,
    parts_of,
    reason,
    strip_setid,
)
from orchestrator.results.record import LISTING_MAX_BYTES, Names, RecordBuilder, SideEffects
from orchestrator.results.redact import Redactor
from orchestrator.results.workspace import Snapshot


@dataclass(frozen=True, slots=True)
class CollectLimits:
    """What one collection may cost."""

    max_new_entries: int = 200_000
    """Names read beyond the snapshot's entries (the walk of what is new stops there: a problem)."""
    max_hash_bytes: int = 1 << 30
    max_file_hash: int = 256 << 20
    max_hash_files: int = 10_000
    listing_bytes: int = LISTING_MAX_BYTES

    def __post_init__(self) -> None:
        if min(self.max_new_entries, self.max_hash_bytes, self.max_file_hash, self.max_hash_files) < 0:
            raise ValueError("limits must be >= 0")
        if self.listing_bytes < 0 or self.listing_bytes > LISTING_MAX_BYTES:
            raise ValueError(f"listing_bytes must be between 0 and {LISTING_MAX_BYTES}")


def collect(
    before: Snapshot,
    root: Path,
    *,
    redactor: Redactor | None = None,
    limits: CollectLimits | None = None,
) -> SideEffects:
    """What changed under ``root`` since ``before`` (see the module docstring).

    * created: not in ``before``; deleted: in ``before`` only (as they were, not hashed: the content is
      gone); modified: a regular file when any of size, mtime, ctime, inode (or device) or mode changed
      (ctime on purpose: a rewrite that restores size and mtime still changes ctime, which no unprivileged
      process can set; the price: chmod, a new hard link or xattrs also list a file, with its unchanged
      hash), a directory when it was replaced or its mode changed (entries coming and going are listed
      themselves), a symlink when its target changed; a kind change is modified with note ``was <kind>``.
    * Created and modified regular files are hashed (sha256): at most ``max_file_hash`` bytes per file,
      ``max_hash_bytes`` and ``max_hash_files`` in all, modified ones first, then in walk order; a file over
      a budget is listed with note ``not hashed: budget``.

    Paths and link targets are redacted with ``redactor``. Raises ``InputInvalid`` if ``root`` is no longer
    the directory ``before`` was taken of.
    """
    limits = limits or CollectLimits()
    root_fd, root_id = open_root(root)
    try:
        if root_id != (before.root_dev, before.root_ino):
            raise InputInvalid(
                f"workspace root {str(root)!r} is not the directory the snapshot was taken of",
                details={"field": "root"},
            )
        cursor = Cursor(root_fd, root_id)
        try:
            collector = _Collector(
                before, cursor, RecordBuilder(Names(redactor), listing_bytes=limits.listing_bytes), limits
            )
            collector.before_problems()
            collector.existing()
            collector.created()
            return collector.build()
        finally:
            cursor.close()
    finally:
        os.close(root_fd)


def changed(before: Entry, after: Entry) -> list[str] | None:
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


_UNKNOWN = ": what it holds is not known"


class _Lost(Exception):
    """The walk cannot find its way back up (the tree moved under it): the rest is not examined."""


@dataclass(slots=True)
class _Frame:
    """A directory being walked: the cursor is on it while its names are processed."""

    key: str | None  # None below MAX_PATH_BYTES: walked for set-id bits only
    key_bytes: int
    names: list[str]
    dirs: set[str]  # the names the listing said are directories (d_type)
    index: int = 0


@dataclass(slots=True)
class _Collector:
    before: Snapshot
    cursor: Cursor
    record: RecordBuilder
    limits: CollectLimits = field(default_factory=CollectLimits)
    buffer: memoryview = field(default_factory=lambda: memoryview(bytearray(READ_CHUNK)))
    hashed_bytes: int = 0
    hashed_files: int = 0
    bytes_written: int = 0
    examined: int = 0
    linked: set[tuple[int, int]] = field(default_factory=set)  # created files with several links: counted once
    names_left: int = 0
    not_listed: list[str] = field(default_factory=list)  # directories the name budget left (partly) unread
    deep_reported: bool = False

    def build(self) -> SideEffects:
        return self.record.build(
            bytes_written=self.bytes_written,
            hashed_bytes=self.hashed_bytes,
            hashed_files=self.hashed_files,
            entries_examined=self.examined,
        )

    def before_problems(self) -> None:
        before = self.before
        if before.truncated:
            self.record.problem(
                "before_truncated",
                None,
                f"the workspace held more than {len(before)} entries before the run: changes after them "
                "(in path order) are not known",
            )
        for key, why in before.unlisted.items():
            self.record.problem(
                "before_unlisted", key, f"could not be listed before the run ({why}): changes below it are not known"
            )

    # -- shared ------------------------------------------------------------------------------------

    def hash(self, fd: int, name: str, entry: Entry) -> tuple[str | None, int | None, str | None]:
        """(sha256, size hashed, note) within the budgets."""
        limits = self.limits
        left = limits.max_hash_bytes - self.hashed_bytes
        if entry.size > limits.max_file_hash or entry.size > left or self.hashed_files >= limits.max_hash_files:
            return None, None, NOTE_BUDGET
        hashed = hash_file(fd, name, entry, min(limits.max_file_hash, left), self.buffer)
        self.hashed_bytes += hashed.read
        if hashed.sha256 is None:
            return None, None, hashed.note
        self.hashed_files += 1
        return hashed.sha256, hashed.size, None

    def examine(
        self, fd: int, key: str, name: str, now: Entry, was: Entry | None
    ) -> tuple[str | None, int | None, list[str]]:
        """A created or modified entry: set-id bits removed, a file hashed. (sha256, size, notes)."""
        removed = self.setid(fd, key, name, now, was)
        notes = [] if removed is None else [removed]
        if now.kind != "file":
            return None, None, notes
        sha256, size, note = self.hash(fd, name, now)
        if note is not None:
            notes.append(note)
        return sha256, size, notes

    def setid(self, fd: int, key: str, name: str, now: Entry, was: Entry | None) -> str | None:
        """Removes set-id bits the run left on a regular file; the note to add, if any."""
        if now.kind != "file" or not now.mode & SETID_BITS:
            return None
        if (
            was is not None
            and was.kind == "file"
            and (was.dev, was.ino) == (now.dev, now.ino)
            and not now.mode & SETID_BITS & ~was.mode
        ):
            return None  # the file's own bits, from before the run
        error = strip_setid(fd, name, now)
        if error is not None:
            self.record.problem("setid_not_removed", key, f"its set-uid/set-gid bits could not be removed: {error}")
            return None
        self.record.setid_removed(key)
        return NOTE_SETID_STRIPPED

    # -- 1. what existed ---------------------------------------------------------------------------

    def existing(self) -> None:
        record, cursor = self.record, self.cursor
        entries = self.before.entries
        gone: set[str] = set()  # directories that are no longer there (or no longer directories)
        blocked: set[str] = set()  # directories that could not be entered: what was below is unknown
        for key in entries:
            was = entries[key]
            self.examined += 1
            parent, _, name = key.rpartition("/")
            if parent in gone:
                self._deleted(key, was, gone)
                continue
            if parent in blocked:
                if was.kind == "dir":
                    blocked.add(key)
                continue
            try:
                fd = cursor.goto(parts_of(parent))
                now = entry_at(fd, name)
            except FileNotFoundError:
                self._deleted(key, was, gone)
                continue
            except (OSError, Moved) as e:
                if isinstance(e, OSError) and e.errno in (errno.ENOTDIR, errno.ELOOP):
                    gone.add(parent)  # the directory became something else while we looked
                    self._deleted(key, was, gone)
                    continue
                blocked.add(parent)
                if was.kind == "dir":
                    blocked.add(key)
                why = reason(e) if isinstance(e, OSError) else "moved during the scan"
                record.problem(
                    "unreachable", parent, f"could not be entered after the run ({why}): changes below it are not known"
                )
                continue
            if was.kind == "dir" and now.kind != "dir":
                gone.add(key)
            notes = changed(was, now)
            if notes is None:
                continue
            sha256, size, more = self.examine(fd, key, name, now, was)
            notes.extend(more)
            if now.kind == "file":
                self.bytes_written += max(0, now.size - (was.size if was.kind == "file" else 0))
            record.add("modified", key, now, sha256=sha256, size=size, notes=notes)

    def _deleted(self, key: str, was: Entry, gone: set[str]) -> None:
        self.record.add("deleted", key, was)
        if was.kind == "dir":
            gone.add(key)

    # -- 2. what is new ----------------------------------------------------------------------------

    def created(self) -> None:
        self.names_left = len(self.before) + self.limits.max_new_entries
        cursor = self.cursor
        root = self._list("", 0, cursor.goto(()))
        if root is None:
            return
        stack = [root]
        try:
            while stack:
                frame = stack[-1]
                if frame.index >= len(frame.names):
                    stack.pop()
                    if stack:
                        self._up(stack[-1])
                    continue
                name = frame.names[frame.index]
                frame.index += 1
                self.examined += 1
                child = self._visit(frame, name)
                if child is not None:
                    stack.append(child)
        except _Lost:
            pass
        if self.not_listed:
            first = self.not_listed[0]
            self.record.problem(
                "scan_budget",
                first,
                f"the scan read its budget of {len(self.before) + self.limits.max_new_entries} names: "
                f"{len(self.not_listed)} directories were not (fully) listed, what they hold is not known",
            )

    def _visit(self, frame: _Frame, name: str) -> _Frame | None:
        """One name of the current directory; the frame of a directory to walk next, if any."""
        cursor, record = self.cursor, self.record
        fd = cursor.fd
        key = join(frame.key, name) if frame.key is not None else None
        if key is not None and key in self.before.entries:  # compared by the first walk
            if name in frame.dirs:
                return self._descend(frame, name, key, None)
            return None
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as e:
            frame.index = len(frame.names)  # no name of this directory can be examined
            record.problem("unlisted", frame.key or "", f"its entries could not be examined ({reason(e)}){_UNKNOWN}")
            return None
        now = entry_from_stat(st, fd, name)
        if key is None or not self.before.known(key):
            # below PATH_MAX or where the snapshot did not look: only set-id bits (the problem is recorded)
            self.setid(fd, key or f"…/{name}", name, now, None)
        else:
            sha256, size, notes = self.examine(fd, key, name, now, None)
            if now.kind == "file" and (st.st_nlink == 1 or (now.dev, now.ino) not in self.linked):
                if st.st_nlink > 1:
                    self.linked.add((now.dev, now.ino))
                self.bytes_written += now.size
            record.add("created", key, now, sha256=sha256, size=size, notes=notes)
        if now.kind == "dir":
            return self._descend(frame, name, key, now)
        return None

    def _descend(self, frame: _Frame, name: str, key: str | None, entry: Entry | None) -> _Frame | None:
        key_bytes = frame.key_bytes + (1 if frame.key_bytes else 0) + len(os.fsencode(name))
        if key is not None and key_bytes > MAX_PATH_BYTES:
            if not self.deep_reported:
                self.deep_reported = True
                self.record.problem(
                    "path_too_long",
                    key,
                    f"deeper than {MAX_PATH_BYTES} bytes of path: what lies below is not listed "
                    "(only checked for set-id bits)",
                )
            key = None
        if self.names_left <= 0:
            self.not_listed.append(key or frame.key or "")
            return None
        expected = (entry.dev, entry.ino) if entry is not None else None
        try:
            fd = self.cursor.down(name, expected)
        except (OSError, Moved) as e:
            why = reason(e) if isinstance(e, OSError) else "moved during the scan"
            self.record.problem("unlisted", key, f"could not be listed after the run ({why}){_UNKNOWN}")
            return None
        child = self._list(key, key_bytes, fd)
        if child is None:
            self._up(frame)
        return child

    def _list(self, key: str | None, key_bytes: int, fd: int) -> _Frame | None:
        try:
            names, dirs, more = first_names(fd, self.names_left)
        except OSError as e:
            self.record.problem("unlisted", key, f"could not be listed after the run ({reason(e)}){_UNKNOWN}")
            return None
        self.names_left -= len(names)
        if more:
            self.not_listed.append(key or "")
        return _Frame(key, key_bytes, names, dirs)

    def _up(self, parent: _Frame) -> None:
        """Back to ``parent``'s directory; :class:`_Lost` when the way back is not the way down."""
        try:
            self.cursor.up()
        except (OSError, Moved) as e:
            why = reason(e) if isinstance(e, OSError) else "moved during the scan"
            self.record.problem("unlisted", parent.key, f"the walk lost its way back ({why}): the rest is not known")
            raise _Lost from e
