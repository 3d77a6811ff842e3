"""Pre-started sandboxes on the real engine: a pooled run is a cold run's equal, each sandbox is served
once, a claim only ever gets its own key, and nothing outlives its TTL or the pool."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.docker import DockerBackend
from orchestrator.domain.errors import SandboxStartFailed
from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from tests.support.evidence import records
from tests.support.orchestrators import docker_orchestrator

pytestmark = pytest.mark.integration
POLICY = "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"


def workspace(root: Path, name: str = "ws") -> Path:
    ws = root / name
    ws.mkdir(exist_ok=True)
    os.chown(ws, 1000, 1000)
    return ws


async def pooled_orchestrator(tmp_path: Path, pool: str, extra_profiles: Path | None = None) -> Orchestrator:
    config = tmp_path / "config.yaml"
    config.write_text(POLICY + f"pool: {pool}\n")
    return await docker_orchestrator(tmp_path, config, profile_dirs=[extra_profiles] if extra_profiles else [])


@pytest.fixture
async def orch(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    o = await pooled_orchestrator(tmp_path, "{enabled: true, per_key: 1, ttl_s: 60}")
    yield o
    backend = o.backend
    await o.aclose()
    assert backend is not None
    check = DockerBackend()
    try:  # the pool destroyed what it held: nothing of this run is left on the engine
        ids = {r.execution_id for r in iter_records(tmp_path / "evidence.jsonl")}
        assert [s.name for s in await check.list_managed() if s.execution_id in ids] == []
    finally:
        await check.close()
    assert verify(tmp_path / "evidence.jsonl").ok


async def until_ready(o: Orchestrator, count: int = 1) -> None:
    assert o.pool is not None
    for _ in range(200):
        if o.pool.describe()["ready"] >= count:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the pool never got {count} ready: {o.pool.describe()}")


def started(tmp_path: Path, result: ExecutionResult) -> dict[str, Any]:
    begin = next(
        r
        for r in records(tmp_path / "evidence.jsonl", str(result.authorization.execution_id))
        if r.event == "execution_started"
    )
    assert begin.data is not None
    return dict(begin.data)


async def test_a_pooled_run_is_a_cold_runs_equal(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    (ws / "sub").mkdir()
    os.chown(ws / "sub", 1000, 1000)
    # stdin: /dev/null (cat ends at once), as in a cold run
    script = (
        'echo "$TZ|$(pwd)|$(id -u):$(id -g)|$HOSTNAME|$HOME"; cat; echo err >&2; mktemp -p . made.XXXXXX >/dev/null;'
        " exit 3"
    )
    request = {"tool": "shell_command", "command": script, "cwd": "sub", "env": {"TZ": "hi there"}}
    cold = await orch.execute(request, workspace=ws)
    await until_ready(orch)
    warm = await orch.execute(request, workspace=ws)
    await orch.settle()  # answered from its init's report: the engine's end and the removal follow
    assert "pooled" not in started(tmp_path, cold) and "pooled" in started(tmp_path, warm)
    for result in (cold, warm):
        out = result.to_json()
        assert out["exit_code"] == 3, out
        assert out["stdout"] == "[REDACTED:literal]|/workspace/sub|1000:1000|sandbox|/tmp\n"  # env values are secrets
        assert out["stderr"] == "err\n"
        # the workspace's changes, measured from the claim: the file the command made, nothing else
        assert (out["side_effects"]["created"], out["side_effects"]["modified"]) == (1, 0), out["side_effects"]
    # the pooled sandbox's own records: made and started at fill time, then taken by exactly this run
    pooled = started(tmp_path, warm)["pooled"]
    own = [r.event for r in records(tmp_path / "evidence.jsonl", pooled["pool_id"])]
    assert own[:2] == ["container_created", "container_started"] and own[2:] == ["sandbox_pooled", "sandbox_claimed"]
    claimed = next(r for r in records(tmp_path / "evidence.jsonl", pooled["pool_id"]) if r.event == "sandbox_claimed")
    assert claimed.data == {"execution_id": str(warm.authorization.execution_id)}
    # the run's own lifecycle: from its claim on, with the engine's timestamps, and the same end record
    events = [r.event for r in records(tmp_path / "evidence.jsonl", str(warm.authorization.execution_id))]
    assert "container_created" not in events and "container_started" not in events
    assert {"container_died", "container_destroyed", "execution_finished"} <= set(events)
    died = next(
        r
        for r in records(tmp_path / "evidence.jsonl", str(warm.authorization.execution_id))
        if r.event == "container_died"
    )
    assert died.data is not None and died.data["sandbox_id"] == pooled["sandbox_id"] and died.data["exit_code"] == 3


@pytest.mark.parametrize(
    ("argv", "not_found"),
    [(["no-such-program-7f3e"], True), (["/no/such/program"], True), (["/workspace/plain-file"], False)],
)
async def test_a_command_that_cannot_start_fails_to_start_pooled_as_cold(
    orch: Orchestrator, tmp_path: Path, argv: list[str], not_found: bool
) -> None:
    """A pooled run answers what a cold run answers when its program is missing or not executable: the
    command never ran (SANDBOX.START_FAILED), never an exit code that the command might have given."""
    ws = workspace(tmp_path)
    (ws / "plain-file").write_text("echo ran > ran\n")
    request = {"tool": "shell_exec", "argv": argv}
    failures = []
    for pooled in (False, True):
        if pooled:
            await until_ready(orch)
        with pytest.raises(SandboxStartFailed) as failed:
            await orch.execute(request, workspace=ws)
        failures.append(failed.value)
        assert failed.value.details.get("command_not_found", False) is not_found, failed.value.details
    assert not (ws / "ran").exists()
    ends = [r for r in iter_records(tmp_path / "evidence.jsonl") if r.event in ("execution_finished", "run_failed")]
    assert [r.event for r in ends] == ["run_failed", "run_failed"], ends
    assert [r.error_code for r in ends] == ["SANDBOX.START_FAILED"] * 2
    begins = [r for r in iter_records(tmp_path / "evidence.jsonl") if r.event == "execution_started"]
    assert ["pooled" in (r.data or {}) for r in begins] == [False, True]


async def test_a_command_printing_an_init_refusal_is_its_own_output(orch: Orchestrator, tmp_path: Path) -> None:
    """A command that writes what the init writes when it refuses (any token: it cannot know its own)
    exits as itself: only the init that read the launch's message can say the command never ran."""
    ws = workspace(tmp_path)
    line = "sandbox-init[" + "0" * 32 + ":127]: x: No such file or directory"
    request = {"tool": "shell_exec", "argv": ["sh", "-c", f"echo '{line}' >&2; exit 127"]}
    assert orch.prestart(request, workspace=ws)
    await until_ready(orch)
    result = await orch.execute(request, workspace=ws)
    assert "pooled" in started(tmp_path, result)
    assert (result.to_json()["exit_code"], result.to_json()["stderr"]) == (127, line + "\n")


