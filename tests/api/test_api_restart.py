"""`kill -9` of the service mid-flight, then a restart: asks still pending keep their deadlines, an ask
whose deadline passed while the service was down is APPROVAL.TIMEOUT, what was running is ended as
abandoned and its sandbox collected, the evidence verifies, nothing runs twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.client import Client
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.wire import ExecutionState, ExecutionView, OutputChunk
from orchestrator.evidence import END_EVENTS, iter_records, verify
from tests.support.engine import list_managed
from tests.support.service import free_port, token_of, write_config

pytestmark = pytest.mark.integration


class Served:
    def __init__(self, config: Path, port: int) -> None:
        self.config, self.port = config, port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator.cli.main",
                "serve",
                "--config",
                str(self.config),
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "SANDBOX_STATE_DIR": str(self.config.parent / "state")},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                Client(self.url, token_of("agent-a"), timeout_s=2).list(limit=1)
                return
            except SandboxUnavailable:
                time.sleep(0.1)
        raise AssertionError("the service did not start")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def served(tmp_path: Path, engine: Any) -> Iterator[Served]:
    s = Served(write_config(tmp_path, approval_timeout_s=8), free_port())
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.mark.engine_exclusive
def test_kill_9_then_restart_loses_nothing_and_runs_nothing_twice(served: Served, tmp_path: Path) -> None:
    agent, approver = Client(served.url, token_of("agent-a")), Client(served.url, token_of("approver-a"))
    survives = agent.submit({"tool": "shell_command", "command": "uname -s"})
    expires = agent.submit({"tool": "shell_command", "command": "uname -m"})
    running = agent.submit({"tool": "shell", "command": ["sleep", "60"]})
    for _ in range(100):
        if agent.get(running.execution_id).state is ExecutionState.RUNNING:
            break
        time.sleep(0.05)
    time.sleep(1.0)  # its container exists
    served.kill()
    served.start()

    # the ask is still pending, with its first deadline: approve it, and it runs once
    pending = {a.execution_id: a for a in approver.approvals().items}
    assert survives.execution_id in pending and pending[survives.execution_id].seconds_left < 8
    approver.approve(survives.execution_id)
    done = agent.get(survives.execution_id, wait=30)
    assert done.state is ExecutionState.SUCCEEDED and done.result is not None and done.result.stdout == "Linux\n"
    streamed = list(agent.stream(survives.execution_id))  # the blocking client's stream, after the end
    assert isinstance(streamed[-1], ExecutionView) and streamed[-1].state is ExecutionState.SUCCEEDED
    assert "".join(i.data for i in streamed if isinstance(i, OutputChunk)) == "Linux\n"

    # what was running is ended as abandoned, and its sandbox collected
    abandoned = agent.get(running.execution_id)
    assert abandoned.state is ExecutionState.CANCELLED and abandoned.error is not None
    for _ in range(100):
        if not [s for s in list_managed() if s.execution_id == running.execution_id]:
            break
        time.sleep(0.1)
    assert not [s for s in list_managed() if s.execution_id == running.execution_id]

    # the other ask's deadline passes while it is still pending: APPROVAL.TIMEOUT, and nothing ran
    timed_out = agent.get(expires.execution_id, wait=15)
    assert timed_out.state is ExecutionState.REFUSED and timed_out.error is not None
    assert timed_out.error.code == "APPROVAL.TIMEOUT"

    # the abandoned run has its usage row (its limits from its begin record, every measure unknown): failed
    usage = Client(served.url, token_of("admin")).profile_usage("workspace-write")
    assert (usage.groups[0].ended["failed"], usage.groups[0].ended["ok"]) == (1, 1), usage.groups[0].ended

    served.stop()
    evidence = tmp_path / "evidence.jsonl"
    report = verify(evidence)
    assert report.ok and report.complete, report.to_dict()
    started = [r.execution_id for r in iter_records(evidence, event="execution_started")]
    assert started.count(survives.execution_id) == 1 and expires.execution_id not in started
    assert started.count(running.execution_id) == 1
    # one end record each; the abandoned one's container removal is recorded apart
    ends = [r.execution_id for r in iter_records(evidence) if r.event in END_EVENTS]
    assert all(ends.count(i) == 1 for i in (survives.execution_id, expires.execution_id, running.execution_id))
    collected = [r for r in iter_records(evidence, event="sandbox_collected") if r.execution_id == running.execution_id]
    assert len(collected) == 1


@pytest.mark.engine_exclusive
def test_a_deadline_that_passed_while_down_is_a_timeout_at_start_up(served: Served) -> None:
    agent = Client(served.url, token_of("agent-a"))
    ask = agent.submit({"tool": "shell_command", "command": "uname -n"})
    served.kill()
    time.sleep(9)
    served.start()
    view = agent.get(ask.execution_id, wait=5)
    assert view.state is ExecutionState.REFUSED and view.error is not None and view.error.code == "APPROVAL.TIMEOUT"
