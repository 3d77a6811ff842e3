"""Interactive sessions on the real engine: a REPL across writes, a terminal, the ends, the evidence."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.base import SandboxBackend
from orchestrator.domain.errors import PolicyDenied, SessionLimit, SessionNotFound
from orchestrator.evidence import verify
from orchestrator.evidence.input_key import load_input_key
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles import ProfileRegistry
from orchestrator.service.sessions import SessionReply, Sessions
from tests.support.engine import answering_or_skip
from tests.support.evidence import records

ALLOW_ALL = (
    "safety:\n  mode: allow\n  denylist: [sudo]\n  rules: []\napprovals:\n  provider: rules\n  default: approved\n"
)
CANARY = "stdin-canary-7f3e9a1c"


@dataclass
class Where:
    """The backend a test's sessions run on, and a workspace that backend reaches."""

    kind: str
    workspace: Path
    # a Python expression that builds the backend (for a controller in a process of its own), and its imports
    backend_source: str
    imports: str
    config: str = ALLOW_ALL

    def backend(self) -> SandboxBackend:
        namespace: dict[str, Any] = {}
        exec(self.imports, namespace)
        backend: SandboxBackend = eval(self.backend_source, namespace)
        return backend


@pytest.fixture(
    params=[
        pytest.param("docker", marks=pytest.mark.integration),
        pytest.param("kubernetes", marks=pytest.mark.k8s),
    ]
)
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    if request.param == "docker":
        ws = tmp_path / "ws"
        ws.mkdir(exist_ok=True)
        os.chown(ws, 1000, 1000)
        return Where("docker", ws, "DockerBackend()", "from orchestrator.backends.docker import DockerBackend")
    space = request.getfixturevalue("sandbox_space")
    settings = space.settings().model_dump_json()
    return Where(
        "kubernetes",
        space.workspace(),
        f"KubernetesBackend(KubernetesSettings.model_validate_json({settings!r}))",
        "from orchestrator.backends.kubernetes.backend import KubernetesBackend\n"
        "from orchestrator.backends.kubernetes.settings import KubernetesSettings",
        # twenty sessions at once on the test's 2-cpu node
        config=ALLOW_ALL + "caps:\n  max_cpus: 0.05\n  max_memory: 256m\n",
    )


@pytest.fixture
async def sessions(where: Where, tmp_path: Path) -> AsyncIterator[Sessions]:
    backend = where.backend()
    await answering_or_skip(backend, f"{where.kind} backend")
    profiles_dir = tmp_path / "profiles"
    profiles_dir.mkdir()
    # one-shot only: no interactive shells; short: idle after 2 s
    (profiles_dir / "one-shot.yaml").write_text(
        "name: one-shot\ndescription: no shells\nextends: workspace-write\nsessions:\n  interactive_shells: false\n"
    )
    (profiles_dir / "brief.yaml").write_text(
        "name: brief\ndescription: short sessions\nextends: workspace-write\n"
        "sessions:\n  idle_timeout_s: 2\n  max_lifetime_s: 4\n"
    )
    (profiles_dir / "capped.yaml").write_text(
        "name: capped\ndescription: little output\nextends: workspace-write\nlimits:\n  stdout_max_bytes: 4k\n"
    )
    config = tmp_path / "config.yaml"
    config.write_text(where.config)
    o = build_orchestrator(
        config,
        evidence_path=tmp_path / "evidence.jsonl",
        backend=backend,
        profiles=ProfileRegistry(extra_dirs=[profiles_dir]),
    )
    s = Sessions(o, max_per_tenant=3)
    yield s
    await s.aclose()
    await o.aclose()
    report = verify(tmp_path / "evidence.jsonl")
    assert report.ok, report


@pytest.fixture
async def pooled(where: Where, tmp_path: Path) -> AsyncIterator[tuple[Sessions, Orchestrator]]:
    """Sessions with the config's pool on: a session's key is filled once a session of it ran."""
    backend = where.backend()
    await answering_or_skip(backend, f"{where.kind} backend")
    config = tmp_path / "config.yaml"
    config.write_text(where.config + "pool: {enabled: true, min_ready: 1, max_ready: 1, ttl_s: 120}\n")
    o = build_orchestrator(
        config, evidence_path=tmp_path / "evidence.jsonl", backend=backend, profiles=ProfileRegistry()
    )
    if o.pool is None:
        await o.aclose()
        pytest.skip(f"the {where.kind} backend as configured here pre-starts nothing")
    s = Sessions(o, max_per_tenant=3)
    yield s, o
    await s.aclose()
    await o.aclose()
    report = verify(tmp_path / "evidence.jsonl")
    assert report.ok, report


