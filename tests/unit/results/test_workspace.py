"""Workspace snapshots and side effects, on real directories: symlinks are recorded, never followed.

The hostile classes (changes hidden by floods, the record's bound, names carrying secrets, set-id bits,
scan cost) have their own file: test_results_hostile_workspace.py."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import resource
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.domain.canonical import canonical_json, sha256_hex
from orchestrator.domain.errors import InputInvalid
from orchestrator.results import CollectLimits, FileChange, SideEffects, Snapshot, collect, snapshot
from orchestrator.results.fstree import (
    MAX_PATH_BYTES,
    NOTE_BUDGET,
    NOTE_NOT_REGULAR,
    NOTE_PERMISSION,
    NOTE_REPLACED,
    NOTE_SYMLINK,
    READ_CHUNK,
    Cursor,
    Moved,
    entry_at,
    hash_file,
)
from orchestrator.results.record import EMPTY_DIGEST
from tests.support.unprivileged import as_nobody


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(root: Path, change: Callable[[], object], **limits: int) -> SideEffects:
    before = snapshot(root)
    change()
    return collect(before, root, limits=CollectLimits(**limits))


def paths(changes: tuple[FileChange, ...]) -> list[str]:
    return [c.path for c in changes]


def by_path(changes: tuple[FileChange, ...]) -> dict[str, FileChange]:
    return {c.path: c for c in changes}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "keep.txt").write_bytes(b"unchanged\n")
    (root / "edit.txt").write_bytes(b"old\n")
    (root / "gone.txt").write_bytes(b"bye\n")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_bytes(b"print('hi')\n")
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host directory the sandbox must never make us read."""
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_bytes(b"HOST SECRET CONTENT\n")
    (out / "main.py").write_bytes(b"host file with a workspace name\n")
    return out


OUTSIDE_HASHES = {sha(b"HOST SECRET CONTENT\n"), sha(b"host file with a workspace name\n")}


def assert_never_read(effects: SideEffects, *extra: str) -> None:
    text = effects.to_json().decode()
    for digest in (*OUTSIDE_HASHES, *extra):
        assert digest not in text


# ---------------------------------------------------------------------------------------------- basics


def test_snapshot_is_stat_only(ws: Path) -> None:
    snap = snapshot(ws)
    assert isinstance(snap, Snapshot)
    assert list(snap.entries) == ["edit.txt", "gone.txt", "keep.txt", "src", "src/main.py"]
    entry = snap.entries["edit.txt"]
    st = os.lstat(ws / "edit.txt")
    assert (entry.kind, entry.size, entry.mode, entry.mtime_ns, entry.ino, entry.dev) == (
        "file",
        4,
        st.st_mode,
        st.st_mtime_ns,
        st.st_ino,
        st.st_dev,
    )
    assert entry.link_target is None
    assert snap.entries["src"].kind == "dir"
    assert not snap.truncated
    assert snap.last is None
    assert len(snap) == 5


def test_create_modify_delete(ws: Path) -> None:
    def change() -> None:
        (ws / "edit.txt").write_bytes(b"new content\n")
        (ws / "gone.txt").unlink()
        (ws / "new.bin").write_bytes(b"\x00\x01")
        (ws / "src" / "pkg").mkdir()
        (ws / "src" / "pkg" / "mod.py").write_bytes(b"x = 1\n")

    fx = run(ws, change)
    assert paths(fx.created) == ["new.bin", "src/pkg", "src/pkg/mod.py"]
    assert paths(fx.modified) == ["edit.txt"]
    assert paths(fx.deleted) == ["gone.txt"]
    created = by_path(fx.created)
    assert created["new.bin"] == FileChange(path="new.bin", kind="file", size=2, mode=0o644, sha256=sha(b"\x00\x01"))
    assert created["src/pkg"].kind == "dir"
    assert created["src/pkg"].size is None
    assert created["src/pkg"].sha256 is None
    assert created["src/pkg/mod.py"].sha256 == sha(b"x = 1\n")
    assert fx.modified[0].sha256 == sha(b"new content\n")
    assert fx.modified[0].size == 12
    assert fx.deleted[0] == FileChange(path="gone.txt", kind="file", size=4, mode=0o644)
    assert (fx.created_count, fx.modified_count, fx.deleted_count) == (3, 1, 1)
    assert fx.hashed_bytes == 2 + 6 + 12
    assert fx.hashed_files == 3
    assert fx.bytes_written == 2 + 6 + (12 - 4)  # created files, plus what edit.txt grew
    assert fx.complete and fx.listing_complete


