"""The init's status channel (images/init/sandbox-init.c, status "3"): compiled as the image build does and
run as PID 1 of a PID namespace of its own, as a user without capabilities, like a sandbox's: the command's
end reported once, under the launch's token, on a descriptor the command can neither inherit nor reach."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.backends._support.init_status import (
    MAX_LINE,
    InitStatus,
    forwarded_stop,
    parse_status,
    stopped_from_outside,
)
from orchestrator.backends._support.launch_message import launch_message, new_report_token
from tests.support.init_build import compile_init, compile_init_asan

NOBODY = 65534


@pytest.fixture(scope="module")
def init(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("setpriv") is None:
        pytest.skip("a PID namespace needs root and util-linux's unshare and setpriv")
    del tmp_path_factory  # pytest's are root's alone (0700): nobody must be able to run the init
    directory = Path(tempfile.mkdtemp(prefix="so-init-status-", dir="/tmp"))
    directory.chmod(0o755)
    yield compile_init(directory)
    shutil.rmtree(directory, ignore_errors=True)


def launch(
    init: Path, script: str, token: str, stdin: bytes | None = None, argv: list[str] | None = None
) -> subprocess.Popen[bytes]:
    """``sh -c script`` (or ``argv``) under the init, PID 1 of a new PID namespace (with its own /proc), as
    nobody without capabilities; its descriptor 3 the status pipe (put there by bash: dash's redirections
    take descriptors up to 9)."""
    message = launch_message(
        argv or ["sh", "-c", script], {"PATH": "/usr/bin:/bin"}, "/", with_stdin=stdin is not None, report=token,
        status_channel=True,
    )  # fmt: skip
    status_r, status_w = os.pipe()
    command = [
        "unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
        "--bounding-set=-all", "bash", "-c", f'exec "$0" 3>&{status_w}', str(init),
    ]  # fmt: skip
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(status_w,), cwd="/"
    )
    os.close(status_w)
    process.status_fd = status_r  # type: ignore[attr-defined]
    assert process.stdin is not None
    process.stdin.write(message + (stdin or b""))
    process.stdin.close()
    process.stdin = None
    return process


def finish(process: subprocess.Popen[bytes], timeout: float = 20) -> tuple[int, bytes, bytes, bytes]:
    """Its exit, stdout, stderr and all its status channel carried."""
    stdout, stderr = process.communicate(timeout=timeout)
    channel = b""
    fd = process.status_fd  # type: ignore[attr-defined]
    while chunk := os.read(fd, 4096):
        channel += chunk
    os.close(fd)
    return process.returncode, stdout, stderr, channel


def report(init: Path, script: str) -> tuple[int, InitStatus | None, bytes]:
    token = new_report_token()
    code, stdout, stderr, channel = finish(launch(init, script, token))
    assert b"Sanitizer" not in stderr, stderr
    return code, parse_status(channel, token), stdout


@pytest.mark.parametrize(
    ("script", "code", "sig"),
    [
        ("exit 0", 0, None),
        ("exit 3", 3, None),
        ("exit 255", 255, None),
        ("kill -TERM $$", 143, signal.SIGTERM),
        ("kill -KILL $$", 137, signal.SIGKILL),
        ("kill -SEGV $$", 139, signal.SIGSEGV),
    ],
)
def test_the_commands_end_is_reported_once_and_is_the_inits_exit(init: Path, script: str, code: int, sig: int) -> None:
    exit_code, status, _ = report(init, script)
    assert status is not None
    assert (status.ran, status.exit_code, status.signal, exit_code) == (True, code, sig, code)
    assert status.started_at <= status.finished_at
    assert status.stopped is None  # the signals came from inside: the command's own end


def test_a_program_that_cannot_run_is_reported_as_never_run(init: Path) -> None:
    token = new_report_token()
    code, stdout, stderr, channel = finish(launch(init, "", token, argv=["no-such-program-7f3e"]))
    status = parse_status(channel, token)
    assert status is not None and (status.ran, status.exit_code, code, stdout) == (False, 127, 127, b"")
    assert stderr == f"sandbox-init[{token}:127]: no-such-program-7f3e: No such file or directory\n".encode()


def test_stdin_and_output_are_the_commands_own(init: Path) -> None:
    token = new_report_token()
    data = b"\x00binary\xff\n" * 5000
    code, stdout, _, channel = finish(launch(init, "cat; echo done >&2", token, stdin=data))
    assert (code, stdout) == (0, data)
    assert parse_status(channel, token) is not None


def test_what_the_command_leaves_behind_is_killed_before_the_report(init: Path) -> None:
    """A process the command started and left running holds its stdout: it is killed, so the streams end."""
    began = time.monotonic()
    code, status, stdout = report(init, "sleep 60 & echo started; exit 4")
    assert time.monotonic() - began < 15
    assert (code, stdout) == (4, b"started\n") and status is not None and status.exit_code == 4


def test_signals_sent_to_the_init_reach_the_command(init: Path) -> None:
    # the command asks PID 1 (the init) to stop it, as a runtime would: the init forwards, the command ends
    code, status, stdout = report(init, "trap 'echo got TERM; exit 7' TERM; kill -TERM 1; sleep 5 & wait")
    assert (code, stdout) == (7, b"got TERM\n") and status is not None


def test_the_command_cannot_forge_or_reach_the_status_channel(init: Path) -> None:
    """It does not inherit descriptor 3, cannot open the init's through /proc (not dumpable), cannot read its
    memory or environment for the token: only the init's own line is on the channel."""
    fake = "sandbox-status v1 " + "0" * 32 + " ran=1 exit=0 signal=0"
    script = (
        f"echo '{fake}' >&3 && echo wrote-3; echo '{fake}' >/proc/1/fd/3 && echo wrote-proc;"
        " cat /proc/1/mem >/dev/null && echo read-mem; cat /proc/1/environ && echo read-env;"
        " [ -e /proc/self/fd/3 ] && echo has-3; exit 9"
    )
    token = new_report_token()
    code, stdout, _, channel = finish(launch(init, script, token))
    assert code == 9
    assert stdout == b"", stdout
    status = parse_status(channel, token)
    assert status is not None and status.exit_code == 9 and channel.count(b"\n") == 1


