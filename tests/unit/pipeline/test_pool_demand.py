"""The pool's bookkeeping over a small in-memory backend (the sandboxes themselves are tests/integration's, on the
real engine): a claim never waits, demand grows a key within its ceiling and max_total, the floor is kept, the
surplus retired once demand is gone, failing fills are retried slowly, and everything is counted per profile."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.base import (
    Capabilities,
    LaunchSpec,
    LifecycleEvent,
    SandboxBackend,
    SandboxHandle,
)
from orchestrator.backends.checks import DoctorFixes
from orchestrator.domain.ids import new_execution_id
from orchestrator.domain.requests import parse_request
from orchestrator.pipeline import pool as pool_module
from orchestrator.pipeline.config import PoolSettings
from orchestrator.pipeline.launch import launch_spec
from orchestrator.pipeline.pool import PoolKey, SandboxPool
from orchestrator.pipeline.this_process import THIS_PROCESS
from orchestrator.profiles import ProfileRegistry

FIXES = DoctorFixes(engine="-", runtime="-", image="-", limits="-")


class MemoryBackend:
    """Sandboxes as entries in a dict: a fill takes ``fill_s`` (or until ``gate`` opens), or fails while
    ``failing``. Only what the pool calls."""

    capabilities = Capabilities(
        can_pool=True, launch_confirmed=True, sessions=False, lists_images=True, own_pids_limit=True, fixes=FIXES
    )

    def __init__(self, fill_s: float = 0.01) -> None:
        self.fill_s = fill_s
        self.gate: asyncio.Event | None = None
        self.failing = False
        self.alive: dict[str, SandboxHandle] = {}
        self.created = 0
        self._started: dict[str, asyncio.Event] = {}
        self._ids = itertools.count()

    async def create(self, spec: LaunchSpec) -> SandboxHandle:
        self.created += 1
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(self.fill_s)
        if self.failing:
            raise RuntimeError("no such image")
        handle = SandboxHandle(spec.execution_id, f"sbx-{next(self._ids)}", f"sbx-{spec.execution_id}")
        self.alive[handle.sandbox_id] = handle
        return handle

    async def start(self, handle: SandboxHandle) -> None:
        self._started.setdefault(handle.execution_id, asyncio.Event()).set()

    async def events(self, execution_id: str | None = None) -> AsyncGenerator[LifecycleEvent, None]:
        assert execution_id is not None
        await self._started.setdefault(execution_id, asyncio.Event()).wait()
        for kind in ("create", "start"):
            yield LifecycleEvent(kind, f"for-{execution_id}", execution_id, datetime.now(UTC))  # type: ignore[arg-type]

    def still_waiting(self, handle: SandboxHandle) -> bool | None:
        return handle.sandbox_id in self.alive

    async def destroy(self, handle: SandboxHandle) -> None:
        self.alive.pop(handle.sandbox_id, None)


@pytest.fixture(autouse=True)
def quick_sweeps(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    monkeypatch.setattr(pool_module, "SWEEP_S", 0.02)
    with THIS_PROCESS.isolated():
        yield


class Pool:
    """A pool over a MemoryBackend, its records kept."""

    def __init__(self, tmp_path: Path, backend: MemoryBackend | None = None, **settings: Any) -> None:
        self.backend = backend or MemoryBackend()
        self.records: list[tuple[str, str, dict[str, Any]]] = []
        self.pool = SandboxPool(
            self.backend,  # type: ignore[arg-type]
            PoolSettings(enabled=True, **settings),
            self._record,
        )
        self.tmp_path = tmp_path
        self.registry = ProfileRegistry()

    async def _record(self, event: Any, pool_id: str, **fields: Any) -> None:
        self.records.append((str(event), pool_id, fields.get("data", {})))

    def key(self, profile: str = "workspace-write", workspace: str = "ws") -> tuple[PoolKey, LaunchSpec]:
        path = self.tmp_path / workspace
        path.mkdir(exist_ok=True)
        resolved = self.registry.resolve(profile)
        spec = launch_spec(new_execution_id(), parse_request({"tool": "shell_exec", "argv": ["true"]}), resolved, path)
        found = path.stat()
        key = PoolKey(profile, resolved.profile_hash, str(path), (found.st_dev, found.st_ino), "default")
        return key, spec

    async def run(self, key: PoolKey, spec: LaunchSpec) -> bool:
        """A run of ``key`` as the Runner makes it: a claim, the run (destroying what it took), the refill."""
        pooled = await self.pool.claim(key)
        if pooled is not None:
            await self.backend.destroy(pooled.handle)
            SandboxPool.release(pooled)
        self.pool.want(key, spec)
        return pooled is not None

    async def until(self, what: str, predicate: Any, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                await asyncio.sleep(0.01)
        assert predicate(), what

    def discarded(self, reason: str) -> int:
        return sum(1 for event, _, data in self.records if event == "sandbox_discarded" and data["reason"] == reason)


@pytest.fixture
async def p(tmp_path: Path) -> AsyncIterator[Pool]:
    made = Pool(tmp_path, min_ready=1, max_ready=4, shrink_after_s=1.0)
    yield made
    await made.pool.aclose()
    assert made.backend.alive == {}  # nothing outlives the pool


async def test_a_claim_never_waits_for_a_fill(tmp_path: Path) -> None:
    p = Pool(tmp_path, min_ready=1, max_ready=1)
    key, spec = p.key()
    p.backend.gate = asyncio.Event()  # fills hang until the gate opens
    p.pool.want(key, spec)
    assert p.pool.describe()["filling"] == 1
    async with asyncio.timeout(0.5):  # at once, though a fill for its key is under way
        assert await p.pool.claim(key) is None
    p.backend.gate.set()
    await p.until("the fill ended", lambda: p.pool.describe()["ready"] == 1)
    assert await p.pool.claim(key) is not None
    [counts] = [part.counts for part in p.pool.profiles()]
    assert (counts.hits, counts.misses) == (1, 1)
    await p.pool.aclose()


async def test_a_burst_grows_the_key_to_its_ceiling_and_then_is_met(p: Pool) -> None:
    key, spec = p.key()
    p.pool.want(key, spec)  # its first run: the floor
    await p.until("the floor", lambda: p.pool.describe()["ready"] == 1)
    first = await asyncio.gather(*(p.run(key, spec) for _ in range(6)))
    assert sorted(first) == [False] * 5 + [True]  # one was ready; five ran cold
    # demand of six at once, the ceiling four: four filled, never more
    await p.until("grown to the ceiling", lambda: p.pool.describe()["ready"] == 4)
    await asyncio.sleep(0.1)
    assert p.pool.describe()["ready"] + p.pool.describe()["filling"] == 4 and p.backend.created == 5
    second = await asyncio.gather(*(p.pool.claim(key) for _ in range(4)))
    assert all(second)  # the burst's second coming: every claim met
    for pooled in second:
        assert pooled is not None
        await p.backend.destroy(pooled.handle)
    [part] = p.pool.profiles()
    assert (part.profile, part.counts.hits, part.counts.misses) == ("workspace-write", 5, 5)


async def test_the_surplus_is_retired_once_the_demand_is_gone_and_the_floor_kept(p: Pool) -> None:
    key, spec = p.key()
    await asyncio.gather(*(p.run(key, spec) for _ in range(4)))
    await p.until("grown", lambda: p.pool.describe()["ready"] == 4)
    assert p.pool.describe()["target"] == 4
    await asyncio.sleep(0.3)  # within shrink_after_s: kept for the burst's return
    assert p.pool.describe()["ready"] == 4 and p.discarded("surplus") == 0
    await p.until("back to the floor", lambda: p.pool.describe()["ready"] == 1 and p.discarded("surplus") == 3)
    assert p.pool.describe()["target"] == 1
    await asyncio.sleep(0.2)
    assert p.pool.describe()["ready"] == 1  # the floor stays
    [part] = p.pool.profiles()
    assert part.counts.discarded == {"surplus": 3}


async def test_an_expired_sandbox_of_a_key_in_use_is_replaced_to_keep_the_floor(tmp_path: Path) -> None:
    p = Pool(tmp_path, min_ready=2, max_ready=2, ttl_s=0.3)
    key, spec = p.key()
    p.pool.want(key, spec)
    await p.until("the floor", lambda: p.pool.describe()["ready"] == 2)
    first = {s.handle.sandbox_id for s in p.pool._keys[key].ready}
    p.pool._keys[key].last_used += 10  # used lately (in the future, for this test): the floor is kept
    await p.until("expired", lambda: p.discarded("expired") == 2)
    await p.until("replaced", lambda: p.pool.describe()["ready"] == 2)
    assert not first & {s.handle.sandbox_id for s in p.pool._keys[key].ready}
    await p.pool.aclose()


async def test_a_key_no_run_used_for_its_ttl_is_forgotten(tmp_path: Path) -> None:
    p = Pool(tmp_path, min_ready=1, max_ready=1, ttl_s=0.3)
    key, spec = p.key()
    p.pool.want(key, spec)
    await p.until("forgotten", lambda: p.pool.describe()["keys"] == 0 and p.discarded("expired") == 1, timeout=3)
    assert p.backend.alive == {} and p.backend.created == 1  # never filled again
    await p.pool.aclose()


async def test_max_total_bounds_every_key_together(tmp_path: Path) -> None:
    p = Pool(tmp_path, min_ready=0, max_ready=10, max_total=5)
    a, b = p.key(workspace="a"), p.key(workspace="b")
    await asyncio.gather(*(p.run(*a) for _ in range(8)))
    await p.until("a's share", lambda: p.pool.describe()["ready"] == 5)
    await p.run(*b)  # no room left for b
    await asyncio.sleep(0.1)
    assert p.pool.describe()["ready"] == 5 and len(p.pool._keys[b[0]].ready) == 0
    await p.pool.aclose()


async def test_an_announced_run_fills_a_key_whose_floor_is_zero(tmp_path: Path) -> None:
    p = Pool(tmp_path, min_ready=0, max_ready=3, shrink_after_s=0.3)
    key, spec = p.key()
    p.pool.want(key, spec)  # a run is over: no demand, no floor
    await asyncio.sleep(0.1)
    assert p.pool.describe()["ready"] == 0
    p.pool.want(key, spec, announced=True)  # Orchestrator.prestart: one is coming
    await p.until("one for it", lambda: p.pool.describe()["ready"] == 1)
    await p.until("retired when none came", lambda: p.discarded("surplus") == 1)
    await p.pool.aclose()


async def test_failing_fills_are_counted_and_retried_one_at_a_time(tmp_path: Path) -> None:
    p = Pool(tmp_path, min_ready=2, max_ready=5)
    p.backend.failing = True
    key, spec = p.key()
    await asyncio.gather(*(p.run(key, spec) for _ in range(5)))  # demand 5: five fills, each failing
    await p.until("the fills ended", lambda: p.pool.describe()["filling"] == 0)
    assert p.backend.created == 5
    await asyncio.sleep(0.2)  # ten sweeps: none retries a key whose fill failed (FILL_RETRY_S)
    assert p.backend.created == 5
    await p.run(key, spec)  # a run still asks for its key: one fill at a time until one succeeds
    assert p.pool.describe()["filling"] == 1
    await p.until("failed again", lambda: p.pool.describe()["filling"] == 0)
    p.backend.failing = False
    await p.run(key, spec)
    await p.until("filled", lambda: p.pool.describe()["ready"] == 1)
    await p.run(key, spec)  # succeeding again: filled to its target (its ceiling) at once
    await p.until("grown", lambda: p.pool.describe()["ready"] == 5)
    [part] = p.pool.profiles()
    assert part.counts.fills_failed == 6 and part.counts.misses == 7 and part.counts.hits == 1
    await p.pool.aclose()


async def test_each_profile_is_counted_and_bounded_on_its_own(tmp_path: Path) -> None:
    p = Pool(tmp_path, min_ready=0, max_ready=1, profiles={"read-only": {"min_ready": 2, "max_ready": 3}})
    rw, ro = p.key("workspace-write"), p.key("read-only")
    await asyncio.gather(*(p.run(*rw) for _ in range(3)), *(p.run(*ro) for _ in range(5)))
    await p.until("each to its ceiling", lambda: p.pool.describe()["ready"] == 4)
    parts = {part.profile: part for part in p.pool.profiles()}
    assert (parts["workspace-write"].ready, parts["read-only"].ready) == (1, 3)
    assert (parts["workspace-write"].counts.misses, parts["read-only"].counts.misses) == (3, 5)
    assert (parts["workspace-write"].target, parts["read-only"].target) == (1, 3)
    await p.pool.aclose()


async def test_retiring_a_workspace_and_draining_forget_their_keys(p: Pool) -> None:
    a, b = p.key(workspace="a"), p.key(workspace="b")
    p.pool.want(*a)
    p.pool.want(*b)
    await p.until("both", lambda: p.pool.describe()["ready"] == 2)
    assert p.pool.retire(a[0].workspace) == 1
    assert p.pool.describe()["keys"] == 1
    p.backend.gate = asyncio.Event()
    await p.run(*b)  # its refill hangs
    drained = asyncio.create_task(p.pool.drain())
    await asyncio.sleep(0.05)
    p.backend.gate.set()
    await drained
    assert p.pool.describe() == {"keys": 0, "ready": 0, "filling": 0, "target": 0, "served": 1}
    assert p.discarded("workspace_retired") == 1 and p.discarded("drained") == 1  # the fill that ended after
    assert p.backend.alive == {}


def test_the_memory_backend_is_what_the_pool_is_given() -> None:
    """Only the pool's calls: a protocol check would fail, the pool asks no more of it."""
    assert not isinstance(MemoryBackend(), SandboxBackend)


