"""Workspace snapshots and side effects, on real directories: symlinks are recorded, never followed."""

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

from orchestrator.domain.canonical import sha256_hex
from orchestrator.domain.errors import InputInvalid
from orchestrator.results import FileChange, SideEffects, Snapshot, diff, snapshot
from orchestrator.results.workspace import (
    MAX_PATH_BYTES,
    NOTE_BUDGET,
    NOTE_NOT_REGULAR,
    NOTE_PATH_CHANGED,
    NOTE_PERMISSION,
    NOTE_SYMLINK,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(root: Path, change: Callable[[], object], **kwargs: int) -> SideEffects:
    before = snapshot(root)
    change()
    after = snapshot(root)
    return diff(before, after, root, **kwargs)


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
    assert not fx.truncated


def test_nothing_changed(ws: Path) -> None:
    fx = run(ws, lambda: None)
    assert fx == SideEffects()
    assert fx.to_json() == b'{"created":[],"created_count":0,"deleted":[],"deleted_count":0,"hashed_bytes":0,' + (
        b'"modified":[],"modified_count":0,"truncated":false}'
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

    assert run(ws, change) == SideEffects()


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


def test_dir_swapped_for_symlink_after_the_snapshot(ws: Path, outside: Path) -> None:
    """The sandbox (or a leftover process) races the collector: the directory holding a new file becomes a
    symlink to a host directory holding a file of the same name. The host must not hash that file."""
    before = snapshot(ws)
    (ws / "src" / "secret.txt").write_bytes(b"workspace file\n")
    after = snapshot(ws)
    shutil.rmtree(ws / "src")
    os.symlink(outside, ws / "src")
    fx = diff(before, after, ws)
    assert paths(fx.created) == ["src/secret.txt"]
    assert fx.created[0].sha256 is None
    assert fx.created[0].note == NOTE_PATH_CHANGED
    assert_never_read(fx)


def test_file_swapped_for_symlink_after_the_snapshot(ws: Path) -> None:
    passwd = Path("/etc/passwd").read_bytes()
    before = snapshot(ws)
    (ws / "report.txt").write_bytes(b"report\n")
    (ws / "edit.txt").write_bytes(b"edited\n")
    after = snapshot(ws)
    for name in ("report.txt", "edit.txt"):
        (ws / name).unlink()
        os.symlink("/etc/passwd", ws / name)
    fx = diff(before, after, ws)
    assert [(c.path, c.kind, c.sha256, c.note) for c in (*fx.created, *fx.modified)] == [
        ("report.txt", "file", None, NOTE_SYMLINK),
        ("edit.txt", "file", None, NOTE_SYMLINK),
    ]
    assert fx.hashed_bytes == 0
    assert_never_read(fx, sha(passwd))


def test_file_replaced_by_another_file_after_the_snapshot(ws: Path) -> None:
    before = snapshot(ws)
    (ws / "a.txt").write_bytes(b"first\n")
    after = snapshot(ws)
    (ws / "b.txt").write_bytes(b"second\n")
    os.replace(ws / "b.txt", ws / "a.txt")
    fx = diff(before, after, ws)
    assert fx.created[0].sha256 is None
    assert fx.created[0].note == "not hashed: replaced after snapshot"


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


def test_fifo_swapped_in_after_the_snapshot_does_not_block(ws: Path) -> None:
    before = snapshot(ws)
    (ws / "out.log").write_bytes(b"log\n")
    after = snapshot(ws)
    (ws / "out.log").unlink()
    os.mkfifo(ws / "out.log")
    fx = _in_thread(lambda: diff(before, after, ws))
    assert fx.created[0].note in (NOTE_NOT_REGULAR, "not hashed: replaced after snapshot")
    assert fx.created[0].sha256 is None


def test_unix_socket_is_other(tmp_path: Path) -> None:
    import socket

    root = Path(tempfile.mkdtemp(prefix="ws", dir="/tmp"))  # short path: sun_path is 108 bytes
    try:
        before = snapshot(root)
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(root / "s"))
            fx = diff(before, snapshot(root), root)
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


_PERMISSION_SCRIPT_UID = 65534


def _as_unprivileged(work: Callable[[Path], str]) -> str:
    """Run ``work`` where permission bits apply: in a forked child as nobody when the tests run as root."""
    base = Path(tempfile.mkdtemp(prefix="results-perm-", dir="/tmp"))
    os.chmod(base, 0o777)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(read_fd)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(_PERMISSION_SCRIPT_UID)
                os.setuid(_PERMISSION_SCRIPT_UID)
            root = base / "ws"
            root.mkdir()
            os.write(write_fd, work(root).encode())
            code = 0
        except BaseException as e:
            with contextlib.suppress(Exception):
                os.write(write_fd, f"ERROR {e!r}".encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    for dirpath, dirnames, _ in os.walk(base):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o700)
    shutil.rmtree(base)
    output = b"".join(chunks).decode()
    assert os.waitstatus_to_exitcode(status) == 0, output
    return output


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
    after = snapshot(root)
    return diff(before, after, root).to_json().decode()


def test_unreadable_files_and_dirs_are_noted() -> None:
    fx = SideEffects.model_validate_json(_as_unprivileged(_unreadable_scenario))
    created = by_path(fx.created)
    assert created["private.txt"].note == NOTE_PERMISSION
    assert created["private.txt"].sha256 is None
    assert created["locked"].note == "contents not listed: permission denied"
    assert "locked/inner.txt" not in created
    modified = by_path(fx.modified)
    assert modified["old"].note == "mode changed; contents not listed: permission denied"
    assert fx.deleted == ()  # old/a.txt is unknown, not deleted
    assert fx.truncated


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
        after = snapshot(ws)
        fx = diff(before, after, ws)
    leaf = "/".join([*parts, "leaf.txt"])
    assert fx.created_count == depth + 1
    assert fx.created[-1].path == leaf
    assert fx.created[-1].sha256 == sha(b"deep\n")
    assert not fx.truncated


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
    from orchestrator.results.workspace import _Cursor, _Moved

    parts = tuple(_deep(ws, 20))
    root_fd = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    st = os.fstat(root_fd)
    cursor = _Cursor(root_fd, (st.st_dev, st.st_ino))
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
        with pytest.raises(_Moved):
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
    (root / "a0").write_bytes(b"early")  # sorts first: pushes f09 out of the after snapshot
    (root / "f05").write_bytes(b"changed")
    (root / "zz").write_bytes(b"late")  # past the horizon: not seen
    after = snapshot(root, max_entries=10)
    fx = diff(before, after, root)
    assert paths(fx.created) == ["a0"]
    assert paths(fx.modified) == ["f05"]
    assert fx.deleted == ()
    assert fx.truncated


def test_entry_limit_zero(ws: Path) -> None:
    snap = snapshot(ws, max_entries=0)
    assert snap.truncated
    assert len(snap) == 0
    fx = diff(snap, snapshot(ws, max_entries=0), ws)
    assert fx.truncated
    assert fx.created_count == fx.deleted_count == 0


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

    fx = run(ws, change)
    assert fx.digest() == sha256_hex(fx.to_json())
    again = SideEffects.model_validate_json(fx.to_json())
    assert again == fx
    assert again.digest() == fx.digest()
    document = json.loads(fx.to_json())
    assert "sha256" not in document["created"][0]  # fields that do not apply are left out
    assert fx.summary(max_paths=1) == {
        "created": 1,
        "modified": 1,
        "deleted": 0,
        "hashed_bytes": 4,
        "truncated": False,
        "digest": fx.digest(),
        "created_paths": ["l"],
        "modified_paths": ["edit.txt"],
        "deleted_paths": [],
    }


def test_counts_must_match() -> None:
    change = FileChange(path="a", kind="file", size=1, mode=0o644)
    with pytest.raises(ValidationError, match="counts"):
        SideEffects(created=(change,), created_count=0)
    with pytest.raises(ValidationError):
        FileChange(path="a", kind="file", mode=0o644, sha256="nothex")
    with pytest.raises(ValidationError):
        FileChange(path="a", kind="fifo", mode=0o644)


def test_models_are_frozen(ws: Path) -> None:
    fx = run(ws, lambda: (ws / "n").write_bytes(b""))
    with pytest.raises(ValidationError):
        fx.truncated = True  # type: ignore[misc]


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
        diff(before, snapshot(root), root)


def test_negative_limits_rejected(ws: Path) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        snapshot(ws, max_entries=-1)
    snap = snapshot(ws)
    with pytest.raises(ValueError, match="budgets"):
        diff(snap, snap, ws, max_hash_bytes=-1)


def test_no_descriptor_leak(ws: Path) -> None:
    _deep(ws, 30)
    count = len(os.listdir("/proc/self/fd"))
    before = snapshot(ws)
    (ws / "x").write_bytes(b"x")
    diff(before, snapshot(ws), ws)
    assert len(os.listdir("/proc/self/fd")) == count


def test_mode_bits_reported(ws: Path) -> None:
    def change() -> None:
        (ws / "tool").write_bytes(b"#!/bin/sh\n")
        os.chmod(ws / "tool", 0o4755)

    fx = run(ws, change)
    assert fx.created[0].mode == 0o4755
    assert stat.S_ISUID & fx.created[0].mode
