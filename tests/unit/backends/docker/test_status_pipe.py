"""The Docker status pipe's host side (backends/docker/status_pipe.py): made before the container, sealed only
when the init holds that very pipe as its descriptor 3, read to its end, and never left behind."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from orchestrator.backends.docker.status_pipe import MOUNT_DIR, PIPE_NAME, StatusPipe, sweep


def test_the_pipe_is_the_sandboxs_to_write_never_to_list_or_add_to(tmp_path: Path) -> None:
    pipe = StatusPipe.make(tmp_path / "pipes", "sbx-ex-1")
    try:
        assert oct((tmp_path / "pipes" / "sbx-ex-1").stat().st_mode & 0o777) == oct(0o711)
        assert oct((tmp_path / "pipes" / "sbx-ex-1" / PIPE_NAME).stat().st_mode & 0o777) == oct(0o622)
        assert pipe.mount()["Target"] == MOUNT_DIR and pipe.mount()["ReadOnly"] is True
        assert pipe.container_path == f"{MOUNT_DIR}/{PIPE_NAME}"
    finally:
        pipe.close()
    assert not (tmp_path / "pipes" / "sbx-ex-1").exists()


def test_it_is_sealed_only_when_the_process_holds_that_very_pipe_as_descriptor_3(tmp_path: Path) -> None:
    pipe = StatusPipe.make(tmp_path, "sbx-ex-2")
    path = tmp_path / "sbx-ex-2" / PIPE_NAME
    other = tmp_path / "other"
    os.mkfifo(other)
    holders = []
    try:
        # a process whose descriptor 3 is another pipe, then one whose descriptor 3 is this one
        for fifo in (other, path):
            reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if fifo == other else None
            holder = subprocess.Popen(["bash", "-c", f'exec 3>"{fifo}"; exec sleep 30'])
            holders.append((holder, reader))
            for _ in range(1000):  # up to 10 s: on a loaded machine bash may take seconds to open it
                if os.path.exists(f"/proc/{holder.pid}/fd/3"):
                    break
                time.sleep(0.01)
            assert os.path.exists(f"/proc/{holder.pid}/fd/3"), "the holder never opened its descriptor 3"
        assert not pipe.seal(holders[0][0].pid) and path.exists() and not pipe.sealed
        assert not pipe.seal(999_999_999)
        assert pipe.seal(holders[1][0].pid) and not path.exists() and pipe.sealed
        holders[1][0].kill()  # its writer gone: the pipe reads as ended
        holders[1][0].wait()
        assert pipe.read() == b""
    finally:
        for holder, reader in holders:
            holder.kill()
            holder.wait()
            if reader is not None:
                os.close(reader)
        pipe.close()


def test_an_unsealed_pipe_reads_as_nothing(tmp_path: Path) -> None:
    pipe = StatusPipe.make(tmp_path, "sbx-ex-3")
    assert pipe.read() == b""  # before the seal a pipe without a writer reads as ended: never a report
    pipe.close()


def test_the_sweep_removes_what_gone_sandboxes_left_and_nothing_else(tmp_path: Path) -> None:
    for name in ("sbx-gone", "sbx-live", "sbx-young"):
        (tmp_path / name).mkdir()
    old = time.time() - 600
    for name in ("sbx-gone", "sbx-live"):
        os.utime(tmp_path / name, (old, old))
    assert sweep(tmp_path, {"sbx-live"}, older_than_s=60) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sbx-live", "sbx-young"]
    assert sweep(tmp_path / "missing", set(), older_than_s=60) == 0