def assert_unchanged(fx: SideEffects) -> None:
    assert (fx.created, fx.modified, fx.deleted) == ((), (), ())
    assert (fx.created_count, fx.modified_count, fx.deleted_count, fx.bytes_written) == (0, 0, 0, 0)
    assert fx.digest == EMPTY_DIGEST
    assert fx.complete and fx.listing_complete


def test_nothing_changed(ws: Path) -> None:
    fx = run(ws, lambda: None)
    assert_unchanged(fx)
    assert fx.entries_examined == 10  # 5 looked up by name, 5 listed again to find new ones
    assert fx.to_json() == (
        b'{"bytes_written":0,"complete":true,"created":[],"created_count":0,"deleted":[],"deleted_count":0,'
        b'"digest":"' + EMPTY_DIGEST.encode() + b'","entries_examined":10,"hashed_bytes":0,"hashed_files":0,'
        b'"listing_complete":true,"modified":[],"modified_count":0,"problems":[],"problems_count":0,'
        b'"setid_removed":[],"setid_removed_count":0}'
    )


def test_same_size_same_mtime_rewrite_is_seen_through_ctime(ws: Path) -> None:
    target = ws / "edit.txt"
    st = os.stat(target)

    def change() -> None:
        target.write_bytes(b"OLD\n")  # same size
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime restored (touch -r)

    fx = run(ws, change)
    assert os.stat(target).st_mtime_ns == st.st_mtime_ns
    assert paths(fx.modified) == ["edit.txt"]
    assert fx.modified[0].sha256 == sha(b"OLD\n")


def test_mode_changes(ws: Path) -> None:
    def change() -> None:
        os.chmod(ws / "keep.txt", 0o755)
        os.chmod(ws / "src", 0o700)

    fx = run(ws, change)
    modified = by_path(fx.modified)
    assert modified["keep.txt"].mode == 0o755
    assert modified["keep.txt"].sha256 == sha(b"unchanged\n")
    assert modified["src"].note == "mode changed"
    assert modified["src"].mode == 0o700


def test_directory_content_changes_do_not_list_the_directory(ws: Path) -> None:
    fx = run(ws, lambda: (ws / "src" / "new.py").write_bytes(b""))
    assert paths(fx.created) == ["src/new.py"]
    assert fx.modified == ()
    assert fx.created[0].sha256 == sha(b"")


def test_deleted_tree_and_replaced_dir(ws: Path) -> None:
    def change() -> None:
        (ws / "src2").mkdir()  # made while src exists: a different inode
        shutil.rmtree(ws / "src")
        (ws / "src2").rename(ws / "src")

    fx = run(ws, change)
    assert paths(fx.deleted) == ["src/main.py"]
    assert fx.modified[0].path == "src"
    assert fx.modified[0].note == "replaced"


def test_kind_changes(ws: Path) -> None:
    def change() -> None:
        (ws / "edit.txt").unlink()
        (ws / "edit.txt").mkdir()
        shutil.rmtree(ws / "src")
        (ws / "src").write_bytes(b"now a file")

    fx = run(ws, change)
    modified = by_path(fx.modified)
    assert modified["edit.txt"].kind == "dir"
    assert modified["edit.txt"].note == "was file"
    assert modified["src"].kind == "file"
    assert modified["src"].note == "was dir"
    assert modified["src"].sha256 == sha(b"now a file")
    assert paths(fx.deleted) == ["src/main.py"]


