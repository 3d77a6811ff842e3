"""Execution changes fanned out to `/v1/events` listeners (the approvals page), each listener with a
bounded queue: one that falls behind loses old events and is told to reload, never holds memory.
At shutdown every listener gets ``None``: its stream ends at once instead of at its next keep-alive."""

from __future__ import annotations

import asyncio
import contextlib

from orchestrator.domain.principal import Principal
from orchestrator.domain.wire import ExecutionView

QUEUE_SIZE = 256


class Listener:
    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.queue: asyncio.Queue[ExecutionView | None] = asyncio.Queue(QUEUE_SIZE)
        self.overflowed = False


class EventHub:
    def __init__(self) -> None:
        self.listeners: set[Listener] = set()

    def publish(self, view: ExecutionView) -> None:
        for listener in self.listeners:
            if not listener.principal.sees(view.tenant):
                continue
            try:
                listener.queue.put_nowait(view)
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
