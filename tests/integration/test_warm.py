"""The warm server on a real engine: a command forked from it is the same `sandboxctl` as a cold start
(streams, exit status, working directory, environment, evidence), signals reach it, a client killed
with SIGKILL ends its command with the sandbox removed, and anything the server cannot honour runs
cold instead of wrong."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.evidence import iter_records, verify
from tests.support.engine import list_managed
from tests.support.images import SANDBOX_UID

pytestmark = pytest.mark.integration

SANDBOXCTL = str(Path(sys.executable).with_name("sandboxctl"))
BOUND_S = 60.0  # a hang is what these catch, not slowness

CONFIG = """\
safety:
  allowlist: ["sleep", "true"]
approvals:
  provider: rules
  default: approved  # these tests are about the way in, not about the policy
"""


@dataclass
class Warm:
    state: Path  # the server's state dir: short, AF_UNIX paths are limited to 107 bytes
    workspace: Path
    config: Path
    evidence: Path
    env: dict[str, str]

    def cli(self, *args: str, env: dict[str, str] | None = None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        kwargs.setdefault("cwd", self.workspace)
        return subprocess.run(
            [SANDBOXCTL, *args], capture_output=True, text=True, timeout=BOUND_S, env=env or self.env, **kwargs
        )

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [SANDBOXCTL, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.workspace,
        )

    def status(self) -> dict[str, Any]:
        out = self.cli("warm", "status", "--json")
        return dict(json.loads(out.stdout))

    def run_args(self, *argv: str) -> list[str]:
        return ["run", "--config", str(self.config), "--", *argv]


def _start(state: Path) -> Warm:
    workspace = state / "ws"
    workspace.mkdir()
    os.chown(workspace, SANDBOX_UID, SANDBOX_UID)  # the sandbox user owns its workspace
    config = state / "config.yaml"
    config.write_text(CONFIG)
    evidence = state / "evidence.jsonl"
    env = {**os.environ, "SANDBOX_STATE_DIR": str(state), "SANDBOX_EVIDENCE_PATH": str(evidence)}
    env.pop("SANDBOXCTL_WARM", None)
    warm = Warm(state, workspace, config, evidence, env)
    started = warm.cli("warm", "start")
    assert started.returncode == 0, started.stderr
    assert warm.status()["running"] is True
    return warm


def _stop(warm: Warm) -> None:
    warm.cli("warm", "stop")
    shutil.rmtree(warm.state, ignore_errors=True)


@pytest.fixture
def warm(run_sandboxes: Any) -> Iterator[Warm]:
    state = Path(tempfile.mkdtemp(prefix="warm-", dir="/tmp"))
    server = _start(state)
    try:
        yield server
    finally:
        for record in iter_records(server.evidence) if server.evidence.exists() else ():
            if record.execution_id:
                run_sandboxes.add(record.execution_id)
        _stop(server)


def _served(warm: Warm) -> int:
    return int(warm.status()["served"])


def _started_execution(warm: Warm, timeout: float = BOUND_S) -> str:
    """The execution id of the sandbox the running command started, once its container runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if warm.evidence.exists():
            started = [r.execution_id for r in iter_records(warm.evidence, event="execution_started")]
            running = {s.execution_id for s in list_managed() if s.state == "running"}
            for execution_id in started:
                if execution_id in running:
                    return str(execution_id)
        time.sleep(0.1)
    raise AssertionError(f"no running sandbox within {timeout:g}s")


def _events(warm: Warm, execution_id: str) -> list[str]:
    return [r.event for r in iter_records(warm.evidence, execution_id=execution_id)]


# -- the same command, warm and cold ---------------------------------------------------------------------


def test_a_warm_run_is_the_same_command_as_a_cold_one(warm: Warm) -> None:
    script = 'pwd; echo "out"; echo "err" >&2; touch made-here; exit 3'
    args = [*warm.run_args("sh", "-c", script)]
    before = _served(warm)
    hot = warm.cli(*args)
    assert _served(warm) == before + 1, "the warm server did not take the command"
    cold = warm.cli(*args, env={**warm.env, "SANDBOXCTL_WARM": "0"})
    assert _served(warm) == before + 1
    for result in (hot, cold):
        assert result.returncode == 3, result.stderr
        assert result.stdout == "/workspace\nout\n"
        assert result.stderr == "err\n"
    # the working directory is the caller's: it is the default workspace
    assert (warm.workspace / "made-here").exists()
    assert verify(warm.evidence).ok
    finished = list(iter_records(warm.evidence, event="execution_finished"))
    assert [r.status for r in finished] == ["failed", "failed"]
    assert finished[0].data is not None and finished[1].data is not None
    assert finished[0].data["side_effects"]["created"][0]["path"] == "made-here"


