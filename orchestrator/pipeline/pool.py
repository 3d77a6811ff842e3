"""Pre-started sandboxes: the next run's sandbox is created and started before it is asked for.

A pooled sandbox is created and started with every setting of its profile and its workspace (a
``PooledLaunch``: our init waits in it for one launch message); a run whose key matches
claims it — popped from the pool, so it is handed out exactly once — and the backend's ``launch`` execs
the run's command in it. After that run it is destroyed like any sandbox: it never comes back.

The key is everything fixed when a sandbox starts: the resolved profile (its hash covers image, runtime,
user, limits, mounts), the workspace, the tenant. A claim can only ever receive a sandbox built for
exactly its own. A claim never waits: it takes a ready sandbox of its key, or none (a miss: the run starts
cold). Each key is sized by its demand (pool_sizing.py): its busiest moment of late, between the floor and
ceiling of its profile (``PoolSettings.bounds``), within ``max_total`` for all keys. A key is filled up to that
target once each of its runs is over (a fill beside a run would slow it) or ``Orchestrator.prestart`` announces
one; the sweep every ``SWEEP_S`` destroys sandboxes unclaimed for their TTL, retires those above a target that
fell (``surplus``), keeps each key that a run used within ``ttl_s`` at its floor, and forgets the others once
empty. A workspace about to be removed (a CI job's, at its cleanup) is ``retire``d: its ready sandboxes are
destroyed and its keys forgotten, so that neither they nor the key table outlive it. A profile that changed
(its files re-read: profiles/source.py) is ``drain_profiles``'d: its keys' ready sandboxes are destroyed, and
from then on a key of it is filled only from a run that resolved the new definition (a run that began before
the change and ends after it asks for its own key again, which no new run could claim).

Evidence: a pooled sandbox has records of its own under its pool id (an execution id that no request
has): the engine's ``container_created`` / ``container_started`` as they happened at fill time,
``sandbox_pooled`` once it waits, then ``sandbox_claimed`` (which execution took it) or
``sandbox_discarded`` (why it was destroyed unclaimed: ``expired``, ``surplus``, ``closed``, ``unused``,
``ended``, ``unreachable``, ``workspace_retired``, ``drained``, ``profile_changed``). The execution that
claims it says so in its own ``execution_started`` record (``pooled``: the pool id, the sandbox, when it was
filled). Hits, misses, failed fills and discards are counted per profile (``profiles()``: the service's
/metrics).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.backends.base import LaunchSpec, LifecycleEvent, PooledLaunch, SandboxBackend, SandboxHandle
from orchestrator.domain.ids import new_execution_id
from orchestrator.evidence import EventType
from orchestrator.pipeline.config import KeyBounds, PoolSettings
from orchestrator.pipeline.launch import DEADLINE_GRACE_S
from orchestrator.pipeline.pool_sizing import Demand, FillTime, fills_wanted, surplus, target
from orchestrator.pipeline.this_process import THIS_PROCESS

log = logging.getLogger(__name__)

#: how often expired and surplus sandboxes are looked for, and floors kept
SWEEP_S = 1.0
#: how long a fill waits for the engine to report its sandbox's start (its records are written by then; a
#: sandbox whose start is not on the record within it is destroyed, never handed out)
FILL_EVENTS_WAIT_S = 5.0
SERVED_KEPT = 10_000
#: what of an engine event's attributes a pooled sandbox's records keep (as executor.RECORDED_ATTRIBUTES)
_FACTS = ("reason", "node")
#: after a fill of a key failed, the sweep leaves its floor alone this long (a run of it still fills it, one
#: sandbox at a time until a fill succeeds): never a failing fill a second, whatever broke
FILL_RETRY_S = 30.0


@dataclass(frozen=True, slots=True)
class PoolKey:
    """What a sandbox is fixed to once started: only a run with the same key may claim it."""

    profile: str  # the profile's name (its hash covers it): what the key's floor and ceiling are set by
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
class _Key:
    """One key's sandboxes and what sizes it."""

    bounds: KeyBounds
    last_used: float  # monotonic: its latest claim or announced run
    template: LaunchSpec | None = None  # a run's spec of this key: what a sandbox for it is created from
    ready: collections.deque[PooledSandbox] = field(default_factory=collections.deque)
    filling: int = 0
    demand: Demand = field(default_factory=Demand)
    fill_time: FillTime = field(default_factory=FillTime)
    fill_failed: bool = False  # its latest fill failed: filled one at a time until one succeeds
    retry_at: float = 0.0  # monotonic: the sweep keeps its floor no sooner (after a failed fill)
    gone: str | None = None  # retired or drained (the reason): a fill that ends now destroys its sandbox


@dataclass
class ProfileCounts:
    """What happened to one profile's claims and sandboxes since the pool began."""

    hits: int = 0  # claims that took a ready sandbox
    misses: int = 0  # claims that found none (the run started cold)
    fills_failed: int = 0
    discarded: collections.Counter[str] = field(default_factory=collections.Counter)  # by reason

    def copy(self) -> ProfileCounts:
        return ProfileCounts(self.hits, self.misses, self.fills_failed, collections.Counter(self.discarded))


