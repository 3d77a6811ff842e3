"""The workspace write budget, enforced while the command runs.

The workspace is the user's directory on whatever filesystem it lives on, and the controller has no
CAP_SYS_RESOURCE: no quota can be set. So the controller measures, and calls ``on_exceeded`` as soon as the
run's writes pass the budget (the executor then kills the sandbox). What is measured is how much the run
grew the workspace:

* **bytes**: the size of every regular file the run created (an inode, so hard links and renames count
  once), plus the growth of files that existed before (a file that shrinks or is deleted gives its bytes
  back: the budget bounds the disk the run holds, not the traffic);
* **files**: the entries (files, directories, links, FIFOs) the run created and that still exist.

How (a :class:`WorkspaceMeter` runs one thread):

* **inotify** (default): every directory of the workspace is watched (through ``/proc/self/fd`` of a
  descriptor opened with ``O_NOFOLLOW``, never by path); a create, write, move or delete event makes the
  meter ``fstatat`` that one name. New directories are watched as they appear, and what they already hold
  is scanned. Granularity: one write call; the overshoot is what the sandbox writes between the event and
  the kill (event latency plus the engine's kill: measured in docs/evidence-and-workspace.md).
* **rescan**: when the kernel's event queue overflowed, the whole tree is walked again (descriptor-relative,
  bounded: it stops as soon as the budget is passed); and every 10 s (at most a tenth of the time) as a
  safety net, should some writes ever escape the events.
* **poll**: without inotify (no instance left, the watch limit reached, no /proc), the tree is rescanned
  every 0.25-5 s (four times the last scan's duration, so it takes at most about a fifth of a core). The
  overshoot is then what the sandbox writes in one interval.
* **blind spots**: a directory that cannot be watched or listed (made unreadable to the controller, deeper
  than 4096 bytes of path, or where the before snapshot did not look) is out of sight; the growth of the
  whole filesystem's used bytes and inodes (``fstatvfs``) is then also held against the budget. That is
  conservative: other writers to the same filesystem count against the run.

Not seen: space held by a file the sandbox deleted but keeps open (freed when the sandbox ends; each such
file is still bounded by the fsize rlimit).
"""

from __future__ import annotations

import logging
import os
import select
import stat
import threading
import time
from array import array
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from orchestrator.results.fstree import DIR_FLAGS, MAX_PATH_BYTES, Cursor, Moved, open_root
from orchestrator.results.inotify import (
    IN_CREATE,
    IN_DELETE,
    IN_EXCL_UNLINK,
    IN_IGNORED,
    IN_ISDIR,
    IN_MODIFY,
    IN_MOVED_FROM,
    IN_MOVED_TO,
    IN_Q_OVERFLOW,
    Event,
    Inotify,
    InotifyUnavailable,
)
from orchestrator.results.workspace import Snapshot

log = logging.getLogger(__name__)

WATCH_MASK: Final = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_EXCL_UNLINK
TICK_S: Final = 0.1
POLL_MIN_S: Final = 0.25
POLL_MAX_S: Final = 5.0
RESCAN_GAP_S: Final = 0.5
SAFETY_RESCAN_S: Final = 10.0
"""With inotify, the tree is also rescanned this often (or ten times the last scan's duration, if longer):
should writes ever escape the events (a filesystem or runtime that does not report them), they are still
counted, at a tenth of a core at most."""
STOP_WAIT_S: Final = 60.0

Method = Literal["inotify", "poll"]
Exceeded = Literal["bytes", "files", "error"]
_Inode = tuple[int, int]


@dataclass(frozen=True, slots=True)
class WriteBudget:
    """How much one run may grow its workspace."""

    max_bytes: int
    max_files: int


@dataclass(frozen=True, slots=True)
class MeterReport:
    """What the meter saw, for the end record."""

    method: Method
    max_bytes: int
    max_files: int
    peak_bytes: int  # with inotify, including what was written after the budget was passed until the end
    peak_files: int
    exceeded: Exceeded | None
    detail: str | None  # what was passed, why it polled, or what failed
    rescans: int
    blind: bool  # some directory was out of sight: the filesystem's usage was held against the budget too

    def to_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "max_bytes": self.max_bytes,
            "max_files": self.max_files,
            "peak_bytes": self.peak_bytes,
            "peak_files": self.peak_files,
            "exceeded": self.exceeded,
            "detail": self.detail,
            "rescans": self.rescans,
            "blind": self.blind,
        }