def test_a_warm_run_json_has_the_cold_shape(warm: Warm) -> None:
    args = ["run", "--json", "--config", str(warm.config), "--", "true"]
    before = _served(warm)
    hot = warm.cli(*args)
    assert _served(warm) == before + 1
    cold = warm.cli(*args, env={**warm.env, "SANDBOXCTL_WARM": "0"})
    assert _served(warm) == before + 1
    assert (hot.returncode, cold.returncode) == (0, 0), hot.stderr + cold.stderr
    hot_out, cold_out = json.loads(hot.stdout), json.loads(cold.stdout)
    assert set(hot_out) == set(cold_out)
    assert hot_out["ok"] is True and hot_out["decision"] == "allow"
    assert hot_out["execution_id"] != cold_out["execution_id"]


def test_the_callers_environment_is_the_commands(warm: Warm) -> None:
    # SANDBOX_EVIDENCE_PATH is read by the forked worker from the client's environment
    other = warm.state / "other-evidence.jsonl"
    before = _served(warm)
    result = warm.cli(*warm.run_args("true"), env={**warm.env, "SANDBOX_EVIDENCE_PATH": str(other)})
    assert result.returncode == 0, result.stderr
    assert _served(warm) == before + 1
    assert other.exists() and verify(other).ok
    assert [r.event for r in iter_records(other)][-1] == "execution_finished"
    assert not warm.evidence.exists()


def test_a_usage_error_is_reported_by_the_worker_like_a_cold_start(warm: Warm) -> None:
    before = _served(warm)
    result = warm.cli("run", "--timeout")
    assert result.returncode == 2
    assert "sandboxctl: INPUT.INVALID:" in result.stderr
    assert _served(warm) == before + 1


# -- signals and a vanished client -----------------------------------------------------------------------


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_to_the_client_reaches_the_command(warm: Warm, signame: str) -> None:
    before = _served(warm)
    proc = warm.popen(*warm.run_args("sleep", "60"))
    try:
        execution_id = _started_execution(warm)
        proc.send_signal(getattr(signal, signame))
        _, stderr = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert _served(warm) == before + 1
    assert stderr.startswith("sandboxctl: EXECUTION.CANCELLED"), stderr
    assert "Traceback" not in stderr
    assert not [s for s in list_managed() if s.execution_id == execution_id]
    (failed,) = iter_records(warm.evidence, execution_id=execution_id, event="run_failed")
    assert failed.error_code == "EXECUTION.CANCELLED"
    assert "container_destroyed" in _events(warm, execution_id)
    assert verify(warm.evidence).ok


def test_a_sigkilled_client_ends_its_command_and_the_sandbox_goes(warm: Warm) -> None:
    """Unlike a cold start killed so (its sandbox stays until the next start collects it), the worker
    sees its client vanish and cancels at once."""
    proc = warm.popen(*warm.run_args("sleep", "60"))
    try:
        execution_id = _started_execution(warm)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline and "run_failed" not in _events(warm, execution_id):
        time.sleep(0.1)
    (failed,) = iter_records(warm.evidence, execution_id=execution_id, event="run_failed")
    assert failed.error_code == "EXECUTION.CANCELLED"
    assert not [s for s in list_managed() if s.execution_id == execution_id]
    assert verify(warm.evidence).ok
    while time.monotonic() < deadline and warm.status()["active"]:  # the worker exits after its record
        time.sleep(0.05)
    assert warm.status()["active"] == 0


# -- what the server must not serve ------------------------------------------------------------------------


def test_another_python_environment_runs_cold(warm: Warm) -> None:
    before = _served(warm)
    result = warm.cli(*warm.run_args("true"), env={**warm.env, "PYTHONHASHSEED": "123"})
    assert result.returncode == 0, result.stderr
    assert _served(warm) == before


