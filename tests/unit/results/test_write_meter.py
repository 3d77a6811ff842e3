"""The workspace write budget, measured while the run writes (here the test itself writes, on a real
directory): inotify, the poll fallback, what counts and what does not, blind spots, a bounded overshoot."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from orchestrator.results import snapshot
from orchestrator.results.write_meter import MeterReport, WorkspaceMeter, WriteBudget
from tests.support.unprivileged import as_nobody

MIB = 1 << 20
METHODS = [pytest.param(True, id="inotify"), pytest.param(False, id="poll")]


class Metered:
    """A meter on ``root`` started with its snapshot taken now; ``hit`` is set when the budget is passed."""

    def __init__(self, root: Path, budget: WriteBudget, *, use_inotify: bool = True) -> None:
        self.root = root
        self.hit = threading.Event()
        self.meter = WorkspaceMeter(root, snapshot(root), budget, self.hit.set, use_inotify=use_inotify)
        self.meter.start()

    def stop(self) -> MeterReport:
        return self.meter.stop()


@contextlib.contextmanager
def metered(root: Path, max_bytes: int = 64 * MIB, max_files: int = 1000, **kw: bool) -> Iterator[Metered]:
    m = Metered(root, WriteBudget(max_bytes, max_files), **kw)
    try:
        yield m
    finally:
        if m.meter.running:  # a failed test left it running
            m.stop()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "existing.bin").write_bytes(b"x" * (4 * MIB))
    (root / "src").mkdir()
    (root / "src" / "main.py").write_bytes(b"print(1)\n")
    return root


def write_until(path: Path, hit: threading.Event, limit: int, chunk: int = MIB) -> int:
    """Writes ``chunk``-sized blocks until ``hit`` is set or ``limit`` bytes were written; the bytes written."""
    written = 0
    block = b"\0" * chunk
    with open(path, "ab", buffering=0) as f:
        while not hit.is_set() and written < limit:
            written += f.write(block)
    return written


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


# ---------------------------------------------------------------------------------------------- the budget


@pytest.mark.parametrize("use_inotify", METHODS)
def test_passing_the_byte_budget_is_reported_at_once(ws: Path, use_inotify: bool) -> None:
    """Written far past the budget: the meter says so while the writing goes on; with inotify within a
    few writes, when polling within a scan interval."""
    with metered(ws, max_bytes=16 * MIB, use_inotify=use_inotify) as m:
        (ws / "out").mkdir()
        written = write_until(ws / "out" / "big.bin", m.hit, limit=2048 * MIB)
        assert m.hit.wait(10)
        report = m.stop()
    assert (report.exceeded, report.method) == ("bytes", "inotify" if use_inotify else "poll")
    assert report.detail == "the run grew the workspace by more than 16777216 bytes"
    assert report.peak_bytes > 16 * MIB
    overshoot = written - 16 * MIB
    if use_inotify:
        assert overshoot <= 64 * MIB, overshoot  # in-process: the writer notices the flag within a few writes
    else:
        assert written < 2048 * MIB  # stopped within a scan interval, long before the end
    assert not report.blind


@pytest.mark.parametrize("use_inotify", METHODS)
def test_passing_the_file_budget_is_reported(ws: Path, use_inotify: bool) -> None:
    with metered(ws, max_files=200, use_inotify=use_inotify) as m:
        made = 0
        while not m.hit.is_set() and made < 20_000:
            (ws / f"f{made:05d}").touch()
            made += 1
            if made % 50 == 0:
                (ws / f"dir{made}" / "a" / "b").mkdir(parents=True)  # directories count, and are followed
        assert m.hit.wait(10)
        report = m.stop()
    assert report.exceeded == "files"
    assert report.peak_files > 200
    assert made < 20_000


@pytest.mark.parametrize("use_inotify", METHODS)
def test_within_budget_nothing_is_reported_and_the_peak_is_measured(ws: Path, use_inotify: bool) -> None:
    with metered(ws, max_bytes=16 * MIB, max_files=100, use_inotify=use_inotify) as m:
        (ws / "a.bin").write_bytes(b"\0" * (3 * MIB))
        (ws / "d").mkdir()
        (ws / "d" / "b.bin").write_bytes(b"\0" * MIB)
        if use_inotify:
            assert wait_for(lambda: m.meter.seen().peak_bytes == 4 * MIB)  # seen while running
        report = m.stop()
    assert (report.exceeded, report.peak_bytes, report.peak_files) == (None, 4 * MIB, 3)
    assert not m.hit.is_set()


def test_a_burst_just_before_the_end_is_still_reported(ws: Path) -> None:
    """Polling may not have scanned since the last write: stopping looks once more."""
    with metered(ws, max_bytes=8 * MIB, use_inotify=False) as m:
        (ws / "burst.bin").write_bytes(b"\0" * (32 * MIB))
        report = m.stop()
    assert report.exceeded == "bytes"
    assert m.hit.is_set()


# ---------------------------------------------------------------------------------------------- what counts


def test_existing_files_count_only_by_their_growth(ws: Path) -> None:
    with metered(ws, max_bytes=2 * MIB) as m:
        with open(ws / "existing.bin", "r+b") as f:  # rewritten in place: 4 MiB written, no growth
            f.write(b"y" * (4 * MIB))
        with open(ws / "existing.bin", "ab") as f:
            f.write(b"z" * MIB)  # 1 MiB of growth
        assert wait_for(lambda: m.meter.seen().peak_bytes == MIB)
        report = m.stop()
    assert (report.exceeded, report.peak_bytes, report.peak_files) == (None, MIB, 0)


def test_moves_and_links_of_existing_files_cost_nothing(ws: Path) -> None:
    with metered(ws, max_bytes=MIB, max_files=3) as m:
        (ws / "archive").mkdir()  # one new entry
        os.replace(ws / "existing.bin", ws / "archive" / "moved.bin")
        os.link(ws / "archive" / "moved.bin", ws / "hard.bin")
        os.replace(ws / "src", ws / "archive" / "src")
        (ws / "archive" / "src" / "new.py").write_bytes(b"x" * 10)  # written after its directory moved
        assert wait_for(lambda: m.meter.seen().peak_bytes == 10)
        report = m.stop()
    assert (report.exceeded, report.peak_files) == (None, 2)
    assert report.peak_bytes == 10


def test_what_the_run_deletes_it_gets_back(ws: Path) -> None:
    """The budget bounds the space the run holds, not its traffic: a build's temporary files come and go."""
    with metered(ws, max_bytes=6 * MIB, max_files=10) as m:
        for round_ in range(5):
            (ws / "tmp").mkdir()
            for i in range(5):
                (ws / "tmp" / f"t{i}").write_bytes(b"\0" * MIB)
            shutil.rmtree(ws / "tmp")
            (ws / f"kept{round_}").write_bytes(b"")
        report = m.stop()
    assert report.exceeded is None
    assert report.peak_bytes <= 5 * MIB


