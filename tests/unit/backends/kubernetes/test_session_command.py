"""A session's exec'd command, run by a real /bin/sh: its marker first, then exactly its argv; and how
the exec stream's frames are read around that marker (a scripted websocket)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.kubernetes.channels import EARLY_MAX, ERROR, STDERR, STDOUT, ChannelError, Channels
from orchestrator.backends.kubernetes.start_barrier import (
    SESSION_MARKER,
    idle_command,
    session_command,
    session_marker,
)

# The wrapper kills every other process of its PID namespace once its command ended (kill -1): it only ever
# runs in a PID namespace of its own here, whose init stands for the pod's idle command (PID 1, spared).
# A SIGKILL takes effect asynchronously: the child left behind may take a moment (on a loaded machine) to be
# gone, so it is looked for up to 2 s before it is said to have survived.
INIT = (  # (not in the exec's session in a pod: a Ctrl-C there never reaches it)
    'trap : INT; "$@"; rc=$?; p=$(cat "$PIDFILE" 2>/dev/null || echo none);'
    " alive() { [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null; };"
    " n=0; while alive && [ $n -lt 20 ]; do sleep 0.1; n=$((n+1)); done;"
    " if alive; then echo left >&2; else echo gone >&2; fi;"
    " echo init-alive >&2; exit $rc"
)


def in_own_pid_namespace(argv: list[str]) -> list[str]:
    """``argv`` below an init of its own PID namespace, in a session (and process group) of its own."""
    return [
        "unshare",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "setsid",
        "--wait",
        "/bin/sh",
        "-c",
        INIT,
        "init",
        *argv,
    ]


@pytest.fixture
def pid_namespace() -> None:
    probe = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"no PID namespace for the wrapper's kill -1 here: {probe.stderr.decode()[-200:]}")


def test_the_marker_comes_first_then_the_command_runs_as_given_and_nothing_it_left_survives(
    pid_namespace: None, tmp_path: Path
) -> None:
    pidfile = tmp_path / "child.pid"
    # a child left behind, holding the command's stdout: killed at the command's end (else the stream,
    # and this run, would wait for it), and the exit status is still the command's
    script = 'printf "%s|" "$@"; echo; sleep 60 & echo $! > "$PIDFILE"; echo err >&2; exit 3'
    argv = ["/bin/sh", "-c", script, "name", "a b", "$HOME", "'"]
    done = subprocess.run(
        in_own_pid_namespace(session_command(argv)),
        capture_output=True,
        timeout=10,
        check=False,
        env={"PIDFILE": str(pidfile), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 3
    assert done.stdout == b"a b|$HOME|'|\n"  # no word of the argv is the wrapper's
    assert done.stderr == session_marker(False) + b"err\ngone\ninit-alive\n"


def test_a_ctrl_c_for_the_command_does_not_end_the_wrapper(pid_namespace: None) -> None:
    # the command dies of SIGINT (as at a terminal's Ctrl-C, sent to the whole foreground group): the
    # wrapper lives on to sweep and to report 130
    argv = ["/bin/sh", "-c", "kill -s INT 0; sleep 5"]
    done = subprocess.run(in_own_pid_namespace(session_command(argv)), capture_output=True, timeout=10, check=False)
    assert done.returncode == 130, done
    assert done.stderr.endswith(b"init-alive\n")


def test_the_marker_on_a_terminal_ends_in_cr_lf() -> None:
    assert session_marker(True) == SESSION_MARKER + b"\r\n"
    assert session_marker(False) == SESSION_MARKER + b"\n"


def test_the_idle_command_only_waits() -> None:
    assert subprocess.run(idle_command(0), timeout=10, check=False).returncode == 0


class Frame:
    def __init__(self, data: bytes) -> None:
        self.data = data


class ScriptedSocket:
    """The websocket's socket, replaying frames: (opcode, channel byte + payload)."""

    def __init__(self, frames: list[bytes]) -> None:
        self._frames = list(frames)
        self.sent: list[bytes] = []

    def recv_data_frame(self, _: bool) -> tuple[int, Frame]:
        if not self._frames:
            return 0x8, Frame(b"")  # close
        return 0x2, Frame(self._frames.pop(0))

    def send(self, payload: bytes, opcode: int) -> None:
        del opcode
        self.sent.append(payload)

    def settimeout(self, timeout: float | None) -> None:
        self.timeout = timeout


class ScriptedWs:
    def __init__(self, frames: list[bytes], subprotocol: str = "v5.channel.k8s.io") -> None:
        self.sock = ScriptedSocket(frames)
        self.subprotocol = subprotocol

    def close(self) -> None:
        pass


def channels(frames: list[bytes], subprotocol: str = "v5.channel.k8s.io") -> Channels:
    return Channels(ScriptedWs(frames, subprotocol), api=None)  # type: ignore[arg-type]


def drain(ch: Channels) -> tuple[bytes, bytes]:
    out, err = bytearray(), bytearray()
    ch.pump(out.extend, err.extend)
    return bytes(out), bytes(err)


def test_output_that_overtakes_the_marker_on_the_other_channel_is_kept_in_order() -> None:
    marker = session_marker(False)
    status = json.dumps({"status": "Success"}).encode()
    ch = channels(
        [
            bytes([STDOUT]) + b"42\n",  # the command's stdout, copied before its stderr's marker
            bytes([STDERR]) + marker + b"warn\n",
            bytes([STDOUT]) + b"more\n",
            bytes([ERROR]) + status,
        ]
    )
    ch.await_marker(marker, STDERR)
    assert drain(ch) == (b"42\nmore\n", b"warn\n")
    assert ch.status == {"status": "Success"}


def test_on_a_terminal_the_marker_is_awaited_on_stdout() -> None:
    marker = session_marker(True)
    ch = channels([bytes([STDOUT]) + marker + b"$ ", bytes([STDOUT]) + b"hi\r\n"])
    ch.await_marker(marker, STDOUT)
    assert drain(ch) == (b"$ hi\r\n", b"")


def test_a_command_that_did_not_start_says_why_and_can_be_tried_again() -> None:
    refusal = json.dumps({"status": "Failure", "message": 'container not found ("sandbox")'}).encode()
    ch = channels([bytes([ERROR]) + refusal])
    with pytest.raises(ChannelError, match="container not found") as failed:
        ch.await_marker(session_marker(False), STDERR)
    assert not failed.value.started


def test_a_flood_before_the_marker_is_refused_as_started_never_run_again() -> None:
    flood = [bytes([STDOUT]) + b"x" * 65536 for _ in range(EARLY_MAX // 65536 + 1)]
    ch = channels([*flood, bytes([STDERR]) + session_marker(False)])
    with pytest.raises(ChannelError, match="overtook") as failed:
        ch.await_marker(session_marker(False), STDERR)
    assert failed.value.started


@pytest.mark.parametrize(("subprotocol", "closable"), [("v5.channel.k8s.io", True), ("v4.channel.k8s.io", False)])
def test_stdin_closes_alone_only_with_v5_and_resize_is_channel_four(subprotocol: str, closable: bool) -> None:
    ch = channels([], subprotocol)
    ws: Any = ch._ws
    assert ch.can_close_stdin is closable
    if closable:
        ch.close_stdin()
        assert ws.sock.sent[-1] == bytes([255, 0])
    else:
        with pytest.raises(ChannelError, match="v5"):
            ch.close_stdin()
    ch.resize(40, 100)
    assert ws.sock.sent[-1] == bytes([4]) + b'{"Width": 100, "Height": 40}'
