"""Copy mode's archives: what goes into a pod, and applying what comes back (hostile input)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from orchestrator.backends.kubernetes.workspace_copy import BoundedSpool, CopyError, apply, pack


def tree(root: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_fifo():
                found[rel] = "fifo"  # never opened: it would block
            elif path.is_dir():
                found[rel] = "dir"
            else:
                found[rel] = path.read_bytes()
    return found


def archive(*members: tuple[tarfile.TarInfo, bytes | None]) -> io.BytesIO:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member, content in members:
            tar.addfile(member, io.BytesIO(content) if content is not None else None)
    data.seek(0)
    return data


def member(
    name: str, kind: bytes = tarfile.REGTYPE, content: bytes = b"", **fields: object
) -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = 0o644 if kind == tarfile.REGTYPE else 0o755
    info.size = len(content) if kind == tarfile.REGTYPE else 0
    for key, value in fields.items():
        setattr(info, key, value)
    return info, content if kind == tarfile.REGTYPE else None


def test_a_round_trip_changes_only_what_changed(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "src").mkdir(parents=True)
    (host / "src" / "keep.txt").write_text("same")
    (host / "src" / "edit.txt").write_text("before")
    (host / "gone.txt").write_text("bye")
    (host / "link").symlink_to("/etc/passwd")
    os.mkfifo(host / "fifo")
    with pack(host, 1 << 20) as packed:
        pod = tmp_path / "pod"
        pod.mkdir()
        with tarfile.open(fileobj=packed, mode="r") as tar:
            tar.extractall(pod, filter="tar")
    assert (pod / "fifo").is_fifo(), "a fifo goes as a fifo (never read)"
    assert os.readlink(pod / "link") == "/etc/passwd", "a link goes as a link, never its target"
    keep_before = os.stat(host / "src" / "keep.txt")
    (pod / "src" / "edit.txt").write_text("after")
    (pod / "gone.txt").unlink()
    (pod / "new").mkdir()
    (pod / "new" / "made.txt").write_text("made")
    os.unlink(pod / "link")
    (pod / "link").symlink_to("elsewhere")
    with pack(pod, 1 << 20) as back:
        applied = apply(back, host)
    os.unlink(pod / "fifo")
    os.mkfifo(pod / "fifo2")
    (pod / "locked").mkdir(mode=0o700)
    (pod / "locked" / "inside.txt").write_text("x")
    (pod / "locked").chmod(0o000)
    with pack(pod, 1 << 20) as back:
        apply(back, host)
    (pod / "locked").chmod(0o700)
    assert (host / "fifo2").is_fifo() and not (host / "fifo").exists()
    assert os.stat(host / "locked").st_mode & 0o777 == 0
    (host / "locked").chmod(0o700)
    assert tree(host) == tree(pod)
    keep_after = os.stat(host / "src" / "keep.txt")
    assert (keep_after.st_ino, keep_after.st_ctime_ns) == (keep_before.st_ino, keep_before.st_ctime_ns)
    assert (host / "src" / "edit.txt").read_text() == "after" and not (host / "gone.txt").exists()
    assert os.readlink(host / "link") == "elsewhere"
    assert applied.removed >= 1 and applied.created >= 2 and applied.replaced == 1


def test_the_workspace_larger_than_the_limit_is_refused(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 100_000)
    with pytest.raises(CopyError, match="copy limit"):
        pack(tmp_path, 50_000)
    spool = BoundedSpool(10)
    with pytest.raises(CopyError, match="copy limit"):
        spool.feed(b"x" * 11)
    spool.close()


@pytest.mark.parametrize(
    "members",
    [
        [member("/etc/evil")],
        [member("../evil")],
        [member("a/../../evil")],
        [member("dev", kind=tarfile.CHRTYPE)],
        [member("blk", kind=tarfile.BLKTYPE)],
        # a link, then a write through it: refused, never followed
        [member("out", kind=tarfile.SYMTYPE, linkname="/tmp"), member("out/evil", content=b"x")],
        [member("hard", kind=tarfile.LNKTYPE, linkname="/etc/passwd")],
        [member("x", content=b"1"), member("x", content=b"2")],
    ],
)
def test_hostile_archives_are_refused_and_nothing_escapes(
    tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    outside = tmp_path / "outside-marker"
    with pytest.raises(CopyError):
        apply(archive(*members), host)
    assert not outside.exists() and not Path("/tmp/evil").exists()


def test_a_broken_stream_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CopyError, match="not a valid tar stream"):
        apply(io.BytesIO(b"\x00garbage" * 100), tmp_path)