def test_hard_links(ws: Path) -> None:
    fx = run(ws, lambda: os.link(ws / "keep.txt", ws / "hard.txt"))
    assert paths(fx.created) == ["hard.txt"]
    assert fx.created[0].sha256 == sha(b"unchanged\n")
    # the link count is inode metadata: ctime moved, so the original shows up with its unchanged hash
    assert paths(fx.modified) == ["keep.txt"]
    assert fx.modified[0].sha256 == sha(b"unchanged\n")


# ---------------------------------------------------------------------------------------------- symlinks


def test_symlink_to_host_file_is_recorded_never_read(ws: Path) -> None:
    passwd = Path("/etc/passwd").read_bytes()

    def change() -> None:
        os.symlink("/etc/passwd", ws / "passwd")
        os.symlink("../../etc/shadow", ws / "src" / "rel")
        os.symlink("/", ws / "rootlink")

    fx = run(ws, change)
    created = by_path(fx.created)
    assert list(created) == ["passwd", "rootlink", "src/rel"]
    assert created["passwd"] == FileChange(
        path="passwd", kind="symlink", size=len("/etc/passwd"), mode=0o777, link_target="/etc/passwd"
    )
    assert created["src/rel"].link_target == "../../etc/shadow"
    assert fx.hashed_bytes == 0
    assert_never_read(fx, sha(passwd))


def test_symlinked_dir_is_not_descended(ws: Path, outside: Path) -> None:
    os.symlink(outside, ws / "link")
    os.symlink("..", ws / "src" / "up")  # a loop
    snap = snapshot(ws)
    assert snap.entries["link"].kind == "symlink"
    assert snap.entries["link"].link_target == str(outside)
    assert not any(key.startswith(("link/", "src/up/")) for key in snap.entries)


def test_symlink_retargeted(ws: Path) -> None:
    os.symlink("a", ws / "l")

    def change() -> None:
        (ws / "l").unlink()
        os.symlink("b", ws / "l")

    fx = run(ws, change)
    assert fx.modified == (FileChange(path="l", kind="symlink", size=1, mode=0o777, link_target="b"),)


def test_symlink_replaced_by_same_target_is_unchanged(ws: Path) -> None:
    os.symlink("a", ws / "l")

    def change() -> None:
        (ws / "l").unlink()
        os.symlink("a", ws / "l")

    assert_unchanged(run(ws, change))


def test_dir_replaced_by_symlink_to_outside(ws: Path, outside: Path) -> None:
    def change() -> None:
        shutil.rmtree(ws / "src")
        os.symlink(outside, ws / "src")

    fx = run(ws, change)
    assert fx.modified == (
        FileChange(
            path="src", kind="symlink", size=len(str(outside)), mode=0o777, link_target=str(outside), note="was dir"
        ),
    )
    assert paths(fx.deleted) == ["src/main.py"]
    assert fx.created == ()
    assert_never_read(fx)


def _recorded(root: Path, relative: str) -> tuple[int, Cursor, str, object]:
    """A cursor on the directory holding ``relative`` and the entry of its last component, as a scan
    that is about to hash it holds them."""
    parts = relative.split("/")
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    st = os.fstat(root_fd)
    cursor = Cursor(root_fd, (st.st_dev, st.st_ino))
    fd = cursor.goto(tuple(parts[:-1]))
    return root_fd, cursor, parts[-1], entry_at(fd, parts[-1])


def _hash(cursor: Cursor, name: str, entry: object) -> tuple[str | None, str | None]:
    hashed = hash_file(cursor.fd, name, entry, 1 << 20, memoryview(bytearray(READ_CHUNK)))  # type: ignore[arg-type]
    return hashed.sha256, hashed.note


def test_dir_swapped_for_symlink_while_hashing_reads_the_original(ws: Path, outside: Path) -> None:
    """The directory holding a new file becomes a symlink to a host directory holding a file of the same
    name while the scan is in it: the scan reads through the descriptor it holds, never the host file."""
    (ws / "src" / "secret.txt").write_bytes(b"workspace file\n")
    root_fd, cursor, name, entry = _recorded(ws, "src/secret.txt")
    try:
        (ws / "src").rename(ws / "moved")
        os.symlink(outside, ws / "src")
        assert _hash(cursor, name, entry) == (sha(b"workspace file\n"), None)
    finally:
        cursor.close()
        os.close(root_fd)


