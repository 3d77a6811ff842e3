"""One watch over every pod of ours in the sandbox namespace, shared by all executions.

A daemon thread lists the pods (our managed-by label), then watches from the list's resourceVersion,
resuming from the last one seen when a watch ends (the server closes them after ``timeoutSeconds``) and
listing again when the server answers 410 Gone (the version was compacted away). On the event loop each
snapshot updates that pod's :class:`~lifecycle.PodLifecycle`; the lifecycle events go to whoever
subscribed (one execution, or all), and anyone waiting for a pod to reach a state is woken.

A pod that a re-list no longer shows was deleted while the watch was away: it is reported deleted, with
the last deletion time the server gave (or, if it never gave one, the time it was found gone).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from orchestrator.backends.base import LifecycleEvent
from orchestrator.backends.kubernetes.kube import JsonObject, KubeClient, KubeError
from orchestrator.backends.kubernetes.lifecycle import PodLifecycle, execution_of, pod_name

log = logging.getLogger(__name__)

WATCH_TIMEOUT_S = 240
RETRY_DELAY_S = 0.5
#: lifecycle state kept for pods already deleted (late readers), the oldest dropped past this many
KEPT_GONE = 512


@dataclass(frozen=True, slots=True)
class _Snapshot:
    pod: JsonObject
    deleted: bool


@dataclass(frozen=True, slots=True)
class _Relisted:
    names: frozenset[str]


@dataclass(eq=False)
class _Tracked:
    lifecycle: PodLifecycle = field(default_factory=PodLifecycle)
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class PodWatch:
    """Started once per backend (:meth:`start`); :meth:`close` stops the thread."""

    def __init__(self, kube: KubeClient, namespace: str, selector: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._selector = selector
        self._pods: dict[str, _Tracked] = {}
        self._gone: collections.deque[str] = collections.deque()
        self._subscribers: dict[str | None, set[asyncio.Queue[LifecycleEvent | BaseException]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._stream_lock = threading.Lock()
        self._stream: Callable[[], None] | None = None
        self._synced = asyncio.Event()
        self._failure: KubeError | None = None
        self._thread: threading.Thread | None = None

    # -- on the loop ----------------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="k8s-pod-watch", daemon=True)
        self._thread.start()

    async def synced(self, timeout: float) -> None:
        """Wait for the first list (so nothing created after this call can be missed)."""
        async with asyncio.timeout(timeout):
            await self._synced.wait()

    def subscribe(self, execution_id: str | None) -> asyncio.Queue[LifecycleEvent | BaseException]:
        queue: asyncio.Queue[LifecycleEvent | BaseException] = asyncio.Queue()
        self._subscribers.setdefault(execution_id, set()).add(queue)
        return queue

    def unsubscribe(self, execution_id: str | None, queue: asyncio.Queue[LifecycleEvent | BaseException]) -> None:
        queues = self._subscribers.get(execution_id)
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._subscribers[execution_id]

    def last(self, name: str) -> JsonObject | None:
        tracked = self._pods.get(name)
        return None if tracked is None else tracked.lifecycle.last

    def gone(self, name: str) -> bool:
        tracked = self._pods.get(name)
        return tracked is not None and tracked.lifecycle.done()

    async def until(self, name: str, ready: Callable[[JsonObject | None, bool], bool], timeout: float | None) -> None:
        """Wait until ``ready(last snapshot, gone)`` holds for pod ``name``."""
        tracked = self._pods.setdefault(name, _Tracked())
        async with asyncio.timeout(timeout):
            while True:
                if self._failure is not None:
                    raise self._failure
                if ready(tracked.lifecycle.last, tracked.lifecycle.done()):
                    return
                tracked.changed.clear()
                await tracked.changed.wait()

    def _apply(self, item: _Snapshot | _Relisted | KubeError) -> None:
        if isinstance(item, KubeError):
            self._failure = item
            self._broadcast(None, item)
            for tracked in self._pods.values():
                tracked.changed.set()
            return
        self._failure = None
        if isinstance(item, _Relisted):
            self._synced.set()
            for name, tracked in list(self._pods.items()):
                last = tracked.lifecycle.last
                if name not in item.names and last is not None and not tracked.lifecycle.done():
                    self._update(last, deleted=True)
            return
        self._update(item.pod, deleted=item.deleted)

    def _update(self, pod: JsonObject, *, deleted: bool) -> None:
        name = pod_name(pod)
        tracked = self._pods.setdefault(name, _Tracked())
        for event in tracked.lifecycle.update(pod, deleted=deleted):
            self._broadcast(execution_of(pod), event)
        tracked.changed.set()
        if deleted:  # every pod of ours in the namespace passes here (other controllers' too): bounded
            self._gone.append(name)
            while len(self._gone) > KEPT_GONE:
                self._pods.pop(self._gone.popleft(), None)

    def _broadcast(self, execution_id: str | None, item: LifecycleEvent | BaseException) -> None:
        targets = set(self._subscribers.get(None, ()))
        if execution_id is not None:
            targets |= self._subscribers.get(execution_id, set())
        elif isinstance(item, BaseException):
            targets = {q for queues in self._subscribers.values() for q in queues}
        for queue in targets:
            queue.put_nowait(item)

    # -- on the watch thread ----------------------------------------------------------------------------

    def _post(self, item: _Snapshot | _Relisted | KubeError) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed
            loop.call_soon_threadsafe(self._apply, item)

    def _run(self) -> None:
        version = ""
        failures = 0
        while not self._stop.is_set():
            try:
                if not version:
                    pods, version = self._kube.list_pods(self._namespace, self._selector)
                    for pod in pods:
                        self._post(_Snapshot(pod, deleted=False))
                    self._post(_Relisted(frozenset(pod_name(pod) for pod in pods)))
                version = self._watch_from(version)
                failures = 0
            except KubeError as exc:
                if self._stop.is_set():
                    return
                if exc.kind == "gone":
                    version = ""  # compacted: list again
                    continue
                failures += 1
                if failures >= 3:  # say so only if it lasts; a single broken watch is routine
                    self._post(exc)
                version = ""
                self._stop.wait(min(RETRY_DELAY_S * failures, 5.0))

    def _watch_from(self, version: str) -> str:
        stream = self._kube.watch_pods(self._namespace, self._selector, version, WATCH_TIMEOUT_S)
        with self._stream_lock:
            if self._stop.is_set():
                stream.close()
                return version
            self._stream = stream.close
        try:
            for item in stream:
                if item.type == "ERROR":
                    code = item.object.get("code")
                    if code == 410:
                        raise KubeError("gone", "watch pods", str(item.object.get("message") or "too old"), 410)
                    raise KubeError("server", "watch pods", str(item.object.get("message") or item.object), code)
                new_version = (item.object.get("metadata") or {}).get("resourceVersion")
                if isinstance(new_version, str) and new_version:
                    version = new_version
                if item.type != "BOOKMARK":
                    self._post(_Snapshot(item.object, deleted=item.type == "DELETED"))
        finally:
            with self._stream_lock:
                self._stream = None
            stream.close()
        return version

    def close(self) -> None:
        self._stop.set()
        with self._stream_lock:
            close = self._stream
        if close is not None:
            close()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
