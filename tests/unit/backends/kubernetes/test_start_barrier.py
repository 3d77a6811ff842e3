"""The start barrier and its relays, run by a real /bin/sh with their pipes in a scratch directory: the
command starts only once its pipes have their other ends, its output comes through them whole, its stdin
ends after exactly what was sent, and without stdin it reads /dev/null."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.backends._support.launch_message import launch_message
from orchestrator.backends.kubernetes import start_barrier
from orchestrator.backends.kubernetes.start_barrier import (
    barrier_command,
    launch_header,
    launch_writer_command,
    pooled_barrier_command,
    reader_command,
    sidecar_command,
    writer_command,
)
from tests.support.init_build import compile_init


def local(argv: list[str], directory: Path) -> list[str]:
    """A command of the module with its pipes' directory moved to ``directory``."""
    return [part.replace(start_barrier.STDIO_DIR, str(directory)) for part in argv]


def run_relays(directory: Path, stdin: bytes | None) -> tuple[dict[str, bytes], list[threading.Thread]]:
    """The sidecar's start (the pipes made; idle 0 s), then its relays on threads; ``got`` fills as they end."""
    subprocess.run(local(sidecar_command(0, with_stdin=stdin is not None), directory), check=True, timeout=10)
    got: dict[str, bytes] = {}

    def relay(stream: str) -> None:
        done = subprocess.run(local(reader_command(stream), directory), capture_output=True, check=True)
        # the controller knows the relay runs (and holds its pipe) by this line on the relay's own stderr
        assert done.stderr == start_barrier.READY_MARKER
        got[stream] = done.stdout

    threads = [threading.Thread(target=relay, args=(stream,)) for stream in start_barrier.PIPES]
    if stdin is not None:
        feed = local(writer_command(len(stdin)), directory)
        threads.append(threading.Thread(target=subprocess.run, args=(feed,), kwargs={"input": stdin, "check": True}))
    for thread in threads:
        thread.start()
    return got, threads


@pytest.mark.parametrize("stdin", [b"any \x00 byte\nand no newline at the end", None])
def test_the_command_runs_behind_its_pipes(tmp_path: Path, stdin: bytes | None) -> None:
    script = 'wc -c; echo "[${d-unset}]"; echo err >&2; head -c 300000 /dev/zero'
    command = local(barrier_command(["/bin/sh", "-c", script], with_stdin=stdin is not None), tmp_path)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    got, threads = run_relays(tmp_path, stdin)
    assert proc.wait(timeout=20) == 0
    for thread in threads:
        thread.join(timeout=20)
    # the barrier's variable stays its own; nothing of the command reaches the container's own stdio
    assert got["stdout"] == f"{len(stdin or b'')}\n[unset]\n".encode() + b"\0" * 300000
    assert got["stderr"] == b"err\n"
    assert proc.communicate() == (b"", b"")


def test_the_command_waits_for_its_readers(tmp_path: Path) -> None:
    command = local(barrier_command(["/bin/sh", "-c", "echo started"], with_stdin=False), tmp_path)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)  # no reader yet: blocked opening its stdout
    got, threads = run_relays(tmp_path, None)
    assert proc.wait(timeout=20) == 0
    for thread in threads:
        thread.join(timeout=20)
    assert got["stdout"] == b"started\n"


def test_the_sidecar_refuses_a_pipe_it_cannot_make(tmp_path: Path) -> None:
    (tmp_path / "stdout").write_text("a file already there")
    command = local(sidecar_command(0, with_stdin=False), tmp_path)
    assert subprocess.run(command, capture_output=True, check=False, timeout=10).returncode != 0


# -- a pre-started pod: our init behind the barrier, its launch message through the stdin pipe ----------