def test_another_user_is_not_served(warm: Warm) -> None:
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.getuid() != 0:
        pytest.skip("needs root and setpriv to act as another user")
    # open the way to the socket on purpose: the server itself must refuse the stranger
    warm.state.chmod(0o755)
    socket_file = str(warm.state / "warm.sock")
    Path(socket_file).chmod(0o666)
    # the server may hang up before the request is even sent (EPIPE) or after (reset, or end of stream)
    code = (
        "import socket, sys\n"
        "from orchestrator.cli.warm.protocol import FrameReader, send_frame\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        "try:\n"
        "    send_frame(s, {'op': 'status'})\n"
        "    print(FrameReader(s).read())\n"
        "except (BrokenPipeError, ConnectionResetError):\n"
        "    print(None)\n"
    )
    stranger = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code, socket_file],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        env={**warm.env, "HOME": "/nonexistent"},
        cwd="/",
    )
    assert stranger.returncode == 0, stranger.stderr
    assert stranger.stdout.strip() == "None"  # closed without a word
    assert "refused a connection from uid 65534" in (warm.state / "warm.log").read_text()


@pytest.mark.parametrize(
    ("wrapper", "reason"),
    [
        # what a sandboxed process of the same uid would be
        (["unshare", "--mount", "--uts"], "the caller's ns/"),
        (["setpriv", "--groups=4242"], "the caller's Groups differs"),
    ],
    ids=["other-namespaces", "other-groups"],
)
def test_a_caller_with_other_credentials_or_confinement_runs_cold(warm: Warm, wrapper: list[str], reason: str) -> None:
    tool = shutil.which(wrapper[0])
    if tool is None or os.getuid() != 0:
        pytest.skip(f"needs root and {wrapper[0]}")
    before = _served(warm)
    result = subprocess.run(
        [tool, *wrapper[1:], SANDBOXCTL, "--version"],
        capture_output=True,
        text=True,
        timeout=BOUND_S,
        env=warm.env,
        cwd=warm.workspace,
    )
    assert result.returncode == 0 and result.stdout == "sandboxctl 0.1.0\n", result.stderr
    assert _served(warm) == before
    assert f"refused a connection: {reason}" in (warm.state / "warm.log").read_text()


def test_a_workspace_holding_the_state_is_refused(warm: Warm) -> None:
    """A sandbox must never reach the warm socket, the approval queue or the evidence file."""
    result = warm.cli("run", "--json", "--config", str(warm.config), "--workspace", str(warm.state), "--", "true")
    assert result.returncode == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "INPUT.INVALID"
    assert "own state" in error["message"]


def test_a_queue_db_inside_the_workspace_is_refused(warm: Warm) -> None:
    """A sandbox must not be able to answer the approval queue (a relative path counts from the config's
    directory, not from the caller's)."""
    config = warm.state / "queue.yaml"
    queue = os.path.relpath(warm.workspace / "approvals.db", warm.state)
    config.write_text(f"approvals:\n  provider: queue\n  queue_path: {queue}\n")
    result = warm.cli("run", "--json", "--config", str(config), "--", "true")
    assert result.returncode == 2, result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "INPUT.INVALID"
    assert str(warm.workspace / "approvals.db") in error["message"]