def test_file_swapped_for_symlink_before_hashing(ws: Path) -> None:
    passwd = Path("/etc/passwd").read_bytes()
    (ws / "report.txt").write_bytes(b"report\n")
    root_fd, cursor, name, entry = _recorded(ws, "report.txt")
    try:
        (ws / "report.txt").unlink()
        os.symlink("/etc/passwd", ws / "report.txt")
        digest, note = _hash(cursor, name, entry)
        assert (digest, note) == (None, NOTE_SYMLINK)
        assert digest != sha(passwd)
    finally:
        cursor.close()
        os.close(root_fd)


def test_file_replaced_by_another_file_before_hashing(ws: Path) -> None:
    (ws / "a.txt").write_bytes(b"first\n")
    root_fd, cursor, name, entry = _recorded(ws, "a.txt")
    try:
        (ws / "b.txt").write_bytes(b"second\n")
        os.replace(ws / "b.txt", ws / "a.txt")
        assert _hash(cursor, name, entry) == (None, NOTE_REPLACED)
    finally:
        cursor.close()
        os.close(root_fd)


# ---------------------------------------------------------------------------------------------- special files


def _in_thread(work: Callable[[], SideEffects], timeout: float = 10.0) -> SideEffects:
    box: list[SideEffects] = []
    thread = threading.Thread(target=lambda: box.append(work()), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "blocked (a FIFO was opened?)"
    return box[0]


def test_fifo_is_never_opened(ws: Path) -> None:
    fx = _in_thread(lambda: run(ws, lambda: os.mkfifo(ws / "pipe")))
    mode = stat.S_IMODE(os.lstat(ws / "pipe").st_mode)
    assert fx.created == (FileChange(path="pipe", kind="other", mode=mode, note="fifo"),)


def test_fifo_swapped_in_before_hashing_does_not_block(ws: Path) -> None:
    (ws / "out.log").write_bytes(b"log\n")
    root_fd, cursor, name, entry = _recorded(ws, "out.log")
    try:
        (ws / "out.log").unlink()
        os.mkfifo(ws / "out.log")
        box: list[tuple[str | None, str | None]] = []
        thread = threading.Thread(target=lambda: box.append(_hash(cursor, name, entry)), daemon=True)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "blocked on a FIFO"
        assert box[0] in ((None, NOTE_NOT_REGULAR), (None, NOTE_REPLACED))
    finally:
        cursor.close()
        os.close(root_fd)


def test_unix_socket_is_other(tmp_path: Path) -> None:
    import socket

    root = Path(tempfile.mkdtemp(prefix="ws", dir="/tmp"))  # short path: sun_path is 108 bytes
    try:
        before = snapshot(root)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(root / "s"))
            fx = collect(before, root)
        assert fx.created[0].kind == "other"
        assert fx.created[0].note == "socket"
    finally:
        shutil.rmtree(root)


# ---------------------------------------------------------------------------------------------- budgets


def test_budgets(ws: Path) -> None:
    def change() -> None:
        for name in ("a", "b", "c"):
            (ws / f"{name}.bin").write_bytes(name.encode() * 100)
        (ws / "big.bin").write_bytes(b"x" * 1000)

    fx = run(ws, change, max_hash_bytes=250, max_file_hash=500)
    created = by_path(fx.created)
    assert created["a.bin"].sha256 == sha(b"a" * 100)
    assert created["b.bin"].sha256 == sha(b"b" * 100)
    assert created["big.bin"].note == NOTE_BUDGET  # over max_file_hash
    assert created["c.bin"].note == NOTE_BUDGET  # over what is left of max_hash_bytes
    assert created["c.bin"].size == 100
    assert fx.hashed_bytes == 200


def test_huge_file_is_not_read(ws: Path) -> None:
    def change() -> None:
        with open(ws / "huge.img", "wb") as f:
            f.truncate(300 << 20)  # sparse: 300 MiB, over the 256 MiB default

    fx = run(ws, change)
    assert fx.created[0].note == NOTE_BUDGET
    assert fx.created[0].size == 300 << 20
    assert fx.hashed_bytes == 0