async def until(sessions: Sessions, reply: SessionReply, text: str, **who: Any) -> str:
    """Poll the session until ``text`` appeared in its stdout (bounded)."""
    seen = reply.stdout.decode()
    for _ in range(50):
        if text in seen:
            return seen
        more = await sessions.write(
            {"tool": "write_stdin", "session_id": reply.session_id, "yield_time_ms": 200, **who}
        )
        seen += more.stdout.decode()
    raise AssertionError(f"{text!r} never came: {seen!r}")


async def test_a_python_repl_keeps_its_state_between_writes(sessions: Sessions, where: Where, tmp_path: Path) -> None:
    opened = await sessions.open(
        {"tool": "exec_command", "cmd": "python3 -i -q", "yield_time_ms": 3000}, workspace=where.workspace
    )
    assert opened.running
    sid = opened.session_id
    await sessions.write({"tool": "write_stdin", "session_id": sid, "chars": f"x = '{CANARY}'[::-1]\n"})
    reply = await sessions.write({"tool": "write_stdin", "session_id": sid, "chars": "print(len(x), x[:6])\n"})
    out = await until(sessions, reply, "21 c1a9e3")
    assert "21 c1a9e3" in out
    closed = await sessions.close(sid, tenant="default", subject="anonymous")
    assert not closed.running and closed.closed_reason == "closed"
    kinds = [r.event for r in records(tmp_path / "evidence.jsonl", sid)]
    for kind in ("execution_started", "session_opened", "session_input", "session_output", "session_closed"):
        assert kind in kinds, kinds
    assert kinds[-1] in ("session_closed", "container_destroyed", "execution_finished")
    (end,) = [r for r in records(tmp_path / "evidence.jsonl", sid) if r.event == "execution_finished"]
    assert end.data is not None and (end.data["end_cause"], end.data["stopped_by"]) == ("cancelled", "closed")
    inputs = [r for r in records(tmp_path / "evidence.jsonl", sid) if r.event == "session_input"]
    typed = [f"x = '{CANARY}'[::-1]\n".encode(), b"print(len(x), x[:6])\n"]
    assert [r.data["bytes"] for r in inputs] == [len(t) for t in typed]
    # keyed digests: checkable with the key beside the evidence, not guessable from the records alone
    key = load_input_key(tmp_path / "evidence.jsonl")
    assert [r.data["hmac_sha256"] for r in inputs] == [hmac.new(key, t, hashlib.sha256).hexdigest() for t in typed]
    # the input is on record as sizes and digests: its content is in no file the run wrote
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


async def test_a_terminal_has_its_size_and_ctrl_c_interrupts_only_the_foreground(
    sessions: Sessions, where: Where, tmp_path: Path
) -> None:
    opened = await sessions.open(
        {"tool": "exec_command", "cmd": "bash --norc -i", "tty": True, "yield_time_ms": 1500},
        workspace=where.workspace,
    )
    sid = opened.session_id
    await sessions.resize(sid, tenant="default", subject="anonymous", rows=33, cols=101)
    reply = await sessions.write({"tool": "write_stdin", "session_id": sid, "chars": "stty size\n"})
    await until(sessions, reply, "33 101")
    reply = await sessions.write(
        {"tool": "write_stdin", "session_id": sid, "chars": "sleep 100\n", "yield_time_ms": 300}
    )
    started = time.monotonic()
    reply = await sessions.write({"tool": "write_stdin", "session_id": sid, "chars": "\x03", "yield_time_ms": 300})
    reply = await sessions.write({"tool": "write_stdin", "session_id": sid, "chars": "echo alive-$((6*7))\n"})
    await until(sessions, reply, "alive-42")
    assert time.monotonic() - started < 20
    closed = await sessions.close(sid, tenant="default", subject="anonymous")
    assert closed.closed_reason == "closed"