async def test_no_sandbox_is_ever_served_twice(tmp_path: Path) -> None:
    o = await pooled_orchestrator(tmp_path, "{enabled: true, per_key: 2, ttl_s: 60}")
    ws = workspace(tmp_path)
    try:
        results = []
        for index in range(12):
            results.append(await o.execute({"tool": "shell_exec", "argv": ["echo", str(index)]}, workspace=ws))
            if index % 3 == 0:
                await asyncio.sleep(0.3)  # let the pool refill now and then: a mix of cold and pooled runs
        assert [r.to_json()["stdout"] for r in results] == [f"{i}\n" for i in range(12)]
        assert o.pool is not None
        pooled_runs = [r for r in results if "pooled" in started(tmp_path, r)]
        assert len(pooled_runs) >= 3, o.pool.describe()
    finally:
        await o.aclose()
    # from the engine's own records: every sandbox that ran a command died once, in one execution
    died = [r for r in iter_records(tmp_path / "evidence.jsonl") if r.event == "container_died"]
    per_sandbox = Counter(str(r.data["sandbox_id"]) for r in died if r.data)
    assert len(died) == 12 and set(per_sandbox.values()) == {1}, per_sandbox
    assert len(set(o.pool.served)) == len(o.pool.served) == len(pooled_runs)


