"""Connections that never become requests: a client must send its headers within
``header_timeout_s``, and no more than ``max_pending_connections`` may be waiting for theirs. aiohttp has
no header timeout of its own: without this, anyone — no token needed — could hold connections (and file
descriptors) for ever by trickling a request line."""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from typing import Any

from aiohttp import web

SWEEP_EVERY_S = 0.5
SERVED = web.AppKey("served-transports", weakref.WeakSet)


def mark_served(request: web.Request) -> None:
    """Called for every request that got as far as a handler: its connection sent its headers."""
    transport = request.transport
    if transport is not None:
        request.app[SERVED].add(transport)


class ConnectionGuard:
    def __init__(self, runner: web.AppRunner, header_timeout_s: float, max_pending: int) -> None:
        self.runner = runner
        self.header_timeout_s = header_timeout_s
        self.max_pending = max_pending
        self.closed = 0
        self._first_seen: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._sweep_forever(), name="connection-guard")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _sweep_forever(self) -> None:
        while True:
            self.sweep()
            await asyncio.sleep(SWEEP_EVERY_S)

    def sweep(self) -> None:
        server = self.runner.server
        if server is None:
            return
        served = self.runner.app[SERVED]
        now = time.monotonic()
        pending: list[tuple[float, Any]] = []
        for handler in list(server.connections):
            transport = handler.transport
            if transport is None or transport.is_closing():
                continue
            first = self._first_seen.setdefault(transport, now)
            if transport in served:
                continue
            if now - first > self.header_timeout_s:
                self._close(transport)
            else:
                pending.append((first, transport))
        # past the cap, the newest waiting connections go first (the older ones are closer to a request)
        pending.sort(key=lambda item: item[0])
        for _, transport in pending[self.max_pending :]:
            self._close(transport)

    def _close(self, transport: Any) -> None:
        self.closed += 1
        transport.close()