def test_a_tree_removed_while_it_is_measured_keeps_the_meter_sighted(ws: Path) -> None:
    """`rm -rf` of a directory whose creation is still being measured: the directory is gone, not out of
    sight, so the budget stays the workspace's own (blind, it would be the whole filesystem's, which other
    processes grow too)."""
    with metered(ws, max_files=100) as m:
        for _ in range(100):
            (ws / "tmp" / "d").mkdir(parents=True)
            (ws / "tmp" / "d" / "f").write_bytes(b"x")
            shutil.rmtree(ws / "tmp")
        report = m.stop()
    assert (report.exceeded, report.blind) == (None, False)


def test_a_tree_renamed_while_it_is_measured_is_counted_where_it_went(ws: Path) -> None:
    """A directory made, then its parent renamed before the meter reached it: what it holds is found at its
    new path (measured afresh), never lost on the old one."""
    with metered(ws, max_files=40) as m:
        for i in range(5):
            (ws / f"a{i}" / "sub").mkdir(parents=True)
            os.rename(ws / f"a{i}", ws / f"b{i}")
            for j in range(10):
                (ws / f"b{i}" / "sub" / f"f{j}").write_bytes(b"")
        report = m.stop()
    assert report.exceeded == "files" and not report.blind, report


def test_a_tree_made_faster_than_it_is_watched_is_counted(ws: Path) -> None:
    """A directory is scanned when it appears: what was made inside before its watch counts too."""
    with metered(ws, max_files=50) as m:
        staging = Path(tempfile.mkdtemp(dir=ws.parent))
        for i in range(60):
            (staging / f"f{i}").write_bytes(b"")
        os.replace(staging, ws / "arrived")  # 61 entries appear at once, by a rename from outside
        assert m.hit.wait(10)
        report = m.stop()
    assert report.exceeded == "files"


# ---------------------------------------------------------------------------------------------- blind spots


def _blind_scenario(root: Path) -> str:
    hit = threading.Event()
    meter = WorkspaceMeter(root, snapshot(root), WriteBudget(16 * MIB, 1000), hit.set)
    meter.start()
    hidden = root / "hidden"
    hidden.mkdir(mode=0o300)  # writable and searchable, not readable: the meter cannot list or watch it
    written = write_until(hidden / "fill.bin", hit, limit=1024 * MIB)
    hit.wait(10)
    report = meter.stop()
    return f"{report.exceeded} {report.blind} {written} {report.detail}"