async def test_stdout_and_stderr_stay_apart_without_a_terminal(
    sessions: Sessions, where: Where, tmp_path: Path
) -> None:
    opened = await sessions.open(
        {"tool": "exec_command", "cmd": "read line; echo out-$line; echo err-$line >&2", "yield_time_ms": 500},
        workspace=where.workspace,
    )
    reply = await sessions.write(
        {"tool": "write_stdin", "session_id": opened.session_id, "chars": "z\n", "yield_time_ms": 5000}
    )
    got = (reply.stdout, reply.stderr)
    while reply.running:
        reply = await sessions.write({"tool": "write_stdin", "session_id": opened.session_id, "yield_time_ms": 500})
        got = (got[0] + reply.stdout, got[1] + reply.stderr)
    assert got == (b"out-z\n", b"err-z\n")
    assert reply.exit_code == 0 and reply.closed_reason == "exit"
    with pytest.raises(SessionNotFound):
        await sessions.write({"tool": "write_stdin", "session_id": opened.session_id, "chars": "late\n"})
    closing = [r for r in records(tmp_path / "evidence.jsonl", opened.session_id) if r.event == "session_closed"]
    assert [(r.data["reason"], r.data["exit_code"]) for r in closing] == [("exit", 0)]


async def test_a_session_from_the_pool_is_a_cold_sessions_equal(
    pooled: tuple[Sessions, Orchestrator], where: Where, tmp_path: Path
) -> None:
    """A session's command launched into a pre-started sandbox: its input streams as it is written (a REPL
    keeps its state), its input's end is the command's EOF, its exit is its own, what it left running is
    gone with it, and the sandbox served it alone."""
    sessions, orch = pooled
    assert orch.pool is not None
    first = await sessions.open(
        {"tool": "exec_command", "cmd": "true", "yield_time_ms": 3000}, workspace=where.workspace
    )
    assert not first.running and first.exit_code == 0  # cold: its key is filled from now on
    for _ in range(600):
        if orch.pool.describe()["ready"] >= 1:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError(f"the session's key was never filled: {orch.pool.describe()}")
    script = (
        "(sleep 300 &); python3 -i -q 2>&1; echo repl-ended-$?;"
        ' case "$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " ")" in *"sleep 30"[0]*) echo sleeper-alive;; esac;'
        " echo err-side >&2; exit 4"
    )
    opened = await sessions.open(
        {"tool": "exec_command", "cmd": script, "yield_time_ms": 500}, workspace=where.workspace
    )
    sid = opened.session_id
    assert opened.running
    await sessions.write({"tool": "write_stdin", "session_id": sid, "chars": f"x = '{CANARY}'[::-1]\n"})
    reply = await sessions.write({"tool": "write_stdin", "session_id": sid, "chars": "print(len(x), x[:6])\n"})
    out = await until(sessions, reply, "21 c1a9e3")
    await sessions.end_input(sid, tenant="default", subject="anonymous")
    reply = await sessions.write({"tool": "write_stdin", "session_id": sid, "yield_time_ms": 5000})
    got, err = out + reply.stdout.decode(), reply.stderr
    while reply.running:
        reply = await sessions.write({"tool": "write_stdin", "session_id": sid, "yield_time_ms": 500})
        got, err = got + reply.stdout.decode(), err + reply.stderr
    assert "repl-ended-0\nsleeper-alive\n" in got and err == b"err-side\n", (got, err)
    assert (reply.exit_code, reply.closed_reason) == (4, "exit")
    evidence = tmp_path / "evidence.jsonl"
    begin = next(r for r in records(evidence, sid) if r.event == "execution_started")
    assert "pooled" in (begin.data or {}), begin.data
    closing = [r for r in records(evidence, sid) if r.event == "session_closed"]
    assert [(r.data["reason"], r.data["exit_code"]) for r in closing] == [("exit", 4)]
    # the next session of the key takes another sandbox, where nothing of this one runs
    for _ in range(600):
        if orch.pool.describe()["ready"] >= 1:
            break
        await asyncio.sleep(0.05)
    check = (
        'case "$(cat /proc/[0-9]*/cmdline 2>/dev/null | tr "\\0" " ")" in *"sleep 30"[0]*) echo seen;; esac; echo done'
    )
    again = await sessions.open(
        {"tool": "exec_command", "cmd": check, "yield_time_ms": 5000}, workspace=where.workspace
    )
    out, reply = again.stdout, again
    while reply.running:
        reply = await sessions.write({"tool": "write_stdin", "session_id": again.session_id, "yield_time_ms": 500})
        out += reply.stdout
    assert (out, reply.exit_code) == (b"done\n", 0), reply
    second = next(r for r in records(evidence, again.session_id) if r.event == "execution_started")
    assert second.data["pooled"]["sandbox_id"] != begin.data["pooled"]["sandbox_id"]


