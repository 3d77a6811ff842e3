"""The warm server's parts that need no server: framing, descriptor passing, admission, fingerprint,
and the client's fallbacks to a cold start."""

from __future__ import annotations

import os
import socket
import struct
import sys
from pathlib import Path

import pytest

from orchestrator.cli.warm import client, fingerprint
from orchestrator.cli.warm.protocol import MAX_FRAME, FrameReader, ProtocolError, send_frame, socket_path
from orchestrator.cli.warm.server import mismatch


@pytest.fixture
def pair() -> tuple[socket.socket, socket.socket]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    a.close()
    b.close()


def test_frames_round_trip_with_descriptors(pair: tuple[socket.socket, socket.socket], tmp_path: Path) -> None:
    a, b = pair
    target = tmp_path / "f"
    target.write_text("through the socket")
    fd = os.open(target, os.O_RDONLY)
    try:
        send_frame(a, {"op": "run", "argv": ["run", "--", "true"]}, [fd])
    finally:
        os.close(fd)
    frame = FrameReader(b).read()
    assert frame is not None
    message, fds = frame
    assert message == {"op": "run", "argv": ["run", "--", "true"]}
    (received,) = fds
    try:
        assert os.read(received, 100) == b"through the socket"
    finally:
        os.close(received)


def test_frames_that_arrive_together_are_read_one_by_one(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    for signum in (2, 15, 1):
        send_frame(a, {"signal": signum})
    a.close()
    reader = FrameReader(b)
    got = []
    while (frame := reader.read()) is not None:
        got.append(frame[0]["signal"])
    assert got == [2, 15, 1]


def test_a_frame_split_across_reads_is_reassembled(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    body = b'{"exit": 3}'
    a.sendall(struct.pack("!I", len(body)) + body[:4])
    reader = FrameReader(b)
    a.sendall(body[4:])
    assert reader.read() == ({"exit": 3}, [])


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (struct.pack("!I", MAX_FRAME + 1), "over the"),
        (struct.pack("!I", 5) + b"[1,2]", "JSON object"),
        (struct.pack("!I", 3) + b"{no", "malformed frame"),
        (struct.pack("!I", 10) + b"{}", "went away mid-frame"),
        (b"\x00\x00", "went away mid-frame"),
    ],
)
def test_a_broken_frame_is_a_protocol_error(
    pair: tuple[socket.socket, socket.socket], raw: bytes, problem: str
) -> None:
    a, b = pair
    a.sendall(raw)
    a.close()
    with pytest.raises(ProtocolError, match=problem):
        FrameReader(b).read()


