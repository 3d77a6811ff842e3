"""Server-Sent Events: one writer per client, each write bounded in time (a client that never reads is
dropped, never buffered without end)."""

from __future__ import annotations

import asyncio

from aiohttp import web

WRITE_TIMEOUT_S = 30.0
HEARTBEAT_S = 15.0


class EventStream:
    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    @classmethod
    async def open(cls, request: web.Request) -> EventStream:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        return cls(response)

    async def send(self, event: str, data: str, event_id: str | None = None) -> None:
        lines = [f"event: {event}"]
        if event_id is not None:
            lines.append(f"id: {event_id}")
        lines.extend(f"data: {line}" for line in data.split("\n"))  # JSON has no raw newlines; kept safe
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await self.response.write(("\n".join(lines) + "\n\n").encode("utf-8"))

    async def comment(self, text: str = "keep-alive") -> None:
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            await self.response.write(f": {text}\n\n".encode())