@pytest.fixture(scope="module")
def init(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_init(tmp_path_factory.mktemp("init"))


def start_readers(directory: Path) -> tuple[dict[str, bytes], list[threading.Thread]]:
    """The sidecar's start with a stdin pipe and a status pipe (a pooled pod always has them), then its
    relays: the outputs' and the status channel's."""
    subprocess.run(local(sidecar_command(0, with_stdin=True, with_status=True), directory), check=True, timeout=10)
    got: dict[str, bytes] = {}

    def relay(stream: str) -> None:
        got[stream] = subprocess.run(local(reader_command(stream), directory), capture_output=True, check=True).stdout

    streams = (*start_barrier.PIPES, start_barrier.STATUS)
    threads = [threading.Thread(target=relay, args=(stream,)) for stream in streams]
    for thread in threads:
        thread.start()
    return got, threads


@dataclass
class PooledPod:
    """A pre-started pod's processes, run locally: our init behind the barrier, the sidecar's relays, and the
    pool's launch writer, connected as the pod is filled (ready once it holds the init's pipe)."""

    workspace: Path
    pipes: Path
    init: subprocess.Popen[bytes]
    got: dict[str, bytes]
    threads: list[threading.Thread]
    writer: subprocess.Popen[bytes]

    @classmethod
    def fill(cls, init: Path, tmp_path: Path) -> PooledPod:
        workspace = tmp_path / "ws"
        workspace.mkdir()
        pipes = tmp_path / "io"
        pipes.mkdir()
        proc = subprocess.Popen(local(pooled_barrier_command([str(init)]), pipes), stdout=subprocess.PIPE)
        got, threads = start_readers(pipes)
        writer = subprocess.Popen(
            local(launch_writer_command(), pipes), stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert writer.stderr is not None
        assert writer.stderr.readline() == start_barrier.READY_MARKER
        return cls(workspace, pipes, proc, got, threads, writer)


@pytest.mark.parametrize("stdin", [b"fed \x00 in" * 20000, b"", None], ids=["200KB-with-NUL", "empty", "none"])
def test_a_pooled_pods_init_waits_then_runs_the_launched_command(
    init: Path, tmp_path: Path, stdin: bytes | None
) -> None:
    pod = PooledPod.fill(init, tmp_path)
    workspace, pipes, proc, got, threads, writer = pod.workspace, pod.pipes, pod.init, pod.got, pod.threads, pod.writer
    assert writer.stderr is not None and writer.stdin is not None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0.5)  # the init waits for its message
    script = 'printf "%s|%s|" "$(pwd)" "$GREETING"; wc -c; echo err >&2; exit 7'
    message = launch_message(
        ["/bin/sh", "-c", script], {"GREETING": "hi"}, str(workspace), with_stdin=stdin is not None
    )
    # the claim: the header, the message, the stdin, on the writer's stream as it is
    writer.stdin.write(launch_header(len(message), len(stdin or b"")) + message + (stdin or b""))
    writer.stdin.flush()
    assert writer.stderr.readline() == start_barrier.LAUNCHED_MARKER
    assert proc.wait(timeout=20) == 7  # the stdin written, the pipe closed: the command read EOF
    with pytest.raises(subprocess.TimeoutExpired):
        writer.wait(timeout=0.2)  # it stays until its own stream ends (the pod's deletion)
    writer.stdin.close()
    assert writer.wait(timeout=20) == 0
    for thread in threads:
        thread.join(timeout=20)
    assert got["stdout"] == f"{workspace}|hi|{len(stdin or b'')}\n".encode()
    assert got["stderr"] == b"err\n"
    # no status channel asked for (this init is not PID 1 here): the command never held the status pipe
    assert got["status"] == b""
    assert not (pipes / start_barrier.STATUS).exists()  # its name removed before the launch


def test_a_sessions_input_streams_through_the_launch_writer_until_its_stream_ends(init: Path, tmp_path: Path) -> None:
    """A session from a pre-started pod: no stdin size in the header; each piece of input reaches the command
    as it is sent (not at the stream's end), and the stream's end is the command's EOF."""
    pod = PooledPod.fill(init, tmp_path)
    workspace, proc, got, threads, writer = pod.workspace, pod.init, pod.got, pod.threads, pod.writer
    assert writer.stderr is not None and writer.stdin is not None
    script = 'read a; echo "$a" > first; while read l; do echo "got $l"; done; echo "eof" >&2; exit 3'
    message = launch_message(["/bin/sh", "-c", script], {}, str(workspace), with_stdin=True)
    writer.stdin.write(launch_header(len(message), None) + message)
    writer.stdin.flush()
    assert writer.stderr.readline() == start_barrier.LAUNCHED_MARKER
    writer.stdin.write(b"one\n")
    writer.stdin.flush()
    for _ in range(200):  # the first line arrived while the stream is still open
        if (workspace / "first").exists() and (workspace / "first").read_bytes() == b"one\n":
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the first line never reached the command")
    assert proc.poll() is None
    writer.stdin.write(b"two\nthree\n")
    writer.stdin.close()  # the stream's stdin ends: the command reads EOF
    assert proc.wait(timeout=20) == 3
    assert writer.wait(timeout=20) == 0
    for thread in threads:
        thread.join(timeout=20)
    assert (got["stdout"], got["stderr"]) == (b"got two\ngot three\n", b"eof\n")


def test_the_launch_writer_says_ready_only_while_the_init_holds_its_pipe(tmp_path: Path) -> None:
    subprocess.run(local(sidecar_command(0, with_stdin=True), tmp_path), check=True, timeout=10)
    writer = subprocess.Popen(
        local(launch_writer_command(), tmp_path), stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE
    )
    with pytest.raises(subprocess.TimeoutExpired):
        writer.wait(timeout=0.5)  # nothing holds the pipe: no marker
    assert writer.stderr is not None
    os.set_blocking(writer.stderr.fileno(), False)
    assert writer.stderr.read() is None  # nothing written yet (None: it would block)
    reader = subprocess.Popen(["head", "-c", "3", str(tmp_path / "stdin")], stdout=subprocess.PIPE)
    _, err = writer.communicate(launch_header(3, 2) + b"abcde", timeout=20)
    assert (writer.returncode, err) == (0, start_barrier.READY_MARKER + start_barrier.LAUNCHED_MARKER)
    assert reader.communicate(timeout=20)[0] == b"abc"


def test_a_launch_to_an_init_that_is_gone_is_never_said_to_have_landed(tmp_path: Path) -> None:
    subprocess.run(local(sidecar_command(0, with_stdin=True), tmp_path), check=True, timeout=10)
    writer = subprocess.Popen(
        local(launch_writer_command(), tmp_path), stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE
    )
    with open(tmp_path / "stdin", "rb") as pipe:  # the init's side: held by the child alone from here on
        init = subprocess.Popen(["sleep", "60"], stdin=pipe)
    assert writer.stderr is not None and writer.stdin is not None
    assert writer.stderr.readline() == start_barrier.READY_MARKER
    init.kill()  # the init dies in the pool: nothing holds the pipe's other end any more
    init.wait(timeout=10)
    _, err = writer.communicate(launch_header(5, 0) + b"hello", timeout=20)
    assert writer.returncode != 0 and start_barrier.LAUNCHED_MARKER not in err
