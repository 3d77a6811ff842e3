"""Execution changes fanned out to `/v1/events` listeners (the approvals page), each listener with a
bounded queue: one that falls behind loses old events and is told to reload, never holds memory."""

from __future__ import annotations

import asyncio

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