async def test_an_answer_says_when_the_output_passed_its_cap(sessions: Sessions, where: Where) -> None:
    opened = await sessions.open(
        {
            "tool": "exec_command",
            "cmd": "head -c 10000 /dev/zero | tr '\\0' x; echo tail >&2; read line",
            "profile": "capped",
            "yield_time_ms": 200,
        },
        workspace=where.workspace,
    )
    assert opened.running
    reply, shown, err = opened, opened.stdout, opened.stderr
    for _ in range(50):
        if "stdout" in reply.output_capped and reply.pending_bytes == 0 and err:
            break
        reply = await sessions.write({"tool": "write_stdin", "session_id": opened.session_id, "yield_time_ms": 200})
        shown, err = shown + reply.stdout, err + reply.stderr
    # the session runs on; its stdout stops at the cap, and every answer from then on says so
    assert reply.running and reply.output_capped == ("stdout",), reply
    assert shown == b"x" * 4096 and err == b"tail\n"
    assert reply.to_wire().output_capped == ["stdout"]
    closed = await sessions.close(opened.session_id, tenant="default", subject="anonymous")
    assert closed.output_capped == ("stdout",)


async def test_idle_and_lifetime_end_a_session(sessions: Sessions, where: Where, tmp_path: Path) -> None:
    ws = where.workspace
    idle = await sessions.open(
        {"tool": "exec_command", "cmd": "cat", "profile": "brief", "yield_time_ms": 0}, workspace=ws
    )
    chatty = await sessions.open(
        {
            "tool": "exec_command",
            "cmd": "while :; do echo tick; sleep 0.5; done",
            "profile": "brief",
            "yield_time_ms": 0,
        },
        workspace=ws,
    )
    await asyncio.sleep(6)
    with pytest.raises(SessionNotFound):  # closed by its idle timeout and forgotten (nothing was pending)
        await sessions.write({"tool": "write_stdin", "session_id": idle.session_id})
    last = await sessions.write({"tool": "write_stdin", "session_id": chatty.session_id, "yield_time_ms": 0})
    while last.running:
        last = await sessions.write({"tool": "write_stdin", "session_id": chatty.session_id, "yield_time_ms": 500})
    assert last.closed_reason == "lifetime"
    reasons = {
        sid: [r.data["reason"] for r in records(tmp_path / "evidence.jsonl", sid) if r.event == "session_closed"]
        for sid in (idle.session_id, chatty.session_id)
    }
    assert reasons == {idle.session_id: ["idle"], chatty.session_id: ["lifetime"]}
    causes = {  # their usage says the same: stopped at a session's limits, never a command's own exit (137)
        sid: [r.data["end_cause"] for r in records(tmp_path / "evidence.jsonl", sid) if r.event == "execution_finished"]
        for sid in (idle.session_id, chatty.session_id)
    }
    assert causes == {idle.session_id: ["idle_timeout"], chatty.session_id: ["wall_timeout"]}


@pytest.mark.long_on_kubernetes  # make test's 15 minutes: on the cluster, in make test-long
async def test_sessions_are_their_owners_and_limited_per_tenant(
    sessions: Sessions, where: Where, tmp_path: Path
) -> None:
    ws = where.workspace
    opened = [
        await sessions.open({"tool": "exec_command", "cmd": "cat", "tenant": "t1", "yield_time_ms": 0}, workspace=ws)
        for _ in range(3)
    ]
    with pytest.raises(SessionLimit):
        await sessions.open({"tool": "exec_command", "cmd": "cat", "tenant": "t1", "yield_time_ms": 0}, workspace=ws)
    with pytest.raises(SessionNotFound):  # another tenant never finds it
        await sessions.write({"tool": "write_stdin", "session_id": opened[0].session_id, "tenant": "t2", "chars": "x"})
    for reply in opened:
        await sessions.close(reply.session_id, tenant="t1", subject="anonymous")
    assert sessions.list(tenant="t1", subject="anonymous") == []