def test_an_init_killed_before_it_reports_leaves_no_report(init: Path) -> None:
    """A missing report is never a success: the channel just ends."""
    token = new_report_token()
    process = launch(init, "sleep 30", token)
    deadline = time.monotonic() + 10
    children: list[str] = []
    while not children and time.monotonic() < deadline:  # unshare's child: the init, PID 1 of its namespace
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        time.sleep(0.02)
    time.sleep(0.2)
    os.kill(int(children[0]), signal.SIGKILL)
    _, _, _, channel = finish(process)
    assert channel == b"" and parse_status(channel, token) is None


def test_a_report_is_only_one_well_formed_line_under_this_launchs_token() -> None:
    token = new_report_token()
    line = (
        f"sandbox-status v1 {token} ran=1 exit=0 signal=0 stopped=0 oom_kills=0 cpu_ns=5 memory_peak=10"
        " pids_peak=2 pids_hits=0 started_ns=1 finished_ns=2\n"
    ).encode()
    status = parse_status(line, token)
    assert status is not None and status.usage().memory_peak_bytes == 10 and not status.oom_killed
    assert parse_status(line, new_report_token()) is None  # another launch's
    assert parse_status(line, "") is None
    assert parse_status(line + line, token) is None  # twice: not the init's (it writes once)
    assert parse_status(line[:-1], token) is None  # cut
    assert parse_status(b"x" + line, token) is None
    assert parse_status(line.replace(b"finished_ns=2", b"finished_ns=0"), token) is None  # ends before it began
    # what the init never writes: an exit past 255, a signal whose exit is not 128 + it, a never-run command
    # that is not 126/127, a signal number past SIGRTMAX
    for wrong in (
        (b"exit=0 signal=0", b"exit=256 signal=0"),
        (b"exit=0 signal=0", b"exit=0 signal=9"),
        (
            b"ran=1 exit=0",
            b"ran=0 exit=0",
        ),
        (b"stopped=0", b"stopped=65"),
    ):
        assert parse_status(line.replace(*wrong), token) is None, wrong
    stopped = parse_status(line.replace(b"stopped=0", b"stopped=15"), token)
    assert stopped is not None and stopped.stopped == 15
    unknown = parse_status(
        line.replace(b"oom_kills=0", b"oom_kills=-1").replace(b"memory_peak=10", b"memory_peak=-1"), token
    )
    assert unknown is not None and unknown.oom_kills is None and unknown.memory_peak_bytes is None


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=MAX_LINE + 8))
def test_any_bytes_on_the_channel_are_a_report_only_under_the_token(data: bytes) -> None:
    token = "ab" * 16
    status = parse_status(data, token)
    assert status is None or data.startswith(f"sandbox-status v1 {token} ".encode())


