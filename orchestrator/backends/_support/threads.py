"""The thread bridge every backend needs: client libraries block, the service runs on an event loop.

:func:`in_daemon_thread` runs one call that blocks as long as a sandbox runs (wait, output) on a daemon
thread of its own, so a busy host cannot starve a pool and a stuck engine cannot keep the process from
exiting. :class:`ThreadPump` reads a blocking stream (engine events, a watch) on a daemon thread into an
asyncio queue until the stream ends or is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")
Item = TypeVar("Item")
Item_co = TypeVar("Item_co", covariant=True)


async def in_daemon_thread(fn: Callable[[], T], name: str) -> T:
    """Run ``fn`` on its own daemon thread; if the awaiting task is cancelled the call keeps running
    (the caller aborts its stream)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(value: T | None, exc: BaseException | None) -> None:
        if future.done():
            return
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(value)  # type: ignore[arg-type]

    def run() -> None:
        try:
            value = fn()
        except BaseException as exc:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(settle, None, exc)
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, value, None)

    threading.Thread(target=run, name=name, daemon=True).start()
    return await future


class ClosableStream(Protocol[Item_co]):
    """A blocking stream whose :meth:`close` is thread-safe and wakes a reader blocked in it."""

    @property
    def closed(self) -> bool: ...

    def __iter__(self) -> Iterator[Item_co]: ...

    def close(self) -> None: ...


class ThreadPump(Generic[Item]):
    """A daemon thread reading ``open_stream()`` into ``queue``: each item, an exception if opening or
    reading fails (or ``ended_early()`` if the stream ends without having been closed), then ``None``."""

    END = None

    def __init__(
        self,
        open_stream: Callable[[], ClosableStream[Item]],
        loop: asyncio.AbstractEventLoop,
        queue: asyncio.Queue[Item | BaseException | None],
        *,
        name: str,
        ended_early: Callable[[], BaseException] | None = None,
    ) -> None:
        self._open = open_stream
        self._loop = loop
        self._queue = queue
        self._ended_early = ended_early
        self._lock = threading.Lock()
        self._closed = False
        self._stream: ClosableStream[Item] | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _post(self, item: Item | BaseException | None) -> None:
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)

    def _run(self) -> None:
        try:
            stream = self._open()
        except Exception as exc:
            self._post(exc)
            self._post(self.END)
            return
        with self._lock:
            if self._closed:
                stream.close()
                self._post(self.END)
                return
            self._stream = stream
        try:
            for item in stream:
                self._post(item)
            if not stream.closed and self._ended_early is not None:
                self._post(self._ended_early())
        except Exception as exc:
            self._post(exc)
        finally:
            self._post(self.END)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            stream = self._stream
        if stream is not None:
            stream.close()