class _InodeIndex:
    """The inodes of a snapshot and their sizes (-1: not a regular file), 16 bytes each: sorted arrays
    searched by bisection (a dict of tuples would cost about ten times as much)."""

    __slots__ = ("_dev", "_inodes", "_others", "_sizes")

    def __init__(self) -> None:
        self._dev = -1
        self._inodes = array("Q")
        self._sizes = array("q")
        self._others: dict[_Inode, int] = {}  # on another device (a mount inside the workspace)

    @classmethod
    def of(cls, before: Snapshot, dev: int) -> _InodeIndex:
        index = cls()
        index._dev = dev
        inodes, sizes = array("Q"), array("q")
        entries = before.entries
        for key in entries:
            entry = entries[key]
            size = entry.size if entry.kind == "file" else -1
            if entry.dev == dev:
                inodes.append(entry.ino)
                sizes.append(size)
            else:
                index._others[(entry.dev, entry.ino)] = size
        order = sorted(range(len(inodes)), key=inodes.__getitem__)
        index._inodes = array("Q", (inodes[i] for i in order))
        index._sizes = array("q", (sizes[i] for i in order))
        return index

    def get(self, inode: _Inode) -> int | None:
        dev, ino = inode
        if dev != self._dev:
            return self._others.get(inode)
        at = bisect_left(self._inodes, ino)
        if at < len(self._inodes) and self._inodes[at] == ino:
            return self._sizes[at]
        return None