# ---------------------------------------------------------------------------------------------- permissions


def _unreadable_scenario(root: Path) -> str:
    (root / "old").mkdir()
    (root / "old" / "a.txt").write_bytes(b"a")
    before = snapshot(root)
    (root / "private.txt").write_bytes(b"private")
    os.chmod(root / "private.txt", 0)
    (root / "locked").mkdir()
    (root / "locked" / "inner.txt").write_bytes(b"inner")
    os.chmod(root / "locked", 0)
    os.chmod(root / "old", 0o300)  # search but no read: not listable
    return collect(before, root).to_json().decode()


def test_unreadable_files_and_dirs_are_problems() -> None:
    """What cannot be looked into makes the record incomplete, naming each place."""
    fx = SideEffects.model_validate_json(as_nobody(_unreadable_scenario))
    created = by_path(fx.created)
    assert created["private.txt"].note == NOTE_PERMISSION
    assert created["private.txt"].sha256 is None
    assert created["locked"].kind == "dir"
    assert "locked/inner.txt" not in created
    modified = by_path(fx.modified)
    assert modified["old"].note == "mode changed"
    assert fx.deleted == ()  # old/a.txt is unknown, not deleted
    assert not fx.complete
    assert [(p.kind, p.path) for p in fx.problems] == [
        ("unreachable", "old"),
        ("unlisted", "locked"),
        ("unlisted", "old"),
    ]
    assert fx.problems[0].detail == (
        "could not be entered after the run (permission denied): changes below it are not known"
    )
    assert fx.problems_count == 3


# ---------------------------------------------------------------------------------------------- limits


@contextlib.contextmanager
def _fd_limit(headroom: int) -> Iterator[None]:
    """Allow only ``headroom`` descriptors beyond those already open (RLIMIT_NOFILE bounds descriptor
    numbers, so it is set just above the highest one in use: earlier tests may hold many)."""
    highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1 + headroom, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)