def test_a_directory_out_of_sight_falls_back_to_the_filesystems_usage() -> None:
    """A directory the controller cannot read (a non-root controller, a directory the sandbox made
    unreadable): the filesystem's own usage is held against the budget instead (conservative)."""
    # on a filesystem of its own: on the shared /tmp, other tests' files made meanwhile counted as this run's
    # (a full parallel run saw the files budget pass first: "files", not "bytes")
    exceeded, blind, written, detail = as_nobody(_blind_scenario, tmpfs_size="256m").split(" ", 3)
    assert (exceeded, blind) == ("bytes", "True"), detail
    assert detail.startswith("the workspace's filesystem grew by more than 16777216 bytes")
    assert int(written) < 1024 * MIB


def test_a_tree_deeper_than_path_max_is_out_of_sight(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    with metered(root, max_files=10_000) as m:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(20):
            os.mkdir("n" * 250, dir_fd=fd)
            child = os.open("n" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        os.close(fd)
        assert wait_for(lambda: m.meter.seen().blind)
        report = m.stop()
    assert report.blind and report.exceeded is None
    assert report.peak_files <= 20


@pytest.mark.parametrize("use_inotify", METHODS)
def test_a_snapshot_that_did_not_see_everything_makes_the_meter_careful(tmp_path: Path, use_inotify: bool) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(20):
        (root / f"f{i:02d}").write_bytes(b"\0" * (2 * MIB if i == 19 else 0))
    hit = threading.Event()
    before = snapshot(root, max_entries=5)
    # a budget the filesystem's other writers cannot pass meanwhile: the meter's own figures are looked at
    meter = WorkspaceMeter(root, before, WriteBudget(1 << 40, 10**7), hit.set, use_inotify=use_inotify)
    meter.start()
    with open(root / "f19", "ab") as f:  # a file the snapshot did not record: not taken for the run's
        f.write(b"tail")
    time.sleep(0.3)
    report = meter.stop()
    # the 15 files the snapshot did not record are not taken for the run's either: no false verdict
    assert (report.exceeded, report.peak_files, report.peak_bytes, report.blind) == (None, 0, 0, True)


# ---------------------------------------------------------------------------------------------- set-up


def test_the_meter_stops_its_thread_and_closes_its_descriptors(ws: Path) -> None:
    count = len(os.listdir("/proc/self/fd"))
    # the threads there before (another test's may end meanwhile: the worker process is shared): none is added
    before = set(threading.enumerate())
    for use in (True, False):
        with metered(ws, use_inotify=use) as m:
            (ws / "x").write_bytes(b"x")
            m.stop()
    # the inotify descriptor is closed on a thread of its own once the figures are settled (its close
    # waits for the kernel's grace period): gone within moments, never left behind
    for _ in range(200):
        if len(os.listdir("/proc/self/fd")) == count and not set(threading.enumerate()) - before:
            break
        time.sleep(0.01)
    assert len(os.listdir("/proc/self/fd")) == count
    assert not set(threading.enumerate()) - before


def test_a_negative_budget_is_refused(ws: Path) -> None:
    with pytest.raises(ValueError, match="budget"):
        WorkspaceMeter(ws, snapshot(ws), WriteBudget(-1, 1), lambda: None)


def test_an_overflowing_event_queue_is_measured_by_a_rescan(tmp_path: Path) -> None:
    """More events than the kernel queues (16,384 by default) while the meter cannot read them: the
    kernel drops them and says so; the meter then walks the tree afresh and the count is still right."""
    import ctypes
    import subprocess
    import sys

    root = tmp_path / "ws"
    root.mkdir()
    count = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text()) + 5000
    script = f"import os, sys\nsys.stdin.read(1)\nfor i in range({count}): os.close(os.open('{root}/f%d' % i, 65))"
    with metered(root, max_files=count + 10) as m:
        child = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE)
        assert child.stdin is not None
        # calls through PyDLL keep the GIL, and a long switch interval keeps it between them: the meter's
        # thread cannot read until the child is done
        held = ctypes.PyDLL(None)
        status = ctypes.c_int()
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1000)
        try:
            os.write(child.stdin.fileno(), b"x")
            while held.waitpid(child.pid, ctypes.byref(status), os.WNOHANG) == 0:
                held.usleep(20_000)
        finally:
            sys.setswitchinterval(interval)
        report = m.stop()
    assert os.waitstatus_to_exitcode(status.value) == 0
    assert report.rescans >= 1
    assert (report.exceeded, report.peak_files) == (None, count)