@pytest.fixture(scope="module")
def init_asan(init: Path) -> Path:
    """The init built with AddressSanitizer and UBSan beside the plain one (nobody can run it there)."""
    return compile_init_asan(init.parent, "sandbox-init-asan")


@pytest.mark.parametrize("script", ["exit 5", "kill -KILL $$", "sleep 30 & exit 0", "cat /proc/1/mem"])
def test_the_supervisor_is_memory_safe(init_asan: Path, script: str) -> None:
    token = new_report_token()
    _, _, stderr, channel = finish(launch(init_asan, script, token))
    assert b"Sanitizer" not in stderr and b"runtime error" not in stderr, stderr[-2000:]
    assert parse_status(channel, token) is not None


def test_the_command_cannot_blind_the_inits_counters(init: Path) -> None:
    """Lowering the init's descriptor limit (prlimit on PID 1: the same user may) comes too late: the
    counters' files were opened before the command existed, and a figure that cannot be read is unknown,
    never a guess (adversarial review of issue 24)."""
    if shutil.which("prlimit") is None:
        pytest.skip("no prlimit")
    token = new_report_token()
    script = "prlimit --pid 1 --nofile=4:4 && echo lowered; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"
    code, stdout, _, channel = finish(launch(init, script, token))
    status = parse_status(channel, token)
    assert (code, stdout, status is not None) == (0, b"lowered\n", True)
    assert status is not None
    if Path("/sys/fs/cgroup/cpuacct/cpuacct.usage").exists() or Path("/sys/fs/cgroup/cpu.stat").exists():
        assert status.cpu_ns is not None and status.cpu_ns > 0, status


def test_a_stop_from_outside_is_told_apart_from_the_commands_own_end(init: Path) -> None:
    """The runtime's SIGTERM (sent from outside the PID namespace: an eviction, a deadline) is forwarded
    to the command, and the report says it came from outside, whatever the command answers with (here: a
    clean exit 0); a SIGTERM the command sends to PID 1 itself is not such a stop (test above)."""
    token = new_report_token()
    process = launch(init, "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done", token)
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
    os.kill(int(children[0]), signal.SIGTERM)  # the init: PID 1 of its namespace, seen from outside
    code, _, _, channel = finish(process)
    status = parse_status(channel, token)
    assert status is not None and (code, status.exit_code, status.stopped) == (0, 0, signal.SIGTERM), status


# -- Docker's way: the init opens the status pipe its one argument names ------------------------------------


