"""A pre-started Docker sandbox's end from its init's status channel (backends/docker/status_pipe.py), on the
real engine: the run is answered from the init's report, the engine's own account follows as the
confirmation and agrees, the command can neither see nor reach the channel, an OOM kill and a killed init
still end right, and nothing of the channel is left on the host."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends._support.labels import sandbox_name
from orchestrator.backends.docker.backend import STATUS_SUBDIR
from orchestrator.backends.docker.endpoint import discover_endpoint
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.statedir import state_dir
from orchestrator.evidence import verify
from orchestrator.pipeline.executor import CONFIRMATION_FOLLOWS
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from tests.integration.test_pool import pooled_orchestrator, until_ready, workspace
from tests.support.containment import processes_mentioning
from tests.support.evidence import records

pytestmark = pytest.mark.integration


@pytest.fixture
async def orch(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    o = await pooled_orchestrator(tmp_path, "{enabled: true, per_key: 1, ttl_s: 60}")
    yield o
    await o.aclose()
    assert verify(tmp_path / "evidence.jsonl").ok


def run_records(tmp_path: Path, result: ExecutionResult) -> list[Any]:
    return list(records(tmp_path / "evidence.jsonl", str(result.authorization.execution_id)))


def end_of(tmp_path: Path, result: ExecutionResult) -> Any:
    (end,) = [r for r in run_records(tmp_path, result) if r.event in ("execution_finished", "run_failed")]
    return end


async def pooled_run(orch: Orchestrator, ws: Path, command: str) -> ExecutionResult:
    raw = {"tool": "shell_command", "command": command}
    assert orch.prestart(raw, workspace=ws)
    await until_ready(orch)
    result = await orch.execute(raw, workspace=ws)
    await orch.settle()  # the engine's account and the removal, after the answer
    return result


async def test_the_end_comes_from_the_init_and_the_engine_confirms_it(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    # the pipe's name is gone before the command runs; the init's descriptors are out of its reach
    script = (
        "[ -e /run/sandbox-status/status ] && echo pipe-there; [ -d /run/sandbox-status ] && echo dir-there;"
        " cat /proc/1/fd/3 2>/dev/null && echo reached; exit 5"
    )
    result = await pooled_run(orch, ws, script)
    out = result.to_json()
    assert (out["exit_code"], out["stdout"]) == (5, "dir-there\n"), out  # the directory is, its pipe's name is gone
    end = end_of(tmp_path, result)
    assert end.data["lifecycle_stream"] == CONFIRMATION_FOLLOWS, end.data
    usage = end.data["usage"]
    assert usage["memory_peak_bytes"] and usage["pids_peak"], usage
    events = [r.event for r in run_records(tmp_path, result)]
    # the engine's own end, as it came (often while the answer was being written), agreeing (no
    # end_unconfirmed); the removal after the end record
    assert "container_died" in events and events.index("execution_finished") < events.index("container_destroyed")
    assert "end_unconfirmed" not in events
    died = next(r for r in run_records(tmp_path, result) if r.event == "container_died")
    assert died.data["exit_code"] == 5
    begin = next(r for r in run_records(tmp_path, result) if r.event == "execution_started")
    pipe_dir = Path(state_dir()) / STATUS_SUBDIR / sandbox_name(begin.data["pooled"]["pool_id"])
    assert not pipe_dir.exists()  # removed with the sandbox


async def test_an_oom_kill_is_reported_as_one(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    hog = "x = []\nwhile True: x.append(bytearray(64 << 20))"
    result = await pooled_run(orch, ws, f"python3 -c '{hog}'")
    out = result.to_json()
    assert out["error"]["code"] == "SANDBOX.OOM", out
    events = [r.event for r in run_records(tmp_path, result)]
    assert "end_unconfirmed" not in events, events


async def test_a_killed_init_ends_the_run_from_the_engines_account(orch: Orchestrator, tmp_path: Path) -> None:
    """No report (the init SIGKILLed from the host): the engine's 137, never a success, never a hang."""
    ws = workspace(tmp_path)
    raw = {"tool": "shell_command", "command": "echo up; sleep 300"}
    assert orch.prestart(raw, workspace=ws)
    await until_ready(orch)
    task = asyncio.ensure_future(orch.execute(raw, workspace=ws))
    init = 0
    async with asyncio.timeout(30):
        while not init:  # the claimed sandbox's init (this host sees it: runc)
            for entry in os.listdir("/proc"):
                if entry.isdigit() and _is_init_of_a_run(int(entry)):
                    init = int(entry)
            await asyncio.sleep(0.05)
    os.kill(init, signal.SIGKILL)
    async with asyncio.timeout(60):
        result = await task
    await orch.settle()
    out = result.to_json()
    assert out["exit_code"] == 137 and not out["ok"], out
    assert end_of(tmp_path, result).data["lifecycle_stream"] != CONFIRMATION_FOLLOWS


def _is_init_of_a_run(pid: int) -> bool:
    """A sandbox-init supervising a `sleep 300` (its launched command: the init stays PID 1 with a channel)."""
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() != "sandbox-init":
            return False
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return any("sleep" in Path(f"/proc/{c}/cmdline").read_bytes().decode(errors="replace") for c in children)
    except OSError:
        return False


async def test_a_stop_from_outside_is_never_the_commands_success(orch: Orchestrator, tmp_path: Path) -> None:
    """`docker stop` by someone else (not the controller): the init forwards the SIGTERM and reports a stop from
    outside; the command traps it and exits 0, and the run is still SANDBOX.UNAVAILABLE naming the stop and the
    exit, never a success; its end is on the record once, the container gone."""
    ws = workspace(tmp_path)
    raw = {"tool": "shell_command", "command": "trap 'echo trapped; exit 0' TERM; echo up; sleep 300 & wait"}
    assert orch.prestart(raw, workspace=ws)
    await until_ready(orch)
    task = asyncio.ensure_future(orch.execute(raw, workspace=ws))
    assert orch.pool is not None and orch.backend is not None
    # this run's container (the one its pool served), once its command's trap is set (its `sleep` runs)
    container_id = ""
    async with asyncio.timeout(30):
        while not container_id:
            assert not task.done(), task.result()
            await asyncio.sleep(0.05)
            for sandbox in await orch.backend.list_managed():
                if sandbox.sandbox_id in orch.pool.served and any(
                    line.startswith("sleep 300") for line in processes_mentioning(sandbox.sandbox_id).values()
                ):
                    container_id = sandbox.sandbox_id
    # someone else's `docker stop`, on the engine the backend uses (DOCKER_HOST set or not)
    engine = {**os.environ, "DOCKER_HOST": discover_endpoint().url}
    stop = await asyncio.create_subprocess_exec(
        "docker", "stop", "--time", "10", container_id, stdout=asyncio.subprocess.DEVNULL, env=engine
    )
    assert await stop.wait() == 0
    with pytest.raises(SandboxUnavailable) as stopped:
        async with asyncio.timeout(60):
            await task
    await orch.settle()
    said = str(stopped.value)
    assert "signal 15 from outside the sandbox" in said and "exited 0" in said, said
    (end,) = [
        r
        for r in records(tmp_path / "evidence.jsonl", str(stopped.value.details["execution_id"]))
        if r.event in ("execution_finished", "run_failed")
    ]
    assert end.error_code == "SANDBOX.UNAVAILABLE", end
    assert container_id not in {m.sandbox_id for m in await orch.backend.list_managed()}
