"""Execution changes fanned out to `/v1/events` listeners (the approvals page), each listener with a
bounded queue: one that falls behind loses old events and is told to reload, never holds memory.
At shutdown every listener gets ``None``: its stream ends at once instead of at its next keep-alive."""

from __future__ import annotations

import asyncio
import contextlib

from orchestrator.domain.errors import RateLimited
from orchestrator.domain.principal import Principal
from orchestrator.domain.wire import ExecutionView

QUEUE_SIZE = 256
MAX_PER_SUBJECT = 8  # an approvals page or two per person, with room for reloads
MAX_LISTENERS = 512


class Listener:
    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.queue: asyncio.Queue[str | None] = asyncio.Queue(QUEUE_SIZE)  # JSON of changed executions
        self.overflowed = False


class EventHub:
    def __init__(self) -> None:
        self.listeners: set[Listener] = set()

    def join(self, principal: Principal) -> Listener:
        """A new listener, within the caps (REQUEST.RATE_LIMITED past them)."""
        mine = sum(1 for listener in self.listeners if listener.principal.subject == principal.subject)
        if mine >= MAX_PER_SUBJECT or len(self.listeners) >= MAX_LISTENERS:
            raise RateLimited(
                f"too many open event streams (at most {MAX_PER_SUBJECT} per token, {MAX_LISTENERS} in all)"
            )
        listener = Listener(principal)
        self.listeners.add(listener)
        return listener

    def publish(self, view: ExecutionView) -> None:
        encoded: str | None = None  # once, whatever the number of listeners
        for listener in self.listeners:
            if not listener.principal.sees(view.tenant):
                continue
            encoded = encoded or view.model_dump_json()
            try:
                listener.queue.put_nowait(encoded)
            except asyncio.QueueFull:
                listener.overflowed = True

    def close(self) -> None:
        """The service is stopping: every open stream ends now (an open page would otherwise hold the
        shutdown until its next keep-alive, up to ``HEARTBEAT_S``)."""
        for listener in self.listeners:
            if listener.queue.full():  # the end matters more than an event the page would reload anyway
                with contextlib.suppress(asyncio.QueueEmpty):
                    listener.queue.get_nowait()
            listener.queue.put_nowait(None)