def _deep(root: Path, depth: int, name: str = "d") -> list[str]:
    """A chain of ``depth`` directories built with openat (paths may exceed PATH_MAX)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        leaf = os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"deep\n")
        os.close(leaf)
    finally:
        os.close(fd)
    return [name] * depth


def test_deep_tree_with_few_descriptors(ws: Path) -> None:
    depth = 400
    before = snapshot(ws)
    parts = _deep(ws, depth)
    # siblings at several depths force the walk back up through '..'
    with _fd_limit(24):
        fx = collect(before, ws)
    assert fx.created_count == depth + 1
    assert fx.complete
    assert (fx.hashed_files, fx.hashed_bytes) == (1, len(b"deep\n"))  # the leaf, 400 levels down
    # the listing is bounded: long paths keep head and tail, and it stops at its byte budget
    leaf = "/".join([*parts, "leaf.txt"])
    assert not fx.listing_complete
    shortened = fx.created[-1]
    assert leaf.startswith(shortened.path.split("…")[0]) and len(shortened.path) == 256
    assert shortened.note == "name shortened"


def test_deep_tree_revisits_parents(ws: Path) -> None:
    depth = 60
    _deep(ws, depth)
    # add a sibling file after each level's subdirectory, so every level is needed again after its child
    fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(os.open("z.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
        os.close(fd)
        fd = child
    os.close(fd)
    with _fd_limit(24):
        snap = snapshot(ws)
    assert snap.unlisted == {}
    names = [k for k in snap.entries if k.endswith("z.txt")]
    assert len(names) == depth  # one z.txt per level above the leaf, each visited after its sibling d/
    assert list(snap.entries) == sorted(snap.entries, key=lambda k: [os.fsencode(p) for p in k.split("/")])


def test_cursor_climbs_back_after_a_move(ws: Path) -> None:
    """'..' of a directory moved elsewhere leads to its new parent: noticed by (dev, inode), and the
    cursor walks down again by name from the nearest open level instead."""
    parts = tuple(_deep(ws, 20))
    root_fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    st = os.fstat(root_fd)
    cursor = Cursor(root_fd, (st.st_dev, st.st_ino))
    try:
        cursor.goto(parts)
        level12 = ws.joinpath(*parts[:12])
        (ws / "new").mkdir()
        level12.rename(ws / "moved")  # the current directory now lives under ws/moved
        fd = cursor.goto(parts[:10])
        assert os.fstat(fd).st_ino == os.stat(ws.joinpath(*parts[:10])).st_ino
        # the recorded level 11 was replaced by another directory: refused, not followed
        cursor.goto(parts[:11])
        cursor.goto(parts[:9])
        replaced = ws.joinpath(*parts[:11])
        replaced.rename(ws / "old11")
        (ws / "new").rename(replaced)
        with pytest.raises(Moved):
            cursor.goto(parts[:11], expected=(st.st_dev, os.stat(ws / "old11").st_ino))
    finally:
        cursor.close()
        os.close(root_fd)


def test_path_too_long_is_not_descended(ws: Path) -> None:
    name = "n" * 250
    depth = MAX_PATH_BYTES // 251 + 2
    _deep(ws, depth, name)
    snap = snapshot(ws)
    assert list(snap.unlisted.values()) == ["path too long"]
    assert all(len(os.fsencode(k)) <= MAX_PATH_BYTES + 251 for k in snap.entries)


def test_entry_limit_truncates_without_false_deletions(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(20):
        (root / f"f{i:02d}").write_bytes(b"x")
    before = snapshot(root, max_entries=10)
    assert before.truncated
    assert len(before) == 10
    assert before.last == (b"f09",)
    (root / "a0").write_bytes(b"early")  # sorts first: within what the snapshot saw, so created
    (root / "f05").write_bytes(b"changed")
    (root / "f15").write_bytes(b"changed")  # past the snapshot's last entry: unknown, never a false "created"
    (root / "zz").write_bytes(b"late")  # likewise
    fx = collect(before, root)
    assert paths(fx.created) == ["a0"]
    assert paths(fx.modified) == ["f05"]
    assert fx.deleted == ()
    assert not fx.complete
    assert [p.kind for p in fx.problems] == ["before_truncated"]
    assert fx.problems[0].detail.startswith("the workspace held more than 10 entries before the run")


def test_entry_limit_zero(ws: Path) -> None:
    snap = snapshot(ws, max_entries=0)
    assert snap.truncated
    assert len(snap) == 0
    (ws / "new").write_bytes(b"")
    fx = collect(snap, ws)
    assert not fx.complete
    assert fx.created_count == fx.deleted_count == fx.modified_count == 0


def test_big_directory_keeps_the_walk_prefix(ws: Path) -> None:
    (ws / "many").mkdir()
    for i in reversed(range(10)):
        (ws / "many" / str(i)).write_bytes(b"")
    snap = snapshot(ws, max_entries=7)
    assert list(snap.entries) == ["edit.txt", "gone.txt", "keep.txt", "many", "many/0", "many/1", "many/2"]
    assert snap.truncated
    assert snap.last == (b"many", b"2")
    # the budget ends exactly with a directory whose names were not listed: still truncated
    snap = snapshot(ws, max_entries=4)
    assert list(snap.entries)[-1] == "many"
    assert snap.truncated


# ---------------------------------------------------------------------------------------------- names, JSON


def test_odd_names_are_unambiguous(ws: Path) -> None:
    raw = os.fsencode(ws)

    def change() -> None:
        with open(raw + b"/bad\xffname", "wb") as f:
            f.write(b"1")
        (ws / "bad\\xffname").write_bytes(b"2")  # the escape spelled out: must not collide
        (ws / "new\nline").write_bytes(b"3")
        (ws / "caf\u00e9").write_bytes(b"4")
        os.symlink(b"/tmp/\xfe", raw + b"/badlink")

    fx = run(ws, change)
    listed = paths(fx.created)
    assert "bad\\xffname" in listed
    assert "bad\\\\xffname" in listed
    assert "new\nline" in listed
    assert "caf\u00e9" in listed
    assert by_path(fx.created)["badlink"].link_target == "/tmp/\\xfe"
    assert len(set(listed)) == len(listed)
    json.loads(fx.to_json())  # valid UTF-8 JSON


def test_json_digest_and_round_trip(ws: Path) -> None:
    def change() -> None:
        (ws / "edit.txt").write_bytes(b"new\n")
        os.symlink("x", ws / "l")
        (ws / "gone.txt").unlink()

    fx = run(ws, change)
    # the digest as documented: per kind, sha256 of the canonical JSON lines of every change, in walk order
    lines = {
        group: hashlib.sha256(
            b"".join(canonical_json(c.model_dump(mode="json", exclude_none=True)) + b"\n" for c in changes)
        ).hexdigest()
        for group, changes in (("created", fx.created), ("deleted", fx.deleted), ("modified", fx.modified))
    }
    assert fx.digest == sha256_hex(canonical_json(lines))
    again = SideEffects.model_validate_json(fx.to_json())
    assert again == fx
    document = json.loads(fx.to_json())
    assert "sha256" not in document["created"][0]  # fields that do not apply are left out
    assert fx.summary() == {
        "complete": True,
        "created": 1,
        "modified": 1,
        "deleted": 1,
        "bytes_written": 0,  # edit.txt kept its size
        "setid_removed": 0,
    }
    assert fx.incompleteness() is None


def test_counts_must_match() -> None:
    change = FileChange(path="a", kind="file", size=1, mode=0o644)
    with pytest.raises(ValidationError, match="more changes listed than counted"):
        SideEffects(created=(change,), created_count=0)
    SideEffects(created=(change,), created_count=5, listing_complete=False)  # listed fewer than found: fine
    with pytest.raises(ValidationError, match="complete must be true exactly when"):
        SideEffects(complete=False)
    with pytest.raises(ValidationError, match="complete must be true exactly when"):
        SideEffects(problems_count=1)
    with pytest.raises(ValidationError, match="set-id"):
        SideEffects(setid_removed=("a",))
    with pytest.raises(ValidationError):
        FileChange(path="a", kind="file", mode=0o644, sha256="nothex")
    with pytest.raises(ValidationError):
        FileChange(path="a", kind="fifo", mode=0o644)


def test_models_are_frozen(ws: Path) -> None:
    fx = run(ws, lambda: (ws / "n").write_bytes(b""))
    with pytest.raises(ValidationError):
        fx.complete = False  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------- root errors


def test_root_must_be_a_directory(tmp_path: Path) -> None:
    with pytest.raises(InputInvalid) as info:
        snapshot(tmp_path / "missing")
    assert info.value.details["field"] == "root"
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(InputInvalid):
        snapshot(tmp_path / "file")


def test_root_replaced_between_snapshots(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    before = snapshot(root)
    (tmp_path / "other").mkdir()
    root.rmdir()
    (tmp_path / "other").rename(root)
    with pytest.raises(InputInvalid, match="not the directory"):
        collect(before, root)


def test_negative_limits_rejected(ws: Path) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        snapshot(ws, max_entries=-1)
    with pytest.raises(ValueError, match="limits"):
        CollectLimits(max_hash_bytes=-1)
    with pytest.raises(ValueError, match="listing_bytes"):
        CollectLimits(listing_bytes=1 << 30)


def test_no_descriptor_leak(ws: Path) -> None:
    _deep(ws, 30)
    count = len(os.listdir("/proc/self/fd"))
    before = snapshot(ws)
    (ws / "x").write_bytes(b"x")
    collect(before, ws)
    assert len(os.listdir("/proc/self/fd")) == count


def test_mode_bits_reported(ws: Path) -> None:
    def change() -> None:
        (ws / "tool").write_bytes(b"#!/bin/sh\n")
        os.chmod(ws / "tool", 0o4755)

    fx = run(ws, change)
    assert fx.created[0].mode == 0o4755  # as the run left it
    assert stat.S_ISUID & fx.created[0].mode
    assert fx.created[0].note == "set-uid/set-gid bits removed"
    assert stat.S_IMODE(os.lstat(ws / "tool").st_mode) == 0o755  # as it stays on the host
