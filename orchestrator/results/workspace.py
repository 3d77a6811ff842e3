"""The workspace before a run: the stat of every path, taken before the sandbox exists.

:func:`snapshot` is stat only (no hashing, never following a symlink, descriptor-relative: see
:mod:`orchestrator.results.fstree`): it is taken right before launch, after everything the orchestrator
itself does to the workspace, and must be cheap. What the run changed is then found by
:func:`orchestrator.results.collect.collect`, and bounded while the run goes on by
:class:`orchestrator.results.write_meter.WorkspaceMeter`. Both block: call them through
``asyncio.to_thread`` from async code.

Memory: an entry is kept as 45 packed bytes beside its path (about 200 bytes in all, against about 450
for a tuple of Python integers), so the default 200,000 entries cost about 40 MB.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from orchestrator.domain.errors import InputInvalid
from orchestrator.results.fstree import (
    MAX_PATH_BYTES,
    Cursor,
    Entry,
    EntryKind,
    Moved,
    entry_at,
    join,
    open_root,
    reason,
    smallest_names,
    sort_key,
)

SNAPSHOT_MAX_ENTRIES: Final = 200_000
"""Default entry limit of :func:`snapshot`: a workspace with more entries gets an incomplete record."""

PATH_BYTES_PER_ENTRY: Final = 256
"""The walk stops (truncated) when the recorded paths add up to more than ``max_entries`` times this:
bounds the controller's memory against trees built to make every path long."""

_PACK: Final = struct.Struct("<BIqqqQQ")  # kind, st_mode, size, mtime_ns, ctime_ns, ino, dev
_KINDS: Final[tuple[EntryKind, ...]] = ("file", "dir", "symlink", "other")
_KIND_CODES: Final = {kind: code for code, kind in enumerate(_KINDS)}


class Entries(Mapping[str, Entry]):
    """Path → :class:`Entry`, in walk order, stored packed (see the module docstring)."""

    __slots__ = ("_packed", "_targets")

    def __init__(self) -> None:
        self._packed: dict[str, bytes] = {}
        self._targets: dict[str, str] = {}

    def add(self, key: str, entry: Entry) -> None:
        self._packed[key] = _PACK.pack(
            _KIND_CODES[entry.kind], entry.mode, entry.size, entry.mtime_ns, entry.ctime_ns, entry.ino, entry.dev
        )
        if entry.link_target is not None:
            self._targets[key] = entry.link_target

    def __getitem__(self, key: str) -> Entry:
        kind, mode, size, mtime, ctime, ino, dev = _PACK.unpack(self._packed[key])
        return Entry(_KINDS[kind], size, mode, mtime, ctime, ino, dev, self._targets.get(key))

    def get_entry(self, key: str) -> Entry | None:
        """Like ``get``, without the Mapping machinery (the hot path of a scan)."""
        packed = self._packed.get(key)
        if packed is None:
            return None
        kind, mode, size, mtime, ctime, ino, dev = _PACK.unpack(packed)
        return Entry(_KINDS[kind], size, mode, mtime, ctime, ino, dev, self._targets.get(key))

    def __contains__(self, key: object) -> bool:
        return key in self._packed

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)


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
    entries: Entries
    truncated: bool = False
    last: tuple[bytes, ...] | None = None
    unlisted: Mapping[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.entries)

    def known(self, key: str) -> bool:
        """Whether ``key`` lies where this snapshot looked: not past a truncated walk's last entry, not
        under a directory it could not list. Elsewhere, a path may have existed unseen."""
        if self.unlisted and _under(key, self.unlisted):
            return False
        return self.last is None or sort_key(key) <= self.last


def _under(key: str, dirs: Mapping[str, str]) -> bool:
    if "" in dirs:
        return True
    cut = key.find("/")
    while cut != -1:
        if key[:cut] in dirs:
            return True
        cut = key.find("/", cut + 1)
    return False


@dataclass(slots=True)
class _Frame:
    parts: tuple[str, ...]
    key: str
    names: list[str]
    index: int = 0


def snapshot(root: Path, *, max_entries: int = SNAPSHOT_MAX_ENTRIES) -> Snapshot:
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
    root_fd, root_id = open_root(root)
    try:
        try:
            root_listing = smallest_names(root_fd, max_entries)
        except OSError as e:
            raise InputInvalid(
                f"workspace root {str(root)!r} cannot be listed: {e.strerror}", details={"field": "root"}
            ) from e
        cursor = Cursor(root_fd, root_id)
        try:
            return _walk(cursor, root_id, root_listing, max_entries)
        finally:
            cursor.close()
    finally:
        os.close(root_fd)


def _walk(cursor: Cursor, root_id: tuple[int, int], root_listing: tuple[list[str], bool], max_entries: int) -> Snapshot:
    entries = Entries()
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
        key = join(frame.key, name)
        path_bytes += len(key)
        if len(entries) >= max_entries or path_bytes > path_budget:
            truncated = True
            break
        try:
            fd = cursor.goto(frame.parts)
            entry = entry_at(fd, name)
        except FileNotFoundError:
            continue  # vanished between listing and stat
        except (OSError, Moved) as e:
            unlisted[frame.key] = "moved during snapshot" if isinstance(e, Moved) else reason(e)
            stack.pop()
            continue
        entries.add(key, entry)
        last_key = key
        if entry.kind != "dir":
            continue
        if len(os.fsencode(key)) > MAX_PATH_BYTES:
            unlisted[key] = "path too long"
            continue
        parts = (*frame.parts, name)
        try:
            child_fd = cursor.goto(parts, expected=(entry.dev, entry.ino))
            names, more = smallest_names(child_fd, max_entries - len(entries))
        except Moved:
            unlisted[key] = "moved during snapshot"
            continue
        except OSError as e:
            unlisted[key] = reason(e)
            continue
        truncated = truncated or more
        stack.append(_Frame(parts, key, names))
    return Snapshot(
        root_dev=root_id[0],
        root_ino=root_id[1],
        entries=entries,
        truncated=truncated,
        last=sort_key(last_key) if truncated and last_key is not None else (() if truncated else None),
        unlisted=unlisted,
    )