async def test_a_run_never_waits_for_the_sandbox_being_filled_for_its_key(orch: Orchestrator, tmp_path: Path) -> None:
    """A run that finds none ready while one is being filled for its key starts cold at once (a miss), and the
    fill still ends in the pool for the next run."""
    evidence = tmp_path / "evidence.jsonl"
    request = {"tool": "shell_exec", "argv": ["true"]}
    for attempt in range(5):  # the next run must come before the fill ends (a fill that won the race is taken)
        ws = workspace(tmp_path, f"ws-{attempt}")
        first = await orch.execute(request, workspace=ws)
        assert orch.pool is not None and orch.pool.describe()["filling"] == 1  # its key, filled again as it ended
        second = await orch.execute({"tool": "shell_exec", "argv": ["echo", "next"]}, workspace=ws)
        if "pooled" not in started(tmp_path, second):
            break
        await until_ready(orch)
    else:
        raise AssertionError("every fill ended before the next run claimed")
    assert "pooled" not in started(tmp_path, first) and second.to_json()["stdout"] == "next\n"
    await until_ready(orch)
    third = await orch.execute(request, workspace=ws)
    pool_id = started(tmp_path, third)["pooled"]["pool_id"]
    # the fill under way as the second run began ended after that run's begin record: it was not waited for
    begun = next(r for r in records(evidence, str(second.authorization.execution_id)) if r.event == "execution_started")
    [pooled] = [r for r in records(evidence, pool_id) if r.event == "sandbox_pooled"]
    assert pooled.seq > begun.seq
    counts = {part.profile: part.counts for part in orch.pool.profiles()}["workspace-write"]
    assert (counts.hits, counts.misses) == (1 + attempt, 2 + attempt)  # each key's first run, each second's


async def test_a_claim_only_ever_gets_a_sandbox_of_its_own_key(orch: Orchestrator, tmp_path: Path) -> None:
    first, second = workspace(tmp_path, "a"), workspace(tmp_path, "b")
    await orch.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=first)
    await until_ready(orch)
    other_workspace = await orch.execute({"tool": "shell_exec", "argv": ["ls", "/workspace"]}, workspace=second)
    other_profile = await orch.execute(
        {"tool": "shell_exec", "argv": ["true"], "profile": "read-only"}, workspace=first
    )
    other_tenant = await orch.execute({"tool": "shell_exec", "argv": ["true"], "tenant": "t2"}, workspace=first)
    for result in (other_workspace, other_profile, other_tenant):
        assert "pooled" not in started(tmp_path, result)
    mine = await orch.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=first)
    assert "pooled" in started(tmp_path, mine)


async def test_an_unclaimed_sandbox_is_destroyed_after_its_ttl(tmp_path: Path) -> None:
    o = await pooled_orchestrator(tmp_path, "{enabled: true, per_key: 1, ttl_s: 1}")
    ws = workspace(tmp_path)
    check = DockerBackend()
    try:
        await o.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=ws)
        await until_ready(o)
        await asyncio.sleep(3)
        assert o.pool is not None and o.pool.describe()["ready"] == 0
        discarded = [r for r in iter_records(tmp_path / "evidence.jsonl") if r.event == "sandbox_discarded"]
        assert discarded and discarded[0].data is not None and discarded[0].data["reason"] == "expired"
        gone = str(discarded[0].data["sandbox_id"])
        assert gone not in {s.sandbox_id for s in await check.list_managed()}
    finally:
        await check.close()
        await o.aclose()


async def test_a_profile_can_keep_its_runs_cold(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "cold.yaml").write_text(
        "name: cold\ndescription: no pool\nextends: workspace-write\npool:\n  enabled: false\n"
    )
    o = await pooled_orchestrator(tmp_path, "{enabled: true, per_key: 1, ttl_s: 60}", extra_profiles=profiles)
    ws = workspace(tmp_path)
    try:
        for _ in range(2):
            result = await o.execute({"tool": "shell_exec", "argv": ["true"], "profile": "cold"}, workspace=ws)
            assert "pooled" not in started(tmp_path, result)
        assert o.pool is not None and o.pool.describe()["keys"] == 0
    finally:
        await o.aclose()


