"""Runs whose end their sandbox's init reported: the engine's confirmation and the sandbox's removal, after
the end record (``executor._confirm_end``), as tasks this process keeps until they end.

The caller is answered from the init's report; what follows is bookkeeping the evidence still needs (the
engine's own end, a disagreement noted, the sandbox removed), never on the caller's path. Closing waits
for them, bounded: a sandbox left behind then is an orphan the collector removes (our labels, its deadline).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)

#: how long closing waits for the confirmations under way (each is bounded by its backend's wait, ~10 s)
CLOSE_WAIT_S = 30.0


class Confirmations:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, confirm: Callable[[], Awaitable[None]]) -> None:
        task = asyncio.ensure_future(self._run(confirm))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _run(confirm: Callable[[], Awaitable[None]]) -> None:
        try:
            await confirm()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # its records say what is missing; the collector removes what is left
            log.warning("confirming a reported end failed: %s: %s", type(exc).__name__, exc)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def settle(self) -> None:
        """Until every confirmation started so far ended (tests, benchmarks, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        try:
            async with asyncio.timeout(CLOSE_WAIT_S):
                await self.settle()
        except TimeoutError:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
