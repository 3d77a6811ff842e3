"""The workspace as hostile input to the host, one class per section, on real directories:

* changes to what existed are never hidden by what the run created (floods, long names that sort first);
* the scan's cost is bounded (names read, memory) and what it did not examine makes the record incomplete;
* the record is bounded in advance, whatever names the run chose;
* names and link targets are redacted like output;
* set-uid/set-gid bits the run left are removed, without following links.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.domain.canonical import canonical_json
from orchestrator.evidence import MAX_RECORD_BYTES, EvidenceEvent
from orchestrator.pipeline.end_record import side_effects_json
from orchestrator.results import CollectLimits, Redactor, SideEffects, collect, snapshot
from orchestrator.results.fstree import MAX_PATH_BYTES, entry_at, strip_setid
from orchestrator.results.record import (
    LISTING_MAX_BYTES,
    MAX_NAME_CHARS,
    MAX_PROBLEMS_LISTED,
    MAX_SETID_LISTED,
    SIDE_EFFECTS_MAX_BYTES,
    Names,
    RecordBuilder,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def run(root: Path, change: Callable[[], object], *, redactor: Redactor | None = None, **limits: int) -> SideEffects:
    before = snapshot(root)
    change()
    return collect(before, root, redactor=redactor, limits=CollectLimits(**limits))


def paths(changes: tuple[object, ...]) -> list[str]:
    return [c.path for c in changes]  # type: ignore[attr-defined]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "src").mkdir()
    (root / "src" / "victim.py").write_bytes(b"print('before')\n")
    (root / "zz-last.txt").write_bytes(b"last\n")
    return root


def _flood(directory: Path, count: int, length: int = 200) -> None:
    """Files whose long names sort before every other name."""
    for i in range(count):
        fd = os.open(directory / f"!{'!' * length}{i:06d}", os.O_WRONLY | os.O_CREAT, 0o644)
        os.close(fd)


# ---------------------------------------------------------------------------------------------- hidden changes


def test_a_flood_past_the_scan_budget_never_hides_a_change_to_an_existing_file(ws: Path) -> None:
    """The run floods the directory of an existing file with names that sort first, past the scan's
    budget, then edits that file and deletes another: both are recorded; the flood makes it incomplete."""

    def change() -> None:
        _flood(ws / "src", 3000)
        (ws / "src" / "victim.py").write_bytes(b"import os; os.system('evil')\n")
        (ws / "zz-last.txt").unlink()

    fx = run(ws, change, max_new_entries=500)
    assert paths(fx.modified) == ["src/victim.py"]
    assert fx.modified[0].sha256 == sha(b"import os; os.system('evil')\n")
    assert paths(fx.deleted) == ["zz-last.txt"]
    assert (fx.modified_count, fx.deleted_count) == (1, 1)
    # what was not examined is said, as a failure: never a silent flag
    assert not fx.complete
    assert [p.kind for p in fx.problems] == ["scan_budget"]
    assert fx.problems[0].path == "src"
    assert fx.problems[0].detail == (
        "the scan read its budget of 503 names: 1 directories were not (fully) listed, what they hold is not known"
    )  # 3 entries existed, plus 500
    assert "scan_budget" in (fx.incompleteness() or "")
    assert fx.created_count <= 503
    assert fx.entries_examined <= 3 + 503


def test_within_the_budget_every_change_is_counted_and_existing_ones_are_listed_first(ws: Path) -> None:
    def change() -> None:
        _flood(ws / "src", 3000)
        (ws / "src" / "victim.py").write_bytes(b"changed\n")
        (ws / "zz-last.txt").unlink()

    fx = run(ws, change)
    assert fx.complete
    assert (fx.created_count, fx.modified_count, fx.deleted_count) == (3000, 1, 1)
    # the listing is bounded (3000 long names do not fit): what existed comes first, created ones after
    assert paths(fx.modified) == ["src/victim.py"] and paths(fx.deleted) == ["zz-last.txt"]
    assert not fx.listing_complete
    assert 0 < len(fx.created) < 3000
    assert len(canonical_json([c.model_dump(mode="json", exclude_none=True) for c in fx.created])) <= LISTING_MAX_BYTES


def test_the_digest_covers_every_change_whatever_is_listed(ws: Path) -> None:
    before = snapshot(ws)
    _flood(ws / "src", 100)
    (ws / "src" / "victim.py").write_bytes(b"changed\n")
    wide = collect(before, ws)
    narrow = collect(before, ws, limits=CollectLimits(listing_bytes=1024))
    assert wide.listing_complete and len(wide.created) == 100
    assert not narrow.listing_complete and len(narrow.created) < len(wide.created)
    assert narrow.digest == wide.digest
    (ws / "src" / f"!{'!' * 200}{7:06d}").write_bytes(b"x")  # one created file differs: so does the digest
    assert collect(before, ws).digest != wide.digest


def test_after_the_first_change_that_does_not_fit_nothing_more_is_listed() -> None:
    from orchestrator.results.fstree import Entry

    record = RecordBuilder(Names(None), listing_bytes=200)
    small = Entry("file", 1, 0o100644, 0, 0, 1, 1, None)
    record.add("modified", "a", small)
    record.add("modified", "b" * 200, small)  # does not fit
    record.add("deleted", "c", small)  # would fit, but the listing is closed: a prefix in scan order
    fx = record.build(bytes_written=0, hashed_bytes=0, hashed_files=0, entries_examined=3)
    assert paths(fx.modified) == ["a"] and fx.deleted == ()
    assert (fx.modified_count, fx.deleted_count, fx.listing_complete) == (2, 1, False)


# ---------------------------------------------------------------------------------------------- scan cost


def test_names_read_are_bounded_by_the_budget(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    before = snapshot(root)
    for d in range(3):
        (root / f"d{d}").mkdir()
        _flood(root / f"d{d}", 1000, length=10)
    fx = collect(before, root, limits=CollectLimits(max_new_entries=500))
    assert fx.entries_examined == 500
    assert fx.created_count <= 500
    assert [p.kind for p in fx.problems] == ["scan_budget"]
    assert "directories were not (fully) listed" in fx.problems[0].detail


def _peak_memory(root: Path, directories: int) -> tuple[SideEffects, int]:
    before = snapshot(root)
    for d in range(directories):
        (root / f"d{d:02d}").mkdir()
        _flood(root / f"d{d:02d}", 2000, length=20)
    tracemalloc.start()
    try:
        fx = collect(before, root, redactor=Redactor(literals=["a-secret-value"]))
        return fx, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_does_not_grow_with_the_number_of_created_files(tmp_path: Path) -> None:
    """The listing is bounded and the walk streams: three times the files, about the same memory (the
    earlier two-snapshot diff held an object per file: about 2 KB each)."""
    (tmp_path / "small").mkdir()
    (tmp_path / "large").mkdir()
    small, small_peak = _peak_memory(tmp_path / "small", 1)
    large, large_peak = _peak_memory(tmp_path / "large", 3)
    assert (small.created_count, large.created_count) == (2001, 6003)
    assert small.complete and large.complete
    assert large_peak < small_peak + 1024 * 1024, (small_peak, large_peak)
    assert large_peak < 6 * 1024 * 1024


# ---------------------------------------------------------------------------------------------- record bound

WORST_NAME = "\x01" * 255  # a control character: 6 bytes of JSON each (\u0001)


def test_the_record_is_bounded_in_advance_whatever_the_names(tmp_path: Path) -> None:
    """Long names of characters that JSON escapes to 6 bytes, long link targets of them, undecodable
    bytes, many set-id files: the record stays within its bound, and an end record holding it fits the
    evidence record limit."""
    root = tmp_path / "ws"
    root.mkdir()
    raw = os.fsencode(root)
    before = snapshot(root)
    deep = root
    for level in range(3):  # paths longer than the name cap
        deep = deep / (WORST_NAME[:200] + str(level))
        deep.mkdir()
    for i in range(300):
        (deep / f"{WORST_NAME[:250]}{i:03d}").write_bytes(b"x")
        os.symlink(b"\x01" * 4000, raw + b"/" + b"\xff" * 250 + f"{i:03d}".encode()[:5])
    for i in range(40):
        target = deep / f"{WORST_NAME[:250]}s{i:02d}"
        target.write_bytes(b"#!/bin/sh\n")
        os.chmod(target, 0o6755)
    fx = collect(before, root)
    encoded = fx.to_json()
    assert len(encoded) <= SIDE_EFFECTS_MAX_BYTES
    assert fx.created_count == 3 + 300 + 300 + 40
    assert fx.setid_removed_count == 40 and len(fx.setid_removed) == MAX_SETID_LISTED
    assert all(len(c.path) <= MAX_NAME_CHARS for c in (*fx.created, *fx.modified, *fx.deleted))
    assert all(c.link_target is None or len(c.link_target) <= MAX_NAME_CHARS for c in fx.created)
    # the end record that carries it is written, never refused for its size (INPUT.INVALID)
    record = EvidenceEvent(
        event="execution_finished",
        execution_id="ex-bound",
        status="succeeded",
        reason="r" * 16 * 1024,
        data={"side_effects": side_effects_json(fx), "engine_error": "e" * 4096},
    )
    assert len(canonical_json(record.model_dump(mode="json", exclude_none=True))) < MAX_RECORD_BYTES


def test_the_bound_holds_with_every_list_at_its_cap() -> None:
    from orchestrator.results.fstree import Entry

    record = RecordBuilder(Names(None))
    worst = Entry("symlink", 4095, 0o120777, 0, 0, 1, 1, "\x01" * 4095)
    for i in range(2000):
        record.add("created", f"{WORST_NAME}/{i}", worst, notes=["not hashed: permission denied"])
    for i in range(100):
        record.problem("unlisted", f"{WORST_NAME}/{i}", "x" * 1000)
        record.setid_removed(f"{WORST_NAME}/{i}")
    fx = record.build(bytes_written=2**62, hashed_bytes=2**62, hashed_files=2**62, entries_examined=2**62)
    assert len(fx.problems) == MAX_PROBLEMS_LISTED and fx.problems_count == 100
    assert len(fx.to_json()) <= SIDE_EFFECTS_MAX_BYTES


# ---------------------------------------------------------------------------------------------- secrets in names

SECRET = "s3cr3t-Token-9f8e7d6c5b4a"


def test_a_secret_in_a_name_or_link_target_never_reaches_the_record(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / f"old-{SECRET}.txt").write_bytes(b"x")
    redactor = Redactor(literals=[SECRET])

    def change() -> None:
        (root / f"{SECRET}.txt").write_bytes(b"")
        (root / f"dir-{SECRET}").mkdir()
        (root / f"dir-{SECRET}" / "inside").write_bytes(b"")
        os.symlink(f"/home/user/{SECRET}", root / "link")
        (root / f"tool-{SECRET}").write_bytes(b"")
        os.chmod(root / f"tool-{SECRET}", 0o4755)
        (root / f"old-{SECRET}.txt").unlink()

    fx = run(root, change, redactor=redactor)
    text = fx.to_json().decode()
    assert SECRET not in text
    assert sorted(paths(fx.created)) == sorted(
        [
            "[REDACTED:literal].txt",
            "dir-[REDACTED:literal]",
            "dir-[REDACTED:literal]/inside",
            "link",
            "tool-[REDACTED:literal]",
        ]
    )
    assert {c.path: c.link_target for c in fx.created}["link"] == "/home/user/[REDACTED:literal]"
    assert paths(fx.deleted) == ["old-[REDACTED:literal].txt"]
    assert fx.setid_removed == ("tool-[REDACTED:literal]",)


def test_the_digest_does_not_depend_on_a_redacted_secret(tmp_path: Path) -> None:
    digests = []
    for secret in (SECRET, "an0ther-Secret-Value-123"):
        root = tmp_path / secret
        root.mkdir()
        before = snapshot(root)
        (root / f"{secret}.txt").write_bytes(b"same")
        digests.append(collect(before, root, redactor=Redactor(literals=[secret])).digest)
    assert digests[0] == digests[1]


def test_a_secret_in_a_problem_path_is_redacted(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    before = snapshot(root)
    name = f"{SECRET}-{'n' * 200}"
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(MAX_PATH_BYTES // len(name) + 2):
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    fx = collect(before, root, redactor=Redactor(literals=[SECRET]))
    assert [p.kind for p in fx.problems] == ["path_too_long"]
    assert SECRET not in fx.to_json().decode()
    assert "[REDACTED:literal]" in (fx.problems[0].path or "")


# ---------------------------------------------------------------------------------------------- set-id bits


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_setid_bits_the_run_left_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "own-setuid").write_bytes(b"the user's own\n")
    os.chmod(root / "own-setuid", 0o4755)
    (root / "plain").write_bytes(b"plain\n")
    (root / "replaced").write_bytes(b"old\n")

    def change() -> None:
        for name, bits in (("suid", 0o4755), ("sgid", 0o2755), ("both", 0o6711)):
            (root / name).write_bytes(b"#!/bin/sh\n")
            os.chmod(root / name, bits)
        os.chmod(root / "plain", 0o4755)  # an existing file given the bit
        (root / "replaced").unlink()  # an existing path, a new file
        (root / "replaced").write_bytes(b"new\n")
        os.chmod(root / "replaced", 0o2755)
        with open(root / "own-setuid", "ab") as f:  # the user's own set-uid file, rewritten in place
            f.write(b"more\n")
        (root / "sticky-dir").mkdir()
        os.chmod(root / "sticky-dir", 0o3777)  # directories keep theirs: no privilege in them

    fx = run(root, change)
    assert (mode(root / "suid"), mode(root / "sgid"), mode(root / "both")) == (0o755, 0o755, 0o711)
    assert (mode(root / "plain"), mode(root / "replaced")) == (0o755, 0o755)
    assert mode(root / "own-setuid") == 0o4755
    assert mode(root / "sticky-dir") == 0o3777
    assert fx.setid_removed == ("plain", "replaced", "both", "sgid", "suid")  # what existed first, then walk order
    assert fx.setid_removed_count == 5
    notes = {c.path: (c.mode, c.note) for c in (*fx.created, *fx.modified)}
    assert notes["suid"] == (0o4755, "set-uid/set-gid bits removed")  # the mode as the run left it
    assert notes["plain"] == (0o4755, "set-uid/set-gid bits removed")
    assert notes["own-setuid"] == (0o4755, None)
    assert fx.complete


def test_setid_removal_never_follows_a_link(tmp_path: Path) -> None:
    outside = tmp_path / "outside-tool"
    outside.write_bytes(b"host\n")
    os.chmod(outside, 0o4755)
    root = tmp_path / "ws"
    root.mkdir()
    fx = run(root, lambda: os.symlink(outside, root / "link-to-setuid"))
    assert mode(outside) == 0o4755
    assert fx.setid_removed_count == 0

    # a file recorded as set-uid, then swapped for a symlink to a host set-uid file before the removal
    (root / "tool").write_bytes(b"x")
    os.chmod(root / "tool", 0o4755)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        entry = entry_at(root_fd, "tool")
        (root / "tool").unlink()
        os.symlink(outside, root / "tool")
        assert strip_setid(root_fd, "tool", entry) == "replaced while checked"
        assert mode(outside) == 0o4755
        # another file in its place: refused too (same name, another inode; the old one kept alive by a
        # link, else the filesystem may give its number to the new file)
        os.link(root / "tool", root / "keep-inode", follow_symlinks=False)
        (root / "tool").unlink()
        (root / "tool").write_bytes(b"y")
        os.chmod(root / "tool", 0o4755)
        assert strip_setid(root_fd, "tool", entry) == "replaced while checked"
        assert mode(root / "tool") == 0o4755
        assert strip_setid(root_fd, "tool", entry_at(root_fd, "tool")) is None
        assert mode(root / "tool") == 0o755
    finally:
        os.close(root_fd)


def test_setid_bits_below_paths_too_long_to_list_are_still_removed(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    before = snapshot(root)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(30):  # 30 x 250 bytes: far past PATH_MAX, built with openat
        os.mkdir("n" * 249, dir_fd=fd)
        child = os.open("n" * 249, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    hidden = os.open("hidden-tool", os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=fd)
    os.fchmod(hidden, 0o4755)
    os.close(hidden)
    fx = collect(before, root)
    assert stat.S_IMODE(os.stat("hidden-tool", dir_fd=fd, follow_symlinks=False).st_mode) == 0o755
    os.close(fd)
    assert fx.setid_removed_count == 1 and fx.setid_removed == ("…/hidden-tool",)
    assert [p.kind for p in fx.problems] == ["path_too_long"]
    assert not fx.complete
    # what lies within PATH_MAX is listed, the directory that passes it too (not what it holds)
    assert fx.created_count == MAX_PATH_BYTES // 250 + 1


def test_setid_bits_where_the_snapshot_did_not_look_are_removed(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(10):
        (root / f"f{i}").write_bytes(b"")
    before = snapshot(root, max_entries=3)
    (root / "zz-tool").write_bytes(b"")
    os.chmod(root / "zz-tool", 0o4755)
    fx = collect(before, root)
    assert mode(root / "zz-tool") == 0o755
    assert fx.setid_removed == ("zz-tool",)
    assert fx.created_count == 0  # unknown there: it might have existed
    assert [p.kind for p in fx.problems] == ["before_truncated"]
