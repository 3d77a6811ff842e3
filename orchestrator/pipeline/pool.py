"""Pre-started sandboxes: the next run's sandbox is created and started before it is asked for.

A pooled sandbox is created and started with every setting of its profile and its workspace (a
``PooledLaunch``: our init waits in it for one launch message); a run whose key matches
claims it — popped from the pool, so it is handed out exactly once — and the backend's ``launch`` execs
the run's command in it. After that run it is destroyed like any sandbox: it never comes back.

The key is everything fixed when a sandbox starts: the resolved profile (its hash covers image, runtime,
user, limits, mounts), the workspace, the tenant. A claim can only ever receive a sandbox built for
exactly its own. The pool is bounded per key and in total; an unclaimed sandbox is destroyed after its
TTL; a key is filled on demand (its first run, cold, asks for it, or ``Orchestrator.prestart``) and again
after each claim; a claim that finds none ready waits for a fill of its key already under way. A workspace
about to be removed (a CI job's, at its cleanup) is ``retire``d: its ready sandboxes are destroyed and its keys
forgotten, so that neither they nor the key table outlive it.

Evidence: a pooled sandbox has records of its own under its pool id (an execution id that no request
has): the engine's ``container_created`` / ``container_started`` as they happened at fill time,
``sandbox_pooled`` once it waits, then ``sandbox_claimed`` (which execution took it) or
``sandbox_discarded`` (why it was destroyed unclaimed). The execution that claims it says so in its own
``execution_started`` record (``pooled``: the pool id, the sandbox, when it was filled).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from orchestrator.backends.base import LaunchSpec, LifecycleEvent, PooledLaunch, SandboxBackend, SandboxHandle
from orchestrator.domain.ids import new_execution_id
from orchestrator.evidence import EventType
from orchestrator.pipeline.config import PoolSettings
from orchestrator.pipeline.launch import DEADLINE_GRACE_S
from orchestrator.pipeline.this_process import THIS_PROCESS

log = logging.getLogger(__name__)

#: how often expired sandboxes are looked for
SWEEP_S = 1.0
#: how long a fill waits for the engine to report its sandbox's start (its records are written by then; a
#: sandbox whose start is not on the record within it is destroyed, never handed out)
FILL_EVENTS_WAIT_S = 5.0
SERVED_KEPT = 10_000
#: what of an engine event's attributes a pooled sandbox's records keep (as executor.RECORDED_ATTRIBUTES)
_FACTS = ("reason", "node")
#: how long a claim waits for a sandbox of its key being filled when none is ready (the fill began before the
#: claim, so it is ready sooner than a cold start would be, and the engine does not start two at once); past
#: it the run starts cold
CLAIM_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class PoolKey:
    """What a sandbox is fixed to once started: only a run with the same key may claim it."""

    profile_hash: str  # the resolved profile: image, runtime, user, limits, mounts, seccomp
    workspace: str
    workspace_id: tuple[int, int]  # (st_dev, st_ino): the directory the bind mount holds, not only its path
    tenant: str


@dataclass(eq=False)
class PooledSandbox:
    key: PoolKey
    pool_id: str  # its own records' id
    handle: SandboxHandle
    filled_unix: float
    expires: float  # monotonic


Record = Callable[..., Awaitable[None]]
"""``record(event, pool_id, *, tenant=..., data=..., engine_ts=...)``: one evidence record of a pooled sandbox."""


@dataclass(eq=False)
class _Demand:
    template: LaunchSpec  # a run's spec of this key: what a sandbox for it is created from
    ready: collections.deque[PooledSandbox] = field(default_factory=collections.deque)
    filling: int = 0
    waiting: int = 0  # claims waiting for a fill under way (each waits for one fill of its own)
    settled: asyncio.Event = field(default_factory=asyncio.Event)  # set (and replaced) when a fill ends
    retired: bool = False  # its workspace went away: a fill that ends now destroys its sandbox

    def fill_ended(self) -> None:
        settled, self.settled = self.settled, asyncio.Event()
        settled.set()


class SandboxPool:
    """Pre-started sandboxes of ``backend`` (one whose ``capabilities.can_pool``), per key; ``record`` writes
    their evidence."""

    def __init__(self, backend: SandboxBackend, settings: PoolSettings, record: Record) -> None:
        if not backend.capabilities.can_pool:  # the Runner makes none then: never a pool that cannot fill
            raise ValueError(f"the {type(backend).__name__} cannot pre-start sandboxes as configured")
        self.backend = backend
        self.settings = settings
        self._record = record
        self._keys: dict[PoolKey, _Demand] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False
        # sandbox ids handed out, the latest (each once: tests and benchmarks check)
        self.served: collections.deque[str] = collections.deque(maxlen=SERVED_KEPT)

    # -- claims ------------------------------------------------------------------------------------------

    async def claim(self, key: PoolKey) -> PooledSandbox | None:
        """A ready sandbox of exactly ``key``, removed from the pool (never handed out again) and seen
        still waiting (its init alive: one that died meanwhile is discarded, never handed out); None if
        none is (the caller starts one cold). When none is ready but one is being filled for the key (and no
        other claim waits for it), the claim waits for that fill, within ``CLAIM_WAIT_S``. The caller
        ``release``s it once it was destroyed."""
        demand = self._keys.get(key)
        if demand is None:
            return None
        deadline = time.monotonic() + CLAIM_WAIT_S
        while True:
            while demand.ready:
                pooled = demand.ready.popleft()  # popped before any await: no other claim can take it
                if pooled.expires <= time.monotonic():
                    self._spawn(self._discard(pooled, "expired"))
                    continue
                try:
                    alive = await self._waiting(pooled)
                except asyncio.CancelledError:  # popped, never handed out: destroyed
                    self.discard(pooled, "unused")
                    raise
                if not alive:
                    continue
                self.served.append(pooled.handle.sandbox_id)
                return pooled
            left = deadline - time.monotonic()
            if self._closed or demand.retired or demand.waiting >= demand.filling or left <= 0:
                return None
            settled = demand.settled
            demand.waiting += 1
            try:
                async with asyncio.timeout(left):
                    await settled.wait()
            except TimeoutError:
                return None
            finally:
                demand.waiting -= 1

    async def _waiting(self, pooled: PooledSandbox) -> bool:
        """Whether its init still waits (the backend's own watch, else the engine's state); one that
        ended or cannot be seen is discarded."""
        waiting = self.backend.still_waiting(pooled.handle)
        if waiting is None:
            try:
                state = await self.backend.inspect(pooled.handle)
            except Exception as exc:  # gone, or the engine cannot say: not to be trusted with a command
                log.info("pooled sandbox %s cannot be inspected: %s", pooled.handle.name, exc)
                self._spawn(self._discard(pooled, "unreachable"))
                return False
            waiting = state.exit_code is None and state.started_at is not None
        if not waiting:
            self._spawn(self._discard(pooled, "ended"))
        return waiting

    @staticmethod
    def release(pooled: PooledSandbox) -> None:
        """A claimed sandbox was destroyed by its run: the orphan collector may treat its id as any."""
        THIS_PROCESS.release(pooled.pool_id)

    def want(self, key: PoolKey, template: LaunchSpec) -> None:
        """A run of ``key`` happened (cold or from the pool): fill the key up to ``per_key`` again,
        within ``max_total``. ``template``: that run's spec (argv, env and its kind are not used)."""
        if self._closed:
            return
        demand = self._keys.get(key)
        if demand is None:
            demand = self._keys[key] = _Demand(template)
        demand.template = template
        while len(demand.ready) + demand.filling < self.settings.per_key and self._size() < self.settings.max_total:
            demand.filling += 1
            self._spawn(self._fill(key, demand))
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="pool-sweeper")

    def _size(self) -> int:
        return sum(len(d.ready) + d.filling for d in self._keys.values())

    # -- filling -----------------------------------------------------------------------------------------

    async def _fill(self, key: PoolKey, demand: _Demand) -> None:
        pool_id = new_execution_id()
        ttl = self.settings.ttl_s
        # its deadline label: a run that claims it at the end of its TTL still has its wall time and grace
        deadline = time.time() + ttl + demand.template.profile.wall_timeout_s + DEADLINE_GRACE_S
        # its labels follow: its pool id, its deadline, the run's owner and profile
        spec = dataclasses.replace(
            demand.template,
            execution_id=pool_id,
            argv=("sandbox-init",),
            env={},
            kind=PooledLaunch(),
            deadline_unix=deadline,
        )
        # this process runs it from now until it is destroyed: the orphan collector leaves it alone
        THIS_PROCESS.hold(pool_id)
        handle: SandboxHandle | None = None
        events = asyncio.create_task(self._record_start(key, pool_id))
        kept = False  # in the pool, or handed to _discard (which destroys it and records why)
        try:
            handle = await self.backend.create(spec)
            await self.backend.start(handle)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(FILL_EVENTS_WAIT_S):
                    await asyncio.shield(events)  # its create and start on the record before anyone claims it
            if not events.done() or events.cancelled() or events.exception() is not None:
                log.warning("pooled sandbox %s: its start is not on the record; not used", handle.name)
                return
            pooled = PooledSandbox(key, pool_id, handle, time.time(), time.monotonic() + ttl)
            await self._record(
                EventType.SANDBOX_POOLED,
                pool_id,
                tenant=key.tenant,
                profile_hash=key.profile_hash,
                data={"sandbox_id": handle.sandbox_id, "profile_hash": key.profile_hash, "ttl_s": ttl},
            )
            kept = True
            if not self._closed and not demand.retired:
                demand.ready.append(pooled)
            else:  # the pool closed or the key's workspace went away while it was filled
                self._spawn(self._discard(pooled, "closed" if self._closed else "workspace_retired"))
        except Exception as exc:  # the key stays cold; the next run asks again
            log.warning("pre-starting a sandbox failed: %s: %s", type(exc).__name__, exc)
        finally:
            demand.filling -= 1
            demand.fill_ended()  # a claim waiting for it takes it (or, if it failed, starts cold)
            events.cancel()
            if not kept:  # whatever stopped it: its sandbox is destroyed, never left running unlisted
                if handle is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(self.backend.destroy(handle))
                THIS_PROCESS.release(pool_id)

    async def _record_start(self, key: PoolKey, pool_id: str) -> None:
        """The engine's create and start of the sandbox being filled, under its pool id."""
        stream = self.backend.events(pool_id)
        try:
            async for event in stream:
                await self._record_event(key, pool_id, event)
                if event.kind == "start":
                    return
        finally:
            await stream.aclose()

    async def _record_event(self, key: PoolKey, pool_id: str, event: LifecycleEvent) -> None:
        kinds: dict[str, EventType] = {
            "create": EventType.CONTAINER_CREATED,
            "schedule": EventType.CONTAINER_SCHEDULED,
            "start": EventType.CONTAINER_STARTED,
        }
        if event.kind in kinds:
            await self._record(
                kinds[event.kind],
                pool_id,
                tenant=key.tenant,
                profile_hash=key.profile_hash,
                engine_ts=event.engine_ts.isoformat(),
                # the facts a run's own lifecycle records keep (executor.RECORDED_ATTRIBUTES): a pod's node
                data={"sandbox_id": event.sandbox_id, **{k: v for k, v in event.attributes.items() if k in _FACTS}},
            )

    # -- ends ----------------------------------------------------------------------------------------------

    async def claimed(self, pooled: PooledSandbox, execution_id: str) -> None:
        """On the pooled sandbox's own record: which execution took it."""
        await self._record(
            EventType.SANDBOX_CLAIMED,
            pooled.pool_id,
            tenant=pooled.key.tenant,
            profile_hash=pooled.key.profile_hash,
            data={"execution_id": execution_id},
        )

    def discard(self, pooled: PooledSandbox, reason: str) -> None:
        """Destroy a claimed sandbox that was not used after all (it is never handed out again)."""
        self._spawn(self._discard(pooled, reason))

    async def _discard(self, pooled: PooledSandbox, reason: str) -> None:
        try:
            await self.backend.destroy(pooled.handle)
        except Exception as exc:  # the orphan collector removes it (our labels, its deadline)
            log.warning("could not destroy pooled sandbox %s: %s", pooled.handle.name, exc)
        finally:
            THIS_PROCESS.release(pooled.pool_id)
        await self._record(
            EventType.SANDBOX_DISCARDED,
            pooled.pool_id,
            tenant=pooled.key.tenant,
            profile_hash=pooled.key.profile_hash,
            data={"sandbox_id": pooled.handle.sandbox_id, "reason": reason},
        )

    def retire(self, workspace: str) -> int:
        """The workspace at ``workspace`` (a local path, as keys hold it) is about to be removed: its ready
        sandboxes are destroyed (``sandbox_discarded``, reason ``workspace_retired``), fills under way destroy
        theirs when they end, and its keys are forgotten (a later run there fills anew). How many were ready."""
        destroyed = 0
        for key in [k for k in self._keys if k.workspace == workspace]:
            demand = self._keys.pop(key)
            demand.retired = True
            demand.fill_ended()  # a claim waiting for one of its fills starts cold
            while demand.ready:
                self._spawn(self._discard(demand.ready.popleft(), "workspace_retired"))
                destroyed += 1
        return destroyed

    async def _sweep(self) -> None:
        while not self._closed:
            await asyncio.sleep(SWEEP_S)
            now = time.monotonic()
            for demand in self._keys.values():
                while demand.ready and demand.ready[0].expires <= now:
                    self._spawn(self._discard(demand.ready.popleft(), "expired"))

    def _spawn(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Destroy every ready sandbox, once the fills under way ended (e.g. after the profiles changed)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        for demand in self._keys.values():
            while demand.ready:
                self._spawn(self._discard(demand.ready.popleft(), "drained"))
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Destroy every ready sandbox (fills under way destroy theirs when they end)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for demand in self._keys.values():
            demand.fill_ended()  # no claim waits for a fill of a closed pool
        for demand in self._keys.values():
            while demand.ready:
                self._spawn(self._discard(demand.ready.popleft(), "closed"))
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def describe(self) -> dict[str, Any]:
        return {
            "keys": len(self._keys),
            "ready": sum(len(d.ready) for d in self._keys.values()),
            "filling": sum(d.filling for d in self._keys.values()),
            "served": len(self.served),
        }