def test_a_broken_frame_closes_the_descriptors_it_brought(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    r, w = os.pipe()
    try:
        socket.send_fds(a, [struct.pack("!I", 3) + b"{no"], [r])
        a.close()
        before = set(os.listdir("/proc/self/fd"))
        with pytest.raises(ProtocolError):
            FrameReader(b).read()
        assert set(os.listdir("/proc/self/fd")) <= before
    finally:
        os.close(r)
        os.close(w)


def test_an_oversized_message_is_not_sent(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    with pytest.raises(ProtocolError, match="over the"):
        send_frame(a, {"env": {"K": "x" * MAX_FRAME}})


# -- admission ---------------------------------------------------------------------------------------------


def _request(**overrides: object) -> dict[str, object]:
    message: dict[str, object] = {
        "op": "run",
        "argv": ["run", "--", "true"],
        "env": dict(os.environ),
        "executable": sys.executable,
        "umask": 0o022,
    }
    message.update(overrides)
    return message


FOUR_FDS = [10, 11, 12, 13]


def test_a_request_from_the_same_interpreter_and_environment_is_admitted() -> None:
    digest = fingerprint.code_fingerprint()
    assert mismatch(_request(), FOUR_FDS, fingerprint=digest) is None


@pytest.mark.parametrize(
    ("overrides", "fds", "reason"),
    [
        ({}, [10, 11, 12], "expected 4 descriptors"),
        ({"executable": "/usr/bin/python3.99"}, FOUR_FDS, "another interpreter"),
        ({"env": {**os.environ, "PYTHONHASHSEED": "7"}}, FOUR_FDS, "start-up environment"),
        ({"env": {**os.environ, "LC_ALL": "C"}}, FOUR_FDS, "start-up environment"),
        ({"env": {"K": 1}}, FOUR_FDS, "malformed environment"),
        ({"argv": "run -- true"}, FOUR_FDS, "malformed argv"),
        ({"umask": "022"}, FOUR_FDS, "malformed umask"),
    ],
)
def test_a_request_the_server_cannot_honour_is_refused(
    overrides: dict[str, object], fds: list[int], reason: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LC_ALL", raising=False)
    digest = fingerprint.code_fingerprint()
    got = mismatch(_request(**overrides), fds, fingerprint=digest)
    assert got is not None and reason in got


def test_changed_code_is_refused_as_stale() -> None:
    got = mismatch(_request(), FOUR_FDS, fingerprint="0" * 64)
    assert got is not None and got.startswith("stale")


def test_the_fingerprint_follows_size_and_mtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    code = package / "sub" / "mod.py"
    code.write_text("x = 1\n")
    (package / "notes.txt").write_text("not code")
    monkeypatch.setattr(fingerprint, "PACKAGE_DIR", package)
    first = fingerprint.code_fingerprint()
    assert fingerprint.code_fingerprint() == first
    (package / "notes.txt").write_text("still not code, other size")
    assert fingerprint.code_fingerprint() == first
    os.utime(code, ns=(code.stat().st_atime_ns, code.stat().st_mtime_ns + 1_000_000))
    assert fingerprint.code_fingerprint() != first
    second = fingerprint.code_fingerprint()
    (package / "policy.yaml").write_text("a: 1\n")
    assert fingerprint.code_fingerprint() != second


# -- the client's fallbacks -----------------------------------------------------------------------------------


def test_the_socket_lives_in_the_state_dir() -> None:
    assert socket_path({"SANDBOX_STATE_DIR": "/srv/state"}) == "/srv/state/warm.sock"
    assert socket_path({"SANDBOX_STATE_DIR": "~/s"}) == os.path.expanduser("~/s/warm.sock")
    assert socket_path({"XDG_STATE_HOME": "/x"}) == "/x/sandbox-orchestrator/warm.sock"
    assert socket_path({"XDG_STATE_HOME": "relative"}) == os.path.expanduser(
        "~/.local/state/sandbox-orchestrator/warm.sock"
    )


def test_no_server_means_a_cold_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_STATE_DIR", str(tmp_path))
    assert client.run_warm(["--version"]) is None
    assert client.query("status") is None


def test_a_socket_nobody_serves_means_a_cold_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_STATE_DIR", str(tmp_path))
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(tmp_path / "warm.sock"))
    dead.close()  # bound, never listening: connect is refused
    assert client.run_warm(["--version"]) is None


def test_a_server_that_refuses_means_a_cold_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setenv("SANDBOX_STATE_DIR", str(tmp_path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "warm.sock"))
    listener.listen(1)
    seen: dict[str, object] = {}

    def refuse() -> None:
        conn, _ = listener.accept()
        with conn:
            frame = FrameReader(conn).read()
            assert frame is not None
            seen["message"], fds = frame
            seen["fds"] = len(fds)
            for fd in fds:
                os.close(fd)
            send_frame(conn, {"refused": "another interpreter"})

    thread = threading.Thread(target=refuse)
    thread.start()
    try:
        assert client.run_warm(["check", "--", "true"]) is None
    finally:
        thread.join(10)
        listener.close()
    message = seen["message"]
    assert isinstance(message, dict)
    assert message["argv"] == ["check", "--", "true"]
    assert message["executable"] == sys.executable
    assert message["env"]["SANDBOX_STATE_DIR"] == str(tmp_path)
    assert seen["fds"] == 4  # stdin, stdout, stderr, working directory


@pytest.mark.parametrize("argv", [["warm", "start"], ["warm", "status"]])
def test_warm_commands_never_go_through_a_server(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: object) -> object:
        raise AssertionError("connected")

    monkeypatch.setattr(client, "socket_path", boom)
    assert client.run_warm(argv) is None


def test_sandboxctl_warm_0_never_goes_through_a_server(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: object) -> object:
        raise AssertionError("connected")

    monkeypatch.setattr(client, "socket_path", boom)
    monkeypatch.setenv("SANDBOXCTL_WARM", "0")
    assert client.run_warm(["run", "--", "true"]) is None


def test_the_entry_point_imports_no_heavy_library() -> None:
    """What every `sandboxctl` start pays before it knows whether a warm server takes the command."""
    import subprocess

    code = (
        "import sys\n"
        "before = set(sys.modules)\n"  # what the interpreter's start (site, .pth finders) already loaded
        "import orchestrator.cli.launcher, orchestrator.cli.warm.client\n"
        "heavy = {'pydantic', 'docker', 'yaml', 'asyncio', 'requests', 'tree_sitter', 'argparse', 'typing',"
        " 'pathlib', 'contextlib'}\n"
        "print(sorted(heavy & (set(sys.modules) - before)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("limits", "reason"),
    [
        ([], "malformed rlimits"),
        ({"RLIMIT_NOPE": [1, 1]}, "malformed rlimit"),
        ({"os.system": [1, 1]}, "malformed rlimit"),
        ({"RLIMIT_CORE": [1]}, "malformed rlimit"),
        ({"RLIMIT_CORE": ["0", "0"]}, "malformed rlimit"),
        ({"RLIMIT_CORE": [2, 1]}, "cannot take the caller's RLIMIT_CORE"),
    ],
)
def test_resource_limits_that_cannot_be_taken_are_refused(limits: object, reason: str) -> None:
    from orchestrator.cli.warm.worker import _adopt_rlimits

    got = _adopt_rlimits(limits)
    assert got is not None and reason in got


def test_the_callers_resource_limits_are_taken() -> None:
    import resource

    from orchestrator.cli.warm.worker import _adopt_rlimits

    before = resource.getrlimit(resource.RLIMIT_CORE)
    try:
        assert _adopt_rlimits({"RLIMIT_CORE": [0, before[1]]}) is None
        assert resource.getrlimit(resource.RLIMIT_CORE) == (0, before[1])
    finally:
        resource.setrlimit(resource.RLIMIT_CORE, before)


# -- who is on the other end -------------------------------------------------------------------------------


def test_a_state_dir_of_someone_else_is_never_connected_to(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_STATE_DIR", str(tmp_path))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "warm.sock"))
    listener.listen(1)
    listener.settimeout(0.2)
    try:
        for owner, mode in ((65534, 0o700), (os.getuid(), 0o770), (os.getuid(), 0o702)):
            os.chown(tmp_path, owner, -1)
            tmp_path.chmod(mode)
            assert client.run_warm(["--version"]) is None
            with pytest.raises(TimeoutError):
                listener.accept()  # nothing even connected
    finally:
        os.chown(tmp_path, os.getuid(), -1)
        tmp_path.chmod(0o700)
        listener.close()


def test_a_server_of_another_uid_gets_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setenv("SANDBOX_STATE_DIR", str(tmp_path))
    monkeypatch.setattr(client, "peer_credentials", lambda conn: (1, os.getuid() + 4242, 0))
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / "warm.sock"))
    listener.listen(1)
    received: list[bytes] = []

    def listen() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.settimeout(5)
            received.append(conn.recv(65536))

    thread = threading.Thread(target=listen)
    thread.start()
    try:
        assert client.run_warm(["run", "--", "true"]) is None
        assert client.query("status") is None
    finally:
        thread.join(10)
        listener.close()
    assert received == [b""]  # connected, then closed without a byte: no env, no descriptors


def test_the_peer_is_compared_with_this_process(pair: tuple[socket.socket, socket.socket]) -> None:
    from orchestrator.cli.warm.peer import identity, peer_difference

    own = identity(os.getpid())
    assert {"Uid", "Groups", "CapEff", "NoNewPrivs", "Seccomp", "ns/mnt", "ns/pid", "root", "lsm"} <= set(own)
    _, b = pair  # the peer is this very process
    assert peer_difference(b, own, role="caller") is None
    assert peer_difference(b, {**own, "CapEff": "0"}, role="caller") == "the caller's CapEff differs"
    assert peer_difference(b, {**own, "ns/mnt": "mnt:[1]"}, role="server") == "the server's ns/mnt differs"


def test_a_peer_gone_before_it_is_looked_at_is_refused(tmp_path: Path) -> None:
    """Its pid may already belong to another process: nothing read by pid may count."""
    import subprocess

    from orchestrator.cli.warm.peer import identity, peer_difference

    path = str(tmp_path / "s")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    try:
        code = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({path!r})"
        subprocess.run([sys.executable, "-c", code], check=True)  # connects, then exits
        conn, _ = listener.accept()
        with conn:
            reason = peer_difference(conn, identity(os.getpid()), role="caller")
    finally:
        listener.close()
    assert reason is not None and reason.startswith("cannot"), reason


def test_a_trickling_peer_cannot_hold_a_read_past_its_deadline(pair: tuple[socket.socket, socket.socket]) -> None:
    import threading
    import time

    a, b = pair
    stop = threading.Event()

    def trickle() -> None:
        a.sendall(struct.pack("!I", 100))
        while not stop.wait(0.05):
            a.sendall(b" ")

    thread = threading.Thread(target=trickle)
    thread.start()
    started = time.monotonic()
    try:
        with pytest.raises(TimeoutError):
            FrameReader(b).read(within_s=0.3)
    finally:
        stop.set()
        thread.join()
    assert time.monotonic() - started < 2


def test_a_deeply_nested_frame_is_a_protocol_error(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    body = b"[" * 100_000
    a.sendall(struct.pack("!I", len(body)) + body)
    with pytest.raises(ProtocolError, match="malformed frame"):
        FrameReader(b).read()


def test_output_that_cannot_be_written_is_a_failure(tmp_path: Path) -> None:
    import subprocess

    code = "import os\nfrom orchestrator.cli.output import flush_stdio\nprint('x' * 10)\nos._exit(flush_stdio(0))\n"
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [sys.executable, "-c", code],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": ""},
        )
    assert result.returncode == 120
    assert result.stderr == "sandboxctl: INTERNAL: cannot write the output: No space left on device\n"