@pytest.mark.long_on_kubernetes  # make test's 15 minutes: on the cluster, in make test-long
async def test_a_profile_can_forbid_interactive_shells(sessions: Sessions, where: Where, tmp_path: Path) -> None:
    ws = where.workspace
    for cmd in ("bash", "python3", "cd /workspace && sh -i"):
        with pytest.raises(PolicyDenied, match="interactive shell"):
            await sessions.open({"tool": "exec_command", "cmd": cmd, "profile": "one-shot"}, workspace=ws)
    reply = await sessions.open(
        {"tool": "exec_command", "cmd": "python3 -c 'print(6*7)'", "profile": "one-shot", "yield_time_ms": 5000},
        workspace=ws,
    )
    out = reply.stdout
    while reply.running:  # the answer may come once the output settled, before the exit
        reply = await sessions.write({"tool": "write_stdin", "session_id": reply.session_id, "yield_time_ms": 1000})
        out += reply.stdout
    assert out == b"42\n" and reply.exit_code == 0 and reply.closed_reason == "exit"


@pytest.mark.integration
def test_sandboxctl_session_attaches_a_terminal_with_its_size(tmp_path: Path) -> None:
    """`sandboxctl session` under a real pseudo-terminal: raw mode, the window size, the exit status."""
    import fcntl
    import pty
    import select
    import struct
    import subprocess
    import sys
    import termios

    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    config = tmp_path / "config.yaml"
    config.write_text(ALLOW_ALL)
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 41, 127, 0, 0))
    argv = [sys.executable, "-m", "orchestrator.cli.main", "session", "--config", str(config), "--workspace", str(ws)]
    argv += ["--evidence", str(tmp_path / "evidence.jsonl"), "--shell", "bash --norc -i"]
    proc = subprocess.Popen(argv, stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True)
    os.close(terminal)
    seen = b""

    def read_until(text: bytes, timeout: float = 30) -> None:
        nonlocal seen
        deadline = time.monotonic() + timeout
        while text not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(controller, 4096)
                except OSError:  # the other side closed
                    break
        assert text in seen, seen[-2000:]

    try:
        os.write(controller, b"stty size\n")  # typed ahead, before the session is open: kept, like docker run -it
        read_until(b"41 127")
        os.write(controller, b"sleep 100\n")
        time.sleep(1)
        os.write(controller, b"\x03")  # raw mode: Ctrl-C reaches the sandbox's foreground process
        os.write(controller, b"echo after-$((6*7))\n")
        read_until(b"after-42")
        os.write(controller, b"exit 7\n")
        assert proc.wait(timeout=60) == 7
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(controller)
    assert verify(tmp_path / "evidence.jsonl").ok


