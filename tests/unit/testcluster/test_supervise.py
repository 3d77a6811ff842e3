"""Supervision: pid files that count only for our live process, a dummy daemon started in a session of its
own and stopped (politely, or killed when it ignores SIGTERM), log rotation, waits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.testcluster import supervise

PYTHON = Path(sys.executable).name  # the dummy daemon's binary name
SLEEPER = "import time; time.sleep(120)"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(120)"
)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Path]:
    """A directory standing for the cluster's; every process started with it on its command line is killed
    at the end."""
    yield tmp_path
    supervise.kill(supervise.pids_matching([str(tmp_path)]))


def start(cluster: Path, name: str, code: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    pid_file, log = cluster / f"{name}.pid", cluster / "logs" / f"{name}.log"
    proc = supervise.start(pid_file, log, [sys.executable, "-c", code, str(cluster)])
    # between fork and exec the child still has this process's command line
    assert supervise.wait_until(10, lambda: str(cluster) in supervise.cmdline(proc.pid) or proc.poll() is not None)
    return proc, pid_file, log


def test_a_started_daemon_is_ours_until_stopped(cluster: Path) -> None:
    proc, pid_file, log = start(cluster, "dummy", SLEEPER)
    assert supervise.read_pid(pid_file) == proc.pid
    assert supervise.owned_pid(pid_file, PYTHON, str(cluster)) == proc.pid
    assert os.getsid(proc.pid) == proc.pid  # a session of its own: a Ctrl-C of make or pytest misses it
    assert log.read_text().startswith("--- ") and "started by k8s-cluster.sh" in log.read_text()
    supervise.stop(pid_file, PYTHON, str(cluster), grace=5)
    assert proc.wait(timeout=5) == -signal.SIGTERM
    assert not pid_file.exists()
    assert not supervise.process_alive(proc.pid)


def test_output_goes_to_the_log_and_no_descriptor_is_inherited(cluster: Path) -> None:
    read_end, write_end = os.pipe()  # stands for the cluster's lock: a daemon must never hold it
    os.set_inheritable(write_end, True)
    try:
        code = f"import os, sys; print('out'); print('err', file=sys.stderr); os.fstat({write_end})"
        proc, _pid_file, log = start(cluster, "talker", code)
        assert proc.wait(timeout=10) != 0  # os.fstat of the descriptor failed: EBADF
        text = log.read_text()
        assert "out\n" in text and "err\n" in text and "Bad file descriptor" in text
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_daemon_ignoring_sigterm_is_killed_after_the_grace_period(
    cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proc, pid_file, log = start(cluster, "stubborn", STUBBORN)
    assert supervise.wait_until(10, lambda: "ready" in log.read_text())
    t0 = time.monotonic()
    supervise.stop(pid_file, PYTHON, str(cluster), grace=0.5)
    assert 0.5 <= time.monotonic() - t0 < 5
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert "did not stop in 0.5 s; killing it" in capsys.readouterr().err


def test_quiet_stop_says_nothing(cluster: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proc, pid_file, log = start(cluster, "stubborn", STUBBORN)
    assert supervise.wait_until(10, lambda: "ready" in log.read_text())
    supervise.stop(pid_file, PYTHON, str(cluster), grace=0.2, quiet=True)
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert capsys.readouterr().err == ""


def test_a_pid_file_naming_someone_else_does_not_count(cluster: Path) -> None:
    proc, pid_file, _log = start(cluster, "dummy", SLEEPER)
    assert supervise.owned_pid(pid_file, "etcd", str(cluster)) is None  # another binary
    assert supervise.owned_pid(pid_file, PYTHON, "/elsewhere/k8s/cluster") is None  # another cluster
    pid_file.write_text(f"{os.getpid()}\n")  # a live process, not a daemon of ours
    assert supervise.owned_pid(pid_file, PYTHON, str(cluster)) is None
    supervise.stop(pid_file, PYTHON, str(cluster))  # stops nothing, removes the stale file
    assert not pid_file.exists()
    assert supervise.process_alive(proc.pid)
    proc.kill()
    proc.wait()


def test_stale_and_garbled_pid_files(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    pid_file = tmp_path / "x.pid"
    pid_file.write_text(f"{dead.pid}\n")
    assert supervise.owned_pid(pid_file, "true", str(tmp_path)) is None
    pid_file.write_text("not a pid\n")
    assert supervise.read_pid(pid_file) is None
    assert supervise.read_pid(tmp_path / "missing.pid") is None


def test_a_zombie_has_ended() -> None:
    child = subprocess.Popen(["true"])
    assert supervise.wait_until(5, lambda: Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] == "Z")
    assert not supervise.process_alive(child.pid)  # not reaped yet, but no longer running
    child.wait()
    assert not supervise.process_alive(child.pid)


def test_pids_matching(cluster: Path) -> None:
    proc, _pid_file, _log = start(cluster, "dummy", SLEEPER)
    assert supervise.pids_matching([str(cluster), ""]) == [proc.pid]
    assert os.getpid() not in supervise.pids_matching(["pytest", "python"])
    supervise.kill([proc.pid])
    assert proc.wait(timeout=5) == -signal.SIGKILL


def test_rotate_log(tmp_path: Path) -> None:
    log = tmp_path / "kubelet.log"
    supervise.rotate_log(log, limit=10)  # missing: nothing to do
    log.write_text("short")
    supervise.rotate_log(log, limit=10)
    assert log.read_text() == "short"
    log.write_text("x" * 11)
    supervise.rotate_log(log, limit=10)
    assert not log.exists() and (tmp_path / "kubelet.log.1").read_text() == "x" * 11


def test_wait_until() -> None:
    calls = []

    def third_time() -> bool:
        calls.append(1)
        if len(calls) == 1:
            raise OSError("not yet")  # a failing probe says no
        return len(calls) >= 3

    assert supervise.wait_until(5, third_time, interval=0.01)
    assert len(calls) == 3
    t0 = time.monotonic()
    assert not supervise.wait_until(0.1, lambda: False, interval=0.02)
    assert time.monotonic() - t0 < 1
