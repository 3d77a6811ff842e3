"""Output read on a thread, handed to a callback on the event loop.

A backend reads a sandbox's output on a thread of its own (the client libraries block). The reader
:meth:`~OutputRelay.post`\\ s each chunk; the callback runs on the loop, never on the reader thread, in the
order the chunks were read. Chunks wait in one queue, merged with the one before from the same stream up to
``max_chunk`` bytes, and one wake-up of the loop delivers them all. Deliveries are paced: the first chunk
goes at once, but under continuous output the loop drains at most once per ``pace`` seconds, so a sandbox
writing a byte at a time cannot keep the loop busy with one callback per write (each costs a redaction
pass). The queue holds only what the caller posts: a backend posts only what it keeps, so the queue never
holds more than the capture's own limits.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading

from orchestrator.backends.base import OutputCallback, OutputStream

log = logging.getLogger(__name__)


class OutputRelay:
    """From one reader thread to ``callback`` on ``loop``. :meth:`drain` and :meth:`close` run on the loop."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, callback: OutputCallback, *, max_chunk: int, pace: float
    ) -> None:
        self._loop = loop
        self._callback: OutputCallback | None = callback
        self._max_chunk = max_chunk
        self._pace = pace
        self._last_drain = -pace
        self._lock = threading.Lock()
        self._queue: collections.deque[tuple[OutputStream, bytes]] = collections.deque()
        self._scheduled = False
        self._closed = False

    def set_pace(self, pace: float) -> None:
        """Another pace from the next drain on (a pre-started sandbox turns out to run a session)."""
        self._pace = pace

    def post(self, stream: OutputStream, data: bytes) -> None:
        """From the reader thread: queue ``data`` and wake the loop if it is not already due to drain."""
        if not data:
            return
        with self._lock:
            if self._closed:
                return
            last = self._queue[-1] if self._queue else None
            if last is not None and last[0] == stream and len(last[1]) + len(data) <= self._max_chunk:
                self._queue[-1] = (stream, last[1] + data)
            else:
                self._queue.append((stream, data))
            if self._scheduled:
                return
            self._scheduled = True
        try:
            # no arguments: a handle's repr (asyncio debug logs it) never carries output
            self._loop.call_soon_threadsafe(self._wake)
        except RuntimeError:  # the loop is closed: nobody is listening any more
            self.close()

    def _wake(self) -> None:
        wait = self._last_drain + self._pace - self._loop.time()
        if wait > 0:
            self._loop.call_later(wait, self.drain)
        else:
            self.drain()

    def drain(self) -> None:
        """Deliver what is queued (on the loop). A callback that raises is logged by type and dropped."""
        self._last_drain = self._loop.time()
        with self._lock:
            chunks = list(self._queue)
            self._queue.clear()
            self._scheduled = False
        for stream, data in chunks:
            callback = self._callback
            if callback is None:
                return
            try:
                callback(stream, data)
            except Exception as exc:  # never the message: it may quote the output
                log.warning("an output callback raised %s; it gets no more output", type(exc).__name__)
                self._callback = None

    def close(self) -> None:
        """No more deliveries; what is still queued is dropped."""
        with self._lock:
            self._closed = True
            self._queue.clear()
        self._callback = None