@pytest.mark.long_on_kubernetes  # make test's 15 minutes: on the cluster, in make test-long
async def test_twenty_sessions_at_once_each_gets_only_its_own_input(
    sessions: Sessions, where: Where, tmp_path: Path
) -> None:
    sessions.max_per_tenant = 20
    ws = where.workspace
    opened = await asyncio.gather(
        *(sessions.open({"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0}, workspace=ws) for _ in range(20))
    )
    ids = [reply.session_id for reply in opened]
    assert len(set(ids)) == 20

    async def converse(index: int, sid: str) -> str:
        got = ""
        for turn in range(5):
            chars = f"s{index}-t{turn}\n"
            reply = await sessions.write(
                {"tool": "write_stdin", "session_id": sid, "chars": chars, "yield_time_ms": 5000, "max_output_bytes": 8}
            )
            got += reply.stdout.decode()
            while not got.endswith(chars):
                more = await sessions.write({"tool": "write_stdin", "session_id": sid, "yield_time_ms": 1000})
                got += more.stdout.decode()
        return got

    talks = await asyncio.gather(*(converse(i, sid) for i, sid in enumerate(ids)))
    assert talks == ["".join(f"s{i}-t{t}\n" for t in range(5)) for i in range(20)]
    await asyncio.gather(*(sessions.close(sid, tenant="default", subject="anonymous") for sid in ids))
    backend = sessions.orchestrator.backend
    assert backend is not None
    left = [s.name for s in await backend.list_managed() if s.execution_id in set(ids)]
    assert left == []


@pytest.mark.engine_exclusive
def test_a_killed_controller_leaves_its_session_to_the_orphan_collector(where: Where, tmp_path: Path) -> None:
    """The process holding a session is killed outright: its sandbox is collected, on the record."""
    import signal
    import subprocess
    import sys

    ws = where.workspace
    config = tmp_path / "config.yaml"
    config.write_text(where.config)
    evidence = tmp_path / "evidence.jsonl"
    holder = f"""
import asyncio, sys
from pathlib import Path
{where.imports}
from orchestrator.profiles import ProfileRegistry
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.service.sessions import Sessions

async def main():
    o = build_orchestrator(Path({str(config)!r}), evidence_path=Path({str(evidence)!r}), backend={where.backend_source},
                           profiles=ProfileRegistry())
    s = Sessions(o)
    reply = await s.open({{"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0}}, workspace=Path({str(ws)!r}))
    await o.evidence.flush()
    print(reply.session_id, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        session_id = proc.stdout.readline().strip()
        assert session_id.startswith("ex-"), session_id
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    async def collect() -> list[str]:
        from orchestrator.evidence import EvidenceWriter
        from orchestrator.pipeline.reaper import collect_orphans

        backend = where.backend()
        writer = EvidenceWriter(evidence)
        try:
            reaped = await collect_orphans(backend, writer)
            left = [s.name for s in await backend.list_managed() if s.execution_id == session_id]
            assert left == []
            return [r.sandbox.execution_id or "" for r in reaped]
        finally:
            await writer.close()
            await backend.close()

    assert session_id in asyncio.run(collect())
    kinds = [r.event for r in records(tmp_path / "evidence.jsonl", session_id)]
    assert "session_opened" in kinds and kinds[-1] == "execution_abandoned", kinds
    assert verify(evidence).ok


async def test_a_session_that_ends_unwatched_is_recorded_and_forgotten(
    sessions: Sessions, where: Where, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.service import sessions as sessions_module

    monkeypatch.setattr(sessions_module, "FORGET_AFTER_S", 1.0)
    opened = await sessions.open(
        {"tool": "exec_command", "cmd": "sleep 0.5; echo bye", "yield_time_ms": 0}, workspace=where.workspace
    )
    sid = opened.session_id
    for _ in range(100):  # nobody polls: its end is on the record all the same, then it is forgotten
        await asyncio.sleep(0.1)
        if sessions.owner(sid) is None:
            break
    assert sessions.owner(sid) is None
    await sessions.orchestrator.evidence.flush()
    closing = [r.data for r in records(tmp_path / "evidence.jsonl", sid) if r.event == "session_closed"]
    assert closing == [{"reason": "exit", "exit_code": 0}]


async def test_opens_racing_each_other_cannot_pass_the_limit(sessions: Sessions, where: Where, tmp_path: Path) -> None:
    sessions.max_per_tenant = 2
    ws = where.workspace
    results = await asyncio.gather(
        *(sessions.open({"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0}, workspace=ws) for _ in range(5)),
        return_exceptions=True,
    )
    opened = [r for r in results if isinstance(r, SessionReply)]
    assert len(opened) == 2 and sum(isinstance(r, SessionLimit) for r in results) == 3
    for reply in opened:
        await sessions.close(reply.session_id, tenant="default", subject="anonymous")


@pytest.mark.k8s
async def test_a_copy_mode_session_takes_its_workspace_in_and_back(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Kubernetes with the workspace copied: what the session's command wrote comes back once it exited."""
    from orchestrator.backends.kubernetes.backend import KubernetesBackend
    from orchestrator.backends.kubernetes.settings import WorkspaceDelivery

    space = request.getfixturevalue("sandbox_space")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "in.txt").write_text("from the controller\n")
    os.chown(ws, 1000, 1000)
    os.chown(ws / "in.txt", 1000, 1000)
    backend = KubernetesBackend(space.settings(workspace=WorkspaceDelivery(mode="copy", copy_max_bytes=1 << 20)))
    config = tmp_path / "config.yaml"
    config.write_text(ALLOW_ALL + "caps:\n  max_cpus: 0.05\n")
    o = build_orchestrator(
        config, evidence_path=tmp_path / "evidence.jsonl", backend=backend, profiles=ProfileRegistry()
    )
    s = Sessions(o)
    try:
        opened = await s.open(
            {"tool": "exec_command", "cmd": 'read line; cat in.txt; echo "$line" > out.txt', "yield_time_ms": 0},
            workspace=ws,
        )
        reply = await s.write(
            {"tool": "write_stdin", "session_id": opened.session_id, "chars": "typed\n", "yield_time_ms": 5000}
        )
        out = reply.stdout
        while reply.running:
            reply = await s.write({"tool": "write_stdin", "session_id": opened.session_id, "yield_time_ms": 1000})
            out += reply.stdout
        assert (out, reply.exit_code, reply.closed_reason) == (b"from the controller\n", 0, "exit")
        assert (ws / "out.txt").read_text() == "typed\n"
    finally:
        await s.aclose()
        await o.aclose()
    assert verify(tmp_path / "evidence.jsonl").ok