async def test_a_changed_profile_is_drained_and_a_run_of_its_old_definition_fills_nothing(
    p: Pool, tmp_path: Path
) -> None:
    old_key, old_spec = p.key(workspace="a")
    other_key, other_spec = p.key("read-only", workspace="a")
    p.pool.want(old_key, old_spec)
    p.pool.want(other_key, other_spec)
    await p.until("both keys at their floor", lambda: p.pool.describe()["ready"] == 2)
    p.backend.gate = asyncio.Event()
    filling_key, filling_spec = p.key(workspace="b")
    p.pool.want(filling_key, filling_spec)  # a fill of the old definition under way when the profile changes
    overrides = tmp_path / "profiles"
    overrides.mkdir()
    (overrides / "workspace-write.yaml").write_text("extends: workspace-write\nlimits: {memory: 1g}\n")
    p.registry = ProfileRegistry([overrides])
    new_key, new_spec = p.key(workspace="a")
    assert new_spec.profile.definition_sha256 != old_spec.profile.definition_sha256
    assert p.pool.drain_profiles({"workspace-write": new_spec.profile.definition_sha256}) == 1
    p.backend.gate.set()
    await p.until("the ready one and the one being filled destroyed", lambda: p.discarded("profile_changed") == 2)
    assert [part.profile for part in p.pool.profiles() if part.ready] == ["read-only"]  # another profile: kept
    p.pool.want(old_key, old_spec)  # a run that began before the change ends: its key is not filled again
    assert p.pool.describe()["filling"] == 0 and p.pool.describe()["keys"] == 1
    assert await p.run(new_key, new_spec) is False  # the new definition: a miss, then its key filled
    await p.until("the new key at its floor", lambda: p.pool.describe()["ready"] == 2)
    taken = await p.pool.claim(new_key)
    assert taken is not None and taken.key == new_key
    await p.backend.destroy(taken.handle)
    SandboxPool.release(taken)
    assert p.discarded("profile_changed") == 2  # nothing of the old definition was filled meanwhile