class WorkspaceMeter:
    """Measures one run's writes to its workspace (module docstring); ``on_exceeded`` is called once, from
    the meter's thread, when the budget is passed (or the meter itself failed: it fails closed)."""

    def __init__(
        self,
        root: Path,
        before: Snapshot,
        budget: WriteBudget,
        on_exceeded: Callable[[], None],
        *,
        use_inotify: bool = True,
    ) -> None:
        if budget.max_bytes < 0 or budget.max_files < 0:
            raise ValueError("the budget must be >= 0")
        self._root = root
        self._before = before
        self._budget = budget
        self._on_exceeded = on_exceeded
        self._use_inotify = use_inotify
        self._method: Method = "inotify" if use_inotify else "poll"
        self._detail: str | None = None if use_inotify else "inotify not used"
        self._exceeded: Exceeded | None = None
        self._blind = before.truncated or bool(before.unlisted)
        self._rescans = 0
        # accounting, by inode: what the run created, what it grew
        self._before_sizes = _InodeIndex()  # inodes that existed: file size, or -1
        self._new: set[_Inode] = set()
        self._charges: dict[_Inode, int] = {}
        self._refs: dict[_Inode, int] = {}
        self._names: dict[tuple[int, str], _Inode] = {}
        self._bytes = 0
        self._peak_bytes = 0
        self._peak_files = 0
        # watched directories: wd -> (parent wd, name); the root's parent is -1
        self._dirs: dict[int, tuple[int, str]] = {}
        self._children: dict[tuple[int, str], int] = {}
        self._moving: dict[int, tuple[int, str]] = {}  # IN_MOVED_FROM cookie -> where a directory left
        self._need_rescan = False
        self._rescan_after = 0.0  # monotonic time before which an asked-for rescan waits
        self._inotify: Inotify | None = None
        self._root_fd = -1
        self._cursor: Cursor | None = None
        self._fs_used0 = (0, 0)
        self._stop_r, self._stop_w = -1, -1
        self._stopping = False
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------------

    def start(self) -> None:
        """Watch the workspace and start measuring (blocks for the set-up: call it off the event loop)."""
        self._root_fd, root_id = open_root(self._root)
        self._cursor = Cursor(self._root_fd, root_id)
        self._fs_used0 = self._fs_used()
        self._before_sizes = _InodeIndex.of(self._before, root_id[0])
        if self._use_inotify:
            try:
                self._inotify = Inotify()
                self._watch_known()
            except InotifyUnavailable as e:
                self._fall_back(str(e))
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._thread = threading.Thread(target=self._run, name="workspace-meter", daemon=True)
        self._thread.start()

    def stop(self) -> MeterReport:
        """Stop measuring, once the sandbox is gone: a last look (the events still queued, or one more scan
        when polling) settles the figures, so a budget passed just before the end is reported too (then
        ``on_exceeded`` is called from here)."""
        self._stopping = True
        if self._stop_w >= 0:
            os.write(self._stop_w, b"x")
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)
            if self._thread.is_alive():
                log.warning("the workspace meter did not stop within %ss", STOP_WAIT_S)
                return self._report()
        for fd in (self._stop_r, self._stop_w):
            if fd >= 0:
                os.close(fd)
        self._stop_r = self._stop_w = -1
        if self._inotify is not None:
            # closing an inotify descriptor waits for the kernel's SRCU grace period (0-25 ms measured): off
            # the run's path, the figures need nothing more from it
            threading.Thread(target=self._inotify.close, name="meter-close", daemon=True).start()
            self._inotify = None
        if self._cursor is not None:
            self._cursor.close()
        if self._root_fd >= 0:
            os.close(self._root_fd)
            self._root_fd = -1
        return self._report()

    @property
    def exceeded(self) -> Exceeded | None:
        return self._exceeded

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def seen(self) -> MeterReport:
        """What the meter has seen so far (while it runs: figures of a moment)."""
        return self._report()

    def _report(self) -> MeterReport:
        return MeterReport(
            method=self._method,
            max_bytes=self._budget.max_bytes,
            max_files=self._budget.max_files,
            peak_bytes=self._peak_bytes,
            peak_files=self._peak_files,
            exceeded=self._exceeded,
            detail=self._detail,
            rescans=self._rescans,
            blind=self._blind,
        )

    def _fall_back(self, why: str) -> None:
        if self._inotify is not None:
            self._inotify.close()
            self._inotify = None
        self._method = "poll"
        self._detail = f"inotify unavailable: {why}"
        self._dirs.clear()
        self._children.clear()

    # -- the thread ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            if self._inotify is not None:
                self._follow_events()
            else:
                self._poll()
        except Exception as e:  # a bug or an unforeseen tree: fail closed, never silently unbounded
            log.exception("workspace meter failed")
            self._exceed("error", f"the workspace meter failed: {type(e).__name__}: {e}")

    def _follow_events(self) -> None:
        inotify = self._inotify
        assert inotify is not None
        poller = select.poll()
        poller.register(inotify.fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        next_rescan = time.monotonic() + SAFETY_RESCAN_S
        while True:
            stopping = self._stopping  # read first: the last round sees every event of the run
            poller.poll(0 if stopping else TICK_S * 1000)
            if not stopping and self._exceeded is None and time.monotonic() >= next_rescan:
                started = time.monotonic()
                self._rescan()
                next_rescan = time.monotonic() + max(SAFETY_RESCAN_S, 10 * (time.monotonic() - started))
            for _ in range(64 if not stopping else 1 << 30):  # bounded while running: the flag is looked at
                events = inotify.read()
                if not events:
                    break
                self._handle(events)
                self._check()  # past the budget it goes on measuring: the peak shows the overshoot
            if self._need_rescan and self._exceeded is None and (stopping or time.monotonic() >= self._rescan_after):
                self._rescan()
            if self._inotify is None:  # the watch limit was reached meanwhile
                self._poll()
                return
            self._check()
            if stopping:
                return

    def _poll(self) -> None:
        while True:
            stopping = self._stopping
            started = time.monotonic()
            self._rescan()
            if self._check() or stopping:
                return
            interval = min(POLL_MAX_S, max(POLL_MIN_S, 4 * (time.monotonic() - started)))
            deadline = time.monotonic() + interval
            while not self._stopping and (left := deadline - time.monotonic()) > 0:
                select.select([self._stop_r], [], [], min(left, TICK_S))
                if self._blind and self._check():
                    return

    # -- budget ----------------------------------------------------------------------------------------

    def _check(self) -> bool:
        """True (and ``on_exceeded`` called, once) when the budget is passed."""
        budget = self._budget
        files = len(self._new)
        if self._bytes > budget.max_bytes:
            return self._exceed("bytes", f"the run grew the workspace by more than {budget.max_bytes} bytes")
        if files > budget.max_files:
            return self._exceed("files", f"the run created more than {budget.max_files} entries in the workspace")
        if self._blind:
            used_bytes, used_inodes = self._fs_used()
            if used_bytes - self._fs_used0[0] > budget.max_bytes:
                return self._exceed(
                    "bytes",
                    f"the workspace's filesystem grew by more than {budget.max_bytes} bytes while part of the "
                    "workspace was out of the meter's sight",
                )
            if used_inodes - self._fs_used0[1] > budget.max_files:
                return self._exceed(
                    "files",
                    f"the workspace's filesystem gained more than {budget.max_files} inodes while part of the "
                    "workspace was out of the meter's sight",
                )
        return False

    def _exceed(self, what: Exceeded, detail: str) -> bool:
        if self._exceeded is None:
            self._exceeded = what
            self._detail = detail
            self._on_exceeded()
        return True

    def _fs_used(self) -> tuple[int, int]:
        try:
            st = os.fstatvfs(self._root_fd)
        except OSError:
            return self._fs_used0
        inodes = st.f_files - st.f_ffree if st.f_files else 0
        return (st.f_blocks - st.f_bfree) * st.f_frsize, inodes

    # -- accounting ------------------------------------------------------------------------------------

    def _account(self, wd: int, name: str, st: os.stat_result) -> None:
        inode = (st.st_dev, st.st_ino)
        place = (wd, name)
        old = self._names.get(place)
        if old != inode:
            if old is not None:
                self._release(old)
            self._names[place] = inode
            self._refs[inode] = self._refs.get(inode, 0) + 1
        regular = stat.S_ISREG(st.st_mode)
        size_before = self._before_sizes.get(inode)
        if size_before is not None:  # existed before the run (perhaps moved or linked since)
            charge = max(0, st.st_size - size_before) if regular and size_before >= 0 else 0
        else:
            self._new.add(inode)
            charge = st.st_size if regular else 0
        self._bytes += charge - self._charges.get(inode, 0)
        self._charges[inode] = charge
        self._peak_bytes = max(self._peak_bytes, self._bytes)
        self._peak_files = max(self._peak_files, len(self._new))

    def _release(self, inode: _Inode) -> None:
        refs = self._refs.get(inode, 0) - 1
        if refs > 0:
            self._refs[inode] = refs
            return
        self._refs.pop(inode, None)
        self._bytes -= self._charges.pop(inode, 0)
        self._new.discard(inode)

    def _unname(self, wd: int, name: str) -> None:
        inode = self._names.pop((wd, name), None)
        if inode is not None:
            self._release(inode)

    # -- events ------------------------------------------------------------------------------------------

    def _handle(self, events: list[Event]) -> None:
        dirty: dict[tuple[int, str], None] = {}
        for event in events:
            mask, wd, name = event.mask, event.wd, event.name
            if mask & IN_Q_OVERFLOW:
                self._need_rescan = True
                continue
            if mask & IN_IGNORED:
                self._forget(wd)
                continue
            if wd not in self._dirs or not name:
                continue
            if mask & IN_MODIFY:
                dirty[(wd, name)] = None  # a file that may have existed unseen is not taken for new
            elif mask & (IN_DELETE | IN_MOVED_FROM):
                dirty.pop((wd, name), None)
                self._unname(wd, name)
                if mask & IN_MOVED_FROM and mask & IN_ISDIR:
                    if len(self._moving) > 4096:
                        self._moving.clear()  # moves whose other half never came
                    self._moving[event.cookie] = (wd, name)
            elif mask & (IN_CREATE | IN_MOVED_TO):
                followed = False
                if mask & IN_MOVED_TO and mask & IN_ISDIR:
                    followed = self._moved_dir(event.cookie, wd, name)
                self._arrived(wd, name, scan=not followed)
        for wd, name in dirty:
            if wd in self._dirs:
                self._arrived(wd, name, scan=False, modified=True)

    def _moved_dir(self, cookie: int, wd: int, name: str) -> bool:
        """A watched directory moved within the workspace: its watch follows it."""
        source = self._moving.pop(cookie, None)
        child = self._children.pop(source, None) if source is not None else None
        if child is None or child not in self._dirs:
            return False
        self._dirs[child] = (wd, name)
        self._children[(wd, name)] = child
        return True

    def _forget(self, wd: int) -> None:
        place = self._dirs.pop(wd, None)
        if place is not None and self._children.get(place) == wd:
            del self._children[place]

    def _parts(self, wd: int) -> tuple[str, ...] | None:
        """The path of a watched directory, from the parent links (None when it is no longer known)."""
        parts: list[str] = []
        for _ in range(len(self._dirs) + 1):
            place = self._dirs.get(wd)
            if place is None:
                return None
            parent, name = place
            if parent == -1:
                return tuple(reversed(parts))
            parts.append(name)
            wd = parent
        self._need_rescan = True  # the links loop (moves seen out of order): measure afresh
        return None

    def _arrived(self, wd: int, name: str, *, scan: bool, modified: bool = False) -> None:
        """``name`` appeared or changed in the watched directory ``wd``: measure it; watch a new directory."""
        parts = self._parts(wd)
        assert self._cursor is not None
        if parts is None or (modified and self._unseen(parts, name)):
            return
        try:
            fd = self._cursor.goto(parts)
        except (OSError, Moved):
            self._need_rescan = True  # the way to the watch is gone (an ancestor moved?): measure afresh
            return
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return  # gone again from a directory in hand: its deletion or move is an event of its own
        except OSError:
            self._need_rescan = True
            return
        self._account(wd, name, st)
        if scan and stat.S_ISDIR(st.st_mode):
            self._scan_dir(wd, parts, name)

    # -- scans ---------------------------------------------------------------------------------------------

    def _rescan(self) -> None:
        """Measure the whole tree afresh (the queue overflowed, the tree moved under the watches, polling).
        The next one asked for waits four times as long as this one took (at least RESCAN_GAP_S): a
        workload that keeps forcing rescans cannot take the controller's whole time."""
        started = time.monotonic()
        try:
            self._scan_all()
        finally:
            ended = time.monotonic()
            self._rescan_after = ended + max(RESCAN_GAP_S, 4 * (ended - started))

    def _scan_all(self) -> None:
        self._rescans += 1
        self._need_rescan = False
        self._new.clear()
        self._charges.clear()
        self._refs.clear()
        self._names.clear()
        self._bytes = 0
        self._dirs.clear()
        self._children.clear()
        self._moving.clear()
        root_wd = -2  # the root's key when nothing is watched
        if self._inotify is not None:
            try:
                root_wd = self._inotify.watch_dir_fd(self._root_fd, WATCH_MASK)
            except InotifyUnavailable as e:
                self._fall_back(str(e))
        self._dirs[root_wd] = (-1, "")
        self._scan_below(root_wd, ())

    def _scan_dir(self, parent_wd: int, parent_parts: tuple[str, ...], name: str) -> None:
        """A directory that appeared: watch it, and measure what it already holds."""
        parts = (*parent_parts, name)
        if self._out_of_sight(parts):
            return
        wd = self._watch(parent_wd, parent_parts, name)
        if wd is not None:
            self._scan_below(wd, parts)

    def _scan_below(self, wd: int, parts: tuple[str, ...]) -> None:
        """Measure (and watch) everything below the directory ``parts`` (watch ``wd``), depth first; stops
        as soon as the budget is passed, so its time and memory are bounded by the budget."""
        assert self._cursor is not None
        stack = [(wd, parts)]
        seen = 0
        while stack:
            wd, parts = stack.pop()
            if self._out_of_sight(parts):
                continue
            subdirs: list[str] = []
            try:
                fd = self._cursor.goto(parts)
            except (OSError, Moved) as e:
                self._lost_way(e)
                continue
            try:
                listing = os.scandir(fd)
            except OSError:
                self._blind = True  # cannot be listed: out of sight
                continue
            with listing:
                for entry in listing:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    except OSError:
                        self._blind = True
                        continue
                    if self._unseen(parts, entry.name):
                        continue  # may have existed: out of sight (the filesystem's usage counts instead)
                    self._account(wd, entry.name, st)
                    if stat.S_ISDIR(st.st_mode):
                        subdirs.append(entry.name)
                    seen += 1
                    if seen % 256 == 0 and self._check():
                        return
            for name in subdirs:
                child = self._watch(wd, parts, name)
                if child is not None:
                    stack.append((child, (*parts, name)))
            if self._check():
                return

    def _lost_way(self, error: OSError | Moved) -> None:
        """A watched directory could not be reached by its path. Gone or moved (a directory on the way was
        removed or renamed, e.g. a build's `rm -rf tmp` while its creation was being measured): what it held
        is unknown, so the tree is measured afresh. Anything else (unreadable): out of sight."""
        if isinstance(error, (Moved, FileNotFoundError, NotADirectoryError)):
            self._need_rescan = True
        else:
            self._blind = True

    def _unseen(self, parts: tuple[str, ...], name: str) -> bool:
        """Whether ``name`` in ``parts`` lies where the before snapshot did not look (it may have existed)."""
        before = self._before
        if not (before.truncated or before.unlisted):
            return False
        return not before.known("/".join((*parts, name)))

    def _out_of_sight(self, parts: tuple[str, ...]) -> bool:
        """Where the meter cannot tell what the run did: too deep, or where the snapshot did not look."""
        if sum(len(os.fsencode(p)) + 1 for p in parts) > MAX_PATH_BYTES:
            self._blind = True
            return True
        before = self._before
        return bool(parts) and (before.truncated or bool(before.unlisted)) and not before.known("/".join(parts))

    def _watch(self, parent_wd: int, parent_parts: tuple[str, ...], name: str) -> int | None:
        """Watch the directory ``name`` of ``parent_parts``; its key (a watch descriptor; a negative
        stand-in when polling), or None when it cannot be opened (then it is out of sight)."""
        assert self._cursor is not None
        key = self._children.get((parent_wd, name))
        if self._inotify is None:
            key = key if key is not None else -3 - len(self._dirs)
        else:
            try:
                parent_fd = self._cursor.goto(parent_parts)
            except (OSError, Moved) as e:
                self._lost_way(e)
                return None
            try:
                fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
            except (FileNotFoundError, NotADirectoryError):
                return None  # gone from a watched directory in hand: its deletion or move is an event of its own
            except OSError:
                self._blind = True
                return None
            try:
                key = self._inotify.watch_dir_fd(fd, WATCH_MASK)
            except InotifyUnavailable as e:
                self._fall_back(str(e))
                self._need_rescan = True
                return None
            except OSError:
                self._blind = True
                return None
            finally:
                os.close(fd)
        self._dirs[key] = (parent_wd, name)
        self._children[(parent_wd, name)] = key
        return key

    def _watch_known(self) -> None:
        """At start: watch the root and every directory of the before snapshot."""
        inotify = self._inotify
        assert inotify is not None and self._cursor is not None
        root_wd = inotify.watch_dir_fd(self._root_fd, WATCH_MASK)
        self._dirs[root_wd] = (-1, "")
        by_key = {"": root_wd}
        entries = self._before.entries
        for key in entries:
            if entries[key].kind != "dir":
                continue
            parent, _, name = key.rpartition("/")
            parent_wd = by_key.get(parent)
            if parent_wd is None:
                continue  # its parent could not be watched: out of sight already
            parts = tuple(parent.split("/")) if parent else ()
            wd = self._watch(parent_wd, parts, name)
            if wd is None:
                if self._inotify is None:
                    return  # fell back to polling
                continue
            by_key[key] = wd