def launch_with_pipe(init: Path, script: str, token: str, pipe: Path) -> subprocess.Popen[bytes]:
    """``sh -c script`` under the init as ``launch`` does, its status channel the named pipe ``pipe`` (the
    init's argument) instead of an inherited descriptor."""
    message = launch_message(
        ["sh", "-c", script], {"PATH": "/usr/bin:/bin"}, "/", with_stdin=False, report=token, status_channel=True
    )
    command = [
        "unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--inh-caps=-all",
        "--bounding-set=-all", str(init), str(pipe),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
    assert process.stdin is not None
    process.stdin.write(message)
    process.stdin.close()
    process.stdin = None
    return process


@pytest.fixture
def pipe_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="so-init-pipe-", dir="/tmp"))
    directory.chmod(0o711)  # nobody may reach the pipe, not list or add to the directory
    os.mkfifo(directory / "status")
    (directory / "status").chmod(0o622)  # the sandbox's user writes it (mkfifo's mode passes the umask)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_the_init_opens_the_status_pipe_its_argument_names(init: Path, pipe_dir: Path) -> None:
    """Docker's pooled sandbox: the orchestrator holds the pipe's reading end before the init starts; the
    init opens it as descriptor 3 and reports there, as on Kubernetes."""
    reader = os.open(pipe_dir / "status", os.O_RDONLY | os.O_NONBLOCK)
    token = new_report_token()
    process = launch_with_pipe(init, "[ -e /proc/self/fd/3 ] && echo has-3; exit 6", token, pipe_dir / "status")
    stdout, stderr = process.communicate(timeout=20)
    os.set_blocking(reader, True)
    channel = b""
    while chunk := os.read(reader, 4096):
        channel += chunk
    os.close(reader)
    status = parse_status(channel, token)
    assert (process.returncode, stdout, stderr) == (6, b"", b""), stderr
    assert status is not None and status.exit_code == 6 and status.ran


def test_without_a_reader_the_init_neither_waits_nor_runs_a_command_asking_for_the_channel(
    init: Path, pipe_dir: Path
) -> None:
    """No one holds the pipe's reading end: the init does not block opening it, and a launch asking for
    the status channel runs nothing (125), so a missing report can never be taken for a success."""
    token = new_report_token()
    began = time.monotonic()
    process = launch_with_pipe(init, "echo ran", token, pipe_dir / "status")
    stdout, stderr = process.communicate(timeout=20)
    assert time.monotonic() - began < 10
    assert (process.returncode, stdout) == (125, b""), stderr
    assert f"sandbox-init[{token}:125]: the status descriptor is not open".encode() in stderr, stderr


@pytest.mark.parametrize("reader", [True, False], ids=["with-a-reader", "without"])
def test_opening_the_status_pipe_is_memory_safe(init_asan: Path, pipe_dir: Path, reader: bool) -> None:
    held = os.open(pipe_dir / "status", os.O_RDONLY | os.O_NONBLOCK) if reader else None
    token = new_report_token()
    try:
        process = launch_with_pipe(init_asan, "exit 3", token, pipe_dir / "status")
        _, stderr = process.communicate(timeout=30)
    finally:
        if held is not None:
            os.close(held)
    assert b"Sanitizer" not in stderr and b"runtime error" not in stderr, stderr[-2000:]
    assert process.returncode == (3 if reader else 125), stderr[-2000:]


def _line(token: str, stopped: int) -> bytes:
    return (
        f"sandbox-status v1 {token} ran=1 exit=0 signal=0 stopped={stopped} oom_kills=0 cpu_ns=1 memory_peak=1"
        " pids_peak=1 pids_hits=0 started_ns=1 finished_ns=2\n"
    ).encode()


async def test_a_stop_from_outside_is_read_from_the_report_and_only_from_it() -> None:
    """The signal the init forwarded from outside, from a valid report under this launch's token; nothing from
    a report under another token, a report naming no such signal, or a channel that never ended."""
    token, other = "a" * 32, "b" * 32
    loop = asyncio.get_running_loop()

    def read(data: bytes) -> asyncio.Future[bytes]:
        done: asyncio.Future[bytes] = loop.create_future()
        done.set_result(data)
        return done

    assert await forwarded_stop(read(_line(token, 15)), token) == 15
    assert await forwarded_stop(read(_line(token, 0)), token) is None
    assert await forwarded_stop(read(_line(other, 15)), token) is None
    assert await forwarded_stop(loop.create_future(), token, wait_s=0.05) is None
    failed: asyncio.Future[bytes] = loop.create_future()
    failed.set_exception(OSError("the reader failed"))
    cancelled: asyncio.Future[bytes] = loop.create_future()
    cancelled.cancel()
    for broken in (failed, cancelled):  # a reader that failed is no report, never an error of the run's own
        assert await forwarded_stop(broken, token) is None
    said = str(stopped_from_outside("sbx-1", 15, 0))
    assert "signal 15 from outside the sandbox" in said and "exited 0" in said
