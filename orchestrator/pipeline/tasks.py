"""Tasks: background ones that never vanish (a crash is logged with its cause and kept for inspection), and
steps that finish despite a cancellation (an end record is never cut off half-way)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


class Guarded:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[Any]] = set()
        self.failures: list[tuple[str, BaseException]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.failures.append((task.get_name(), exc))
            log.error("background task %s crashed: %s: %s", task.get_name(), type(exc).__name__, exc)

    async def cancel_all(self) -> None:
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def cancel_reason(cancel: asyncio.CancelledError, default: str) -> str:
    """The message a canceller gave ``Task.cancel(msg)`` (the service names who asked), or ``default``."""
    given = cancel.args[0] if cancel.args and isinstance(cancel.args[0], str) else ""
    return f"{default}: {given}" if given else default


async def despite_cancellation(step: Coroutine[Any, Any, object]) -> None:
    """Run ``step`` to its end even if this task is cancelled again meanwhile (a second Ctrl-C or
    SIGTERM): an end record must not be cut off half-way. The cancellation is delivered afterwards."""
    task = asyncio.ensure_future(step)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True
        except Exception:
            break
    if not task.cancelled() and task.exception() is not None:
        log.warning("could not record the end of an interrupted execution: %s", task.exception())
    if cancelled:
        raise asyncio.CancelledError