@dataclass(frozen=True, slots=True)
class ProfilePool:
    """One profile's part of the pool now: its keys together, and its counts."""

    profile: str
    keys: int
    ready: int
    filling: int
    target: int  # what its keys are kept at now, together
    counts: ProfileCounts


class SandboxPool:
    """Pre-started sandboxes of ``backend`` (one whose ``capabilities.can_pool``), per key; ``record`` writes
    their evidence."""

    def __init__(self, backend: SandboxBackend, settings: PoolSettings, record: Record) -> None:
        if not backend.capabilities.can_pool:  # the Runner makes none then: never a pool that cannot fill
            raise ValueError(f"the {type(backend).__name__} cannot pre-start sandboxes as configured")
        self.backend = backend
        self.settings = settings
        self._record = record
        self._keys: dict[PoolKey, _Key] = {}
        self._counts: dict[str, ProfileCounts] = collections.defaultdict(ProfileCounts)
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        # the definition in force of each profile that changed since the pool began (None: removed): a run's spec
        # of another one fills nothing (profiles not listed never changed: any spec of theirs is current)
        self._definitions: dict[str, str | None] = {}
        self._closed = False
        # sandbox ids handed out, the latest (each once: tests and benchmarks check)
        self.served: collections.deque[str] = collections.deque(maxlen=SERVED_KEPT)

    def _key(self, key: PoolKey, now: float) -> _Key:
        state = self._keys.get(key)
        if state is None:
            state = self._keys[key] = _Key(self.settings.bounds(key.profile), now)
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep(), name="pool-sweeper")
        return state

    # -- claims ------------------------------------------------------------------------------------------

    async def claim(self, key: PoolKey) -> PooledSandbox | None:
        """A ready sandbox of exactly ``key``, removed from the pool (never handed out again) and seen
        still waiting (its init alive: one that died meanwhile is discarded, never handed out); None at once
        if none is (a miss: the caller starts one cold). Never waits for a fill. Hit or miss, the claim is
        the key's demand. The caller ``release``s it once it was destroyed."""
        if self._closed:
            return None
        now = time.monotonic()
        state = self._key(key, now)
        state.demand.claimed(now, state.fill_time.window_s())
        state.last_used = now
        counts = self._counts[key.profile]
        while state.ready:
            pooled = state.ready.popleft()  # popped before any await: no other claim can take it
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
            counts.hits += 1
            return pooled
        counts.misses += 1
        return None

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

    def want(self, key: PoolKey, template: LaunchSpec, *, announced: bool = False) -> None:
        """A run of ``key`` is over (cold or from the pool), or one is ``announced`` (``Orchestrator.prestart``:
        at least one is wanted, as a claim would be): fill the key up to its target, within ``max_total``.
        ``template``: that run's spec (argv, env and its kind are not used)."""
        if self._closed or not self._current(template):
            return
        now = time.monotonic()
        state = self._key(key, now)
        state.template = template
        state.last_used = now
        if announced:
            state.demand.expect(now)
        self._top_up(key, state, self._target(state, now))

    def _current(self, template: LaunchSpec) -> bool:
        """Whether ``template``'s profile is the definition in force (one resolved before its profile changed
        is not: a sandbox filled from it would have the old settings)."""
        profile = template.profile
        return self._definitions.get(profile.name, profile.definition_sha256) == profile.definition_sha256

    def _target(self, state: _Key, now: float) -> int:
        return target(state.demand.level(now, self.settings.shrink_after_s), state.bounds)

    def _top_up(self, key: PoolKey, state: _Key, up_to: int) -> None:
        """Begin the fills ``key`` is short of ``up_to``; one at a time while its fills fail."""
        if state.template is None or state.gone is not None:
            return
        wanted = fills_wanted(up_to, len(state.ready), state.filling, self.settings.max_total - self._size())
        if state.fill_failed:
            wanted = min(wanted, 1 - state.filling)
        for _ in range(wanted):
            state.filling += 1
            self._spawn(self._fill(key, state))

    def _size(self) -> int:
        return sum(len(d.ready) + d.filling for d in self._keys.values())

    # -- filling -----------------------------------------------------------------------------------------

    async def _fill(self, key: PoolKey, state: _Key) -> None:
        assert state.template is not None  # _top_up fills only a key a run's spec was given for
        began = time.monotonic()
        pool_id = new_execution_id()
        ttl = self.settings.ttl_s
        # its deadline label: a run that claims it at the end of its TTL still has its wall time and grace
        deadline = time.time() + ttl + state.template.profile.wall_timeout_s + DEADLINE_GRACE_S
        # its labels follow: its pool id, its deadline, the run's owner and profile
        spec = dataclasses.replace(
            state.template,
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
                self._fill_failed(key, state)
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
            state.fill_time.observe(time.monotonic() - began)
            state.fill_failed = False
            if not self._closed and state.gone is None:
                state.ready.append(pooled)
            else:  # the pool closed, or the key's workspace went away (or the pool was drained) while it was filled
                self._spawn(self._discard(pooled, "closed" if self._closed else state.gone or "closed"))
        except Exception as exc:  # the key stays cold; its next run asks again
            log.warning("pre-starting a sandbox failed: %s: %s", type(exc).__name__, exc)
            self._fill_failed(key, state)
        finally:
            state.filling -= 1
            events.cancel()
            if not kept:  # whatever stopped it: its sandbox is destroyed, never left running unlisted
                if handle is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(self.backend.destroy(handle))
                THIS_PROCESS.release(pool_id)

    def _fill_failed(self, key: PoolKey, state: _Key) -> None:
        self._counts[key.profile].fills_failed += 1
        state.fill_failed = True
        state.retry_at = time.monotonic() + FILL_RETRY_S

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
        self._counts[pooled.key.profile].discarded[reason] += 1
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

    def _forget(self, key: PoolKey, reason: str) -> int:
        """``key`` goes: its ready sandboxes are destroyed (``reason``), its fills under way destroy theirs when
        they end. How many were ready."""
        state = self._keys.pop(key)
        state.gone = reason
        destroyed = len(state.ready)
        while state.ready:
            self._spawn(self._discard(state.ready.popleft(), reason))
        return destroyed

    def retire(self, workspace: str) -> int:
        """The workspace at ``workspace`` (a local path, as keys hold it) is about to be removed: its ready
        sandboxes are destroyed (``sandbox_discarded``, reason ``workspace_retired``), fills under way destroy
        theirs when they end, and its keys are forgotten (a later run there fills anew). How many were ready."""
        return sum(
            self._forget(key, "workspace_retired") for key in [k for k in self._keys if k.workspace == workspace]
        )

    def drain_profiles(self, definitions: Mapping[str, str | None]) -> int:
        """The profiles named changed (``definitions``: each one's definition_sha256 now, None when it was removed
        or cannot run): each key of one goes (its ready sandboxes destroyed, ``sandbox_discarded`` with reason
        ``profile_changed``; its fills under way destroy theirs when they end), and from now on only a run's spec
        of the new definition fills one (``want``). Runs under way keep what they started with. Call it on the
        pool's own event loop. How many were ready."""
        self._definitions.update(definitions)
        return sum(self._forget(key, "profile_changed") for key in [k for k in self._keys if k.profile in definitions])

    async def _sweep(self) -> None:
        while not self._closed:
            await asyncio.sleep(SWEEP_S)
            try:
                self._sweep_once(time.monotonic())
            except Exception:  # a bug: logged, and the next sweep still expires what is due
                log.exception("the pool's sweep failed")

    def _sweep_once(self, now: float) -> None:
        """Each key: its expired sandboxes destroyed, those above its target retired (the oldest first), its
        floor kept while a run used it within ttl_s (not for FILL_RETRY_S after a failed fill), else forgotten
        once empty."""
        for key, state in list(self._keys.items()):
            while state.ready and state.ready[0].expires <= now:
                self._spawn(self._discard(state.ready.popleft(), "expired"))
            for _ in range(surplus(self._target(state, now), len(state.ready))):
                self._spawn(self._discard(state.ready.popleft(), "surplus"))
            if now - state.last_used < self.settings.ttl_s:
                if now >= state.retry_at:
                    self._top_up(key, state, state.bounds.floor)
            elif not state.ready and not state.filling:
                del self._keys[key]

    def _spawn(self, work: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Destroy every ready sandbox and those being filled as they end, and forget every key (e.g. after the
        profiles changed: a key of the old ones would be filled for no run)."""
        for key in list(self._keys):
            self._forget(key, "drained")
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """Destroy every ready sandbox (fills under way destroy theirs when they end)."""
        self._closed = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for state in self._keys.values():
            while state.ready:
                self._spawn(self._discard(state.ready.popleft(), "closed"))
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def profiles(self) -> list[ProfilePool]:
        """Each profile's part of the pool now, by name: those with a key now or a count since the start."""
        now = time.monotonic()
        names = sorted({k.profile for k in self._keys} | set(self._counts))
        parts = []
        for name in names:
            states = [s for k, s in self._keys.items() if k.profile == name]
            parts.append(
                ProfilePool(
                    profile=name,
                    keys=len(states),
                    ready=sum(len(s.ready) for s in states),
                    filling=sum(s.filling for s in states),
                    target=sum(self._target(s, now) for s in states),
                    counts=self._counts[name].copy(),
                )
            )
        return parts

    def describe(self) -> dict[str, Any]:
        now = time.monotonic()
        return {
            "keys": len(self._keys),
            "ready": sum(len(d.ready) for d in self._keys.values()),
            "filling": sum(d.filling for d in self._keys.values()),
            "target": sum(self._target(d, now) for d in self._keys.values()),
            "served": len(self.served),
        }