def test_a_listener_in_other_namespaces_gets_nothing_from_a_client(warm: Warm) -> None:
    """What a sandbox of the caller's uid that planted a socket would be: the client sends it nothing
    (no environment, no descriptors) and runs cold."""
    unshare = shutil.which("unshare")
    if unshare is None or os.getuid() != 0:
        pytest.skip("needs root and unshare")
    state = warm.state / "planted"
    state.mkdir(mode=0o700)
    sock = state / "warm.sock"
    listener_code = (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1)\n"
        "print('ready', flush=True)\n"
        "c, _ = s.accept(); c.settimeout(10)\n"
        "print(repr(c.recv(65536)), flush=True)\n"
    )
    listener = subprocess.Popen(
        [unshare, "--mount", "--uts", sys.executable, "-c", listener_code, str(sock)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert listener.stdout is not None and listener.stdout.readline().strip() == "ready"
        result = warm.cli(
            *warm.run_args("true"), env={**warm.env, "SANDBOX_STATE_DIR": str(state), "SECRET_VALUE": "hunter2"}
        )
        received, _ = listener.communicate(timeout=BOUND_S)
    finally:
        if listener.poll() is None:
            listener.kill()
    assert result.returncode == 0, result.stderr  # ran cold
    assert received.strip() == "b''"  # connected, checked, closed: not a byte sent


def test_an_ignored_hangup_stays_ignored(warm: Warm) -> None:
    """nohup: the caller ignores SIGHUP, and so does its command (warm as cold)."""
    for cold in (False, True):
        evidence = warm.state / f"hangup-{cold}.jsonl"
        env = {**warm.env, "SANDBOX_EVIDENCE_PATH": str(evidence), **({"SANDBOXCTL_WARM": "0"} if cold else {})}
        before = _served(warm)
        proc = subprocess.Popen(
            [SANDBOXCTL, *warm.run_args("sleep", "4")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=warm.workspace,
            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),  # noqa: PLW1509
        )
        try:
            deadline = time.monotonic() + BOUND_S
            while time.monotonic() < deadline and not (
                evidence.exists() and list(iter_records(evidence, event="execution_started"))
            ):
                time.sleep(0.05)
            proc.send_signal(signal.SIGHUP)
            _, stderr = proc.communicate(timeout=BOUND_S)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 0, stderr
        assert _served(warm) == before + (0 if cold else 1)
        (finished,) = iter_records(evidence, event="execution_finished")
        assert finished.status == "succeeded"


def test_changed_code_stops_the_server_and_runs_cold(warm: Warm) -> None:
    import orchestrator.cli.warm as package

    marker = Path(package.__file__)
    st = marker.stat()
    try:
        os.utime(marker, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        result = warm.cli("--version")
    finally:
        os.utime(marker, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert result.returncode == 0 and result.stdout == "sandboxctl 0.1.0\n", result.stderr
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline and warm.status()["running"]:
        time.sleep(0.1)
    assert warm.status()["running"] is False
    assert "stale" in (warm.state / "warm.log").read_text()


def test_start_is_idempotent_and_stop_lets_commands_run_cold(warm: Warm) -> None:
    pid = warm.status()["pid"]
    again = warm.cli("warm", "start")
    assert again.returncode == 0 and f"already running: pid {pid}" in again.stdout
    stopped = warm.cli("warm", "stop")
    assert stopped.returncode == 0 and f"pid {pid}" in stopped.stdout
    assert warm.status()["running"] is False
    assert warm.cli("warm", "status").returncode == 1
    result = warm.cli(*warm.run_args("true"))
    assert result.returncode == 0, result.stderr
    assert not (warm.state / "warm.sock").exists()


def test_a_terminal_on_stdin_runs_cold_and_its_prompt_works(warm: Warm) -> None:
    """Job control and the approval prompt belong to the terminal's foreground job: with a terminal on
    stdin the command runs in the caller's own process."""
    import pty
    import select

    config = warm.state / "terminal.yaml"
    config.write_text("approvals:\n  provider: terminal\n")
    before = _served(warm)
    pid, fd = pty.fork()
    if pid == 0:  # the client, with the pty as its terminal and stdin
        os.chdir(warm.workspace)
        os.execve(SANDBOXCTL, ["sandboxctl", "run", "--config", str(config), "--", "sh", "-c", "echo ran"], warm.env)
    seen, answered = b"", False
    deadline = time.monotonic() + BOUND_S
    try:
        while time.monotonic() < deadline:
            if not select.select([fd], [], [], 0.2)[0]:
                continue
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the pty closes when the client exits
                break
            if not chunk:
                break
            seen += chunk
            if b"Approve?" in seen and not answered:
                os.write(fd, b"y\n")
                answered = True
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    assert answered, seen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, seen.decode(errors="replace")
    assert seen.replace(b"\r\n", b"\n").endswith(b"ran\n")
    assert _served(warm) == before
    (decided,) = iter_records(warm.evidence, event="approval_decided")
    assert decided.approver is not None and decided.approver.startswith("terminal:")


def test_the_worker_takes_the_callers_resource_limits(warm: Warm) -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(321, soft)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))

    proc = subprocess.Popen(
        [SANDBOXCTL, *warm.run_args("sleep", "60")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=warm.env,
        cwd=warm.workspace,
        preexec_fn=limited,  # noqa: PLW1509 - the caller's ulimit -n, set in the caller only
    )
    try:
        execution_id = _started_execution(warm)
        (sandbox,) = [s for s in list_managed() if s.execution_id == execution_id]
        worker = int((sandbox.owner or "").split(":")[1])
        assert worker != proc.pid  # the sandbox's owner is the forked worker
        limits = Path(f"/proc/{worker}/limits").read_text()
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        assert line.split()[3] == str(wanted), line
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130


def test_a_client_that_never_says_go_runs_nothing(warm: Warm) -> None:
    """Accepted is not yet running: a client that gives up (and runs cold) after "accepted" must not
    get its command run twice."""
    import socket

    from orchestrator.cli.warm.protocol import FrameReader, send_frame

    marker = warm.workspace / "ran-twice"
    before = _served(warm)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cwd = os.open(warm.workspace, os.O_RDONLY | os.O_DIRECTORY)
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        conn.connect(str(warm.state / "warm.sock"))
        request = {
            "op": "run",
            "argv": [*warm.run_args("sh", "-c", f"touch {marker.name}")],
            "env": warm.env,
            "executable": sys.executable,
            "umask": 0o022,
            "rlimits": {},
            "ignored_signals": [],
        }
        send_frame(conn, request, [devnull, devnull, devnull, cwd])
        reply = FrameReader(conn).read(within_s=BOUND_S)
        assert reply is not None and reply[0].get("accepted") is True
    finally:
        conn.close()  # instead of go
        os.close(cwd)
        os.close(devnull)
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline and warm.status()["active"]:
        time.sleep(0.05)
    assert warm.status()["active"] == 0
    assert _served(warm) == before
    assert not marker.exists()
    assert not warm.evidence.exists()


def test_stop_waits_for_running_commands(warm: Warm) -> None:
    proc = warm.popen(*warm.run_args("sleep", "10"))  # still running when stop comes, even on a loaded machine
    try:
        _started_execution(warm)
        stopped = warm.cli("warm", "stop")
        assert stopped.returncode == 0
        assert warm.status()["running"] is False  # no new command is taken
        _, stderr = proc.communicate(timeout=BOUND_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    log = (warm.state / "warm.log").read_text()
    assert "waiting for 1 running command(s)" in log
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline and "stopped after 1 commands" not in log:
        time.sleep(0.05)
        log = (warm.state / "warm.log").read_text()
    assert "stopped after 1 commands" in log


# -- what governs later commands ----------------------------------------------------------------------------


def _refused(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "INPUT.INVALID"
    for needle in needles:
        assert needle in error["message"], error["message"]
    assert "Traceback" not in result.stderr


def test_what_governs_later_commands_is_refused_within_a_sandboxs_reach_warm_and_cold(warm: Warm) -> None:
    """A command the policy allows replaces a root-owned 0644 file in its workspace (write + rename:
    only the directory needs to be writable); so a policy file, a link on the way to one, or a profiles
    directory in the workspace would let one run choose the next run's policy or isolation. Refused —
    by a warm worker (which reads the files afresh for each command) as by a cold start — before
    anything is decided or run, naming the file."""
    ws = warm.workspace
    planted = ws / "policy.yaml"
    planted.write_text(CONFIG)
    os.chown(planted, 0, 0)
    planted.chmod(0o644)
    swap = warm.cli(*warm.run_args("sh", "-c", "printf 'safety: {mode: allow}\\n' > .p && mv .p policy.yaml"))
    assert swap.returncode == 0, swap.stderr
    assert planted.read_text() == "safety: {mode: allow}\n"  # the sandbox rewrote it
    assert planted.stat().st_uid == SANDBOX_UID

    conf = warm.state / "conf"
    conf.mkdir()
    (conf / "policy.yaml").write_text(CONFIG)
    (ws / "conf").symlink_to(conf)
    profiles = ws / "profiles"
    profiles.mkdir()
    (profiles / "untrusted.yaml").write_text("extends: workspace-write\n")  # gVisor gone, if it were used
    cases = [
        (["--config", str(planted)], {}, [f"the policy file (--config) {planted}", "lies in the workspace"]),
        (["--config", str(ws / "conf" / "policy.yaml")], {}, [f"the symbolic link {ws / 'conf'}"]),
        (["--config", str(warm.config)], {"SANDBOX_PROFILES_PATH": str(profiles)}, [f"profiles directory {profiles}"]),
    ]  # fmt: skip
    records_before = len(list(iter_records(warm.evidence)))
    for args, env, needles in cases:
        for cold in (False, True):
            before = _served(warm)
            result = warm.cli(
                "run", "--json", *args, "--profile", "untrusted", "--", "true",
                env={**warm.env, **env, **({"SANDBOXCTL_WARM": "0"} if cold else {})},
            )  # fmt: skip
            _refused(result, *needles)
            assert _served(warm) == before + (0 if cold else 1)
    assert len(list(iter_records(warm.evidence))) == records_before  # nothing was decided, nothing ran
