"""What real runs used, as their usage says it (issue 25): a program of known appetite measured within 10 %,
and each way a run ends at a limit named as its cause, in the store's usage table."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.domain.ids import ExecutionId
from orchestrator.domain.usage import EndCause, RunUsage
from orchestrator.evidence.usage import read_usage
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.state.store import StateStore
from tests.support.orchestrators import docker_orchestrator

pytestmark = pytest.mark.integration
MIB = 2**20
ALLOW_ALL = (
    "safety:\n  mode: allow\n  denylist: [sudo]\n  rules: []\napprovals:\n  provider: rules\n  default: approved\n"
)
# 200 MiB, every page written, then one core spun until the process has used 1 s of CPU time in all (its
# start and the allocation included: the whole of it is what the cgroup counts)
APPETITE = (
    "import os\nb = bytearray(200 * 2**20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\n"
    "while sum(os.times()[:2]) < 1.0:\n    pass\n"
)
MEMORY_BOMB = "b = []\nwhile True:\n    b.append(bytearray(8 * 2**20))\n"
FORK_BOMB = "for i in $(seq 200); do sleep 5 & done; wait"
PROFILES = {
    "measured": "extends: workspace-write\nlimits:\n  memory: 512m\n  wall_timeout_s: 60\n",
    "tight": "extends: workspace-write\nlimits:\n  memory: 64m\n  wall_timeout_s: 2\n",
    "tight-gvisor": "extends: untrusted\nlimits:\n  pids: 64\n",
}


class Measured:
    """An observer of the runs: what each used, as the service's store receives it."""

    def __init__(self) -> None:
        self.runs: list[RunUsage] = []

    def decided(self, execution_id: ExecutionId, gate: object) -> None:
        pass

    def awaiting_approval(self, execution_id: ExecutionId, deadline_unix: float) -> None:
        pass

    def approval_settled(self, execution_id: ExecutionId, result: object) -> None:
        pass

    def running(self, execution_id: ExecutionId, profile: object) -> None:
        pass

    def measured(self, usage: RunUsage) -> None:
        self.runs.append(usage)


@pytest.fixture
async def orch(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    config = tmp_path / "config.yaml"
    config.write_text(ALLOW_ALL)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    for name, text in PROFILES.items():
        (profiles / f"{name}.yaml").write_text(f"name: {name}\ndescription: usage test\n{text}")
    o = await docker_orchestrator(tmp_path, config, profile_dirs=[profiles])
    yield o
    await o.aclose()


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    os.chown(ws, 1000, 1000)
    return ws


async def run(orch: Orchestrator, tmp_path: Path, argv: list[str], profile: str) -> RunUsage:
    seen = Measured()
    raw = {"tool": "shell_exec", "argv": argv, "profile": profile}
    await orch.execute(raw, workspace=workspace(tmp_path), observer=seen)  # type: ignore[arg-type]
    (usage,) = seen.runs
    return usage


async def test_a_known_appetite_is_measured_within_ten_percent(orch: Orchestrator, tmp_path: Path) -> None:
    usage = await run(orch, tmp_path, ["python3", "-c", APPETITE], "measured")
    assert usage.cause is EndCause.OK and usage.source == "cgroup"
    assert usage.memory_peak_bytes is not None and usage.cpu_seconds is not None
    assert 200 * MIB <= usage.memory_peak_bytes <= 220 * MIB, usage.memory_peak_bytes / MIB
    assert 1.0 <= usage.cpu_seconds <= 1.1, usage.cpu_seconds
    assert usage.limits.memory_bytes == 512 * MIB and usage.limits.wall_timeout_s == 60
    assert usage.wall_seconds is not None and usage.wall_seconds >= 1.0
    assert usage.pids_peak is not None and usage.pids_peak >= 1
    await orch.evidence.flush()  # the evidence says the same
    (recorded,) = [r for r in read_usage(tmp_path / "evidence.jsonl") if r.execution_id == usage.execution_id]
    assert recorded == usage.__class__(**{**_fields(usage), "ended_at": recorded.ended_at})


def _fields(usage: RunUsage) -> dict[str, object]:
    return {name: getattr(usage, name) for name in usage.__slots__}


async def test_each_limit_is_the_cause_in_the_usage_table(orch: Orchestrator, tmp_path: Path) -> None:
    runs = [
        await run(orch, tmp_path, ["python3", "-c", MEMORY_BOMB], "tight"),
        await run(orch, tmp_path, ["sleep", "30"], "tight"),
        await run(orch, tmp_path, ["sh", "-c", FORK_BOMB], "tight-gvisor"),
        await run(orch, tmp_path, ["sh", "-c", "exit 3"], "tight"),
    ]
    store = StateStore(tmp_path / "state.db")
    try:
        for usage in runs:
            await store.put_usage(usage)
        causes = {u.execution_id: u.cause for u in await store.usage()}
    finally:
        await store.close()
    expected = [EndCause.OOM, EndCause.WALL_TIMEOUT, EndCause.PIDS_LIMIT, EndCause.EXIT_NONZERO]
    assert [causes[u.execution_id] for u in runs] == expected
    oom, timeout, pids, _ = runs
    assert oom.memory_peak_bytes is not None and oom.memory_peak_bytes >= 60 * MIB  # it reached its 64m
    assert timeout.wall_seconds is not None and 2.0 <= timeout.wall_seconds < 10
    assert pids.limits.pids == 64


async def test_a_bug_building_the_usage_never_fails_the_run(
    orch: Orchestrator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end record is on disk before the usage is built: a bug there is logged, and the run's result stands."""

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("orchestrator.pipeline.runner.usage_from_end", broken)
    seen = Measured()
    result = await orch.execute(
        {"tool": "shell_exec", "argv": ["true"], "profile": "measured"}, workspace=workspace(tmp_path), observer=seen
    )  # type: ignore[arg-type]
    assert result.ok and seen.runs == []
    await orch.evidence.flush()
    assert [r.execution_id for r in read_usage(tmp_path / "evidence.jsonl")] == [result.authorization.execution_id]