@pytest.mark.engine_exclusive
def test_a_killed_controllers_pooled_sandboxes_are_collected(tmp_path: Path) -> None:
    """The process holding a ready pool is killed outright: the orphan collector removes its sandboxes."""
    import signal
    import subprocess
    import sys

    ws = workspace(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(POLICY + "pool: {enabled: true, per_key: 2, ttl_s: 600}\n")
    evidence = tmp_path / "evidence.jsonl"
    holder = f"""
import asyncio
from pathlib import Path
from orchestrator.backends.docker import DockerBackend
from orchestrator.domain.errors import SandboxStartFailed
from orchestrator.profiles import ProfileRegistry
from orchestrator.pipeline.factory import build_orchestrator

async def main():
    o = build_orchestrator(Path({str(config)!r}), evidence_path=Path({str(evidence)!r}), backend=DockerBackend(),
                           profiles=ProfileRegistry())
    await o.execute({{"tool": "shell_exec", "argv": ["true"]}}, workspace=Path({str(ws)!r}))
    while o.pool.describe()["ready"] < 2:
        await asyncio.sleep(0.05)
    await o.evidence.flush()
    print("ready", flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    pooled = {
        str(r.data["sandbox_id"]): r.execution_id
        for r in iter_records(evidence)
        if r.event == "sandbox_pooled" and r.data is not None
    }
    assert len(pooled) == 2

    async def collect() -> list[str]:
        from orchestrator.evidence import EvidenceWriter
        from orchestrator.pipeline.reaper import collect_orphans

        backend = DockerBackend()
        writer = EvidenceWriter(evidence)
        try:
            reaped = await collect_orphans(backend, writer)
            assert not set(pooled) & {s.sandbox_id for s in await backend.list_managed()}
            return [r.sandbox.sandbox_id for r in reaped]
        finally:
            await writer.close()
            await backend.close()

    assert set(pooled) <= set(asyncio.run(collect()))
    for pool_id in pooled.values():  # each on its own record: pooled, then abandoned with its controller
        kinds = [r.event for r in iter_records(evidence, execution_id=pool_id)]
        assert kinds[-2:] == ["sandbox_pooled", "execution_abandoned"], kinds
    assert verify(evidence).ok


async def test_a_pooled_sandbox_that_died_is_never_handed_out(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace(tmp_path)
    await orch.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=ws)
    await until_ready(orch)
    assert orch.pool is not None and orch.backend is not None
    (waiting,) = [p for d in orch.pool._keys.values() for p in d.ready]
    await orch.backend.kill(waiting.handle)  # its init dies before anyone claims it (OOM, a kill, ...)
    await asyncio.sleep(0.5)
    result = await orch.execute({"tool": "shell_exec", "argv": ["echo", "ran"]}, workspace=ws)
    assert result.to_json()["stdout"] == "ran\n" and "pooled" not in started(tmp_path, result)  # cold instead
    discarded = [
        r.data for r in records(tmp_path / "evidence.jsonl", waiting.pool_id) if r.event == "sandbox_discarded"
    ]
    assert discarded == [{"sandbox_id": waiting.handle.sandbox_id, "reason": "ended"}]


@pytest.mark.engine_exclusive
async def test_the_orphan_collector_leaves_this_processs_pool_alone(orch: Orchestrator, tmp_path: Path) -> None:
    from orchestrator.pipeline.reaper import collect_orphans

    ws = workspace(tmp_path)
    await orch.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=ws)
    await until_ready(orch)
    assert orch.backend is not None
    assert orch.pool is not None
    waiting = {p.handle.sandbox_id for d in orch.pool._keys.values() for p in d.ready}
    reaped = await collect_orphans(orch.backend, orch.evidence)  # as the service's reaper runs every minute
    assert waiting and not waiting & {r.sandbox.sandbox_id for r in reaped}
    result = await orch.execute({"tool": "shell_exec", "argv": ["echo", "pooled"]}, workspace=ws)
    assert result.to_json()["stdout"] == "pooled\n" and "pooled" in started(tmp_path, result)
