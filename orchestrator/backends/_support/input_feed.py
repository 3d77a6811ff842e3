"""A session's stdin, written on a thread of its own.

A command that does not read its stdin makes the writer block once the pipe (or socket) is full: that
must never be the caller's wait, nor hold one of a backend's pool threads. So input is queued and one
daemon thread per session writes it, in order; the queue is bounded in bytes (INPUT_BACKLOG_BYTES) so a
session cannot make the controller hold more than that of input nobody reads.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable

from orchestrator.backends.base import INPUT_BACKLOG_BYTES
from orchestrator.domain.errors import InputInvalid, SandboxUnavailable

log = logging.getLogger(__name__)


class InputClosed(Exception):
    """The input was closed (end_input, the sandbox gone, or the writer failed)."""


class InputBacklog(Exception):
    """More input waits unread than the bound allows."""


class InputFeed:
    """``write(data)`` sends to the sandbox (blocking is fine: only the feed's thread calls it);
    ``close_input()`` sends EOF. Both are called on the feed's thread only, in order."""

    def __init__(
        self,
        name: str,
        write: Callable[[bytes], None],
        close_input: Callable[[], None],
        limit: int = INPUT_BACKLOG_BYTES,
    ) -> None:
        self._write = write
        self._close_input = close_input
        self._limit = limit
        self._queue: collections.deque[bytes | None] = collections.deque()
        self._queued = 0
        self._closed = False
        self._failed = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name=f"stdin-{name}", daemon=True)
        self._thread.start()

    def send(self, data: bytes) -> None:
        with self._wake:
            if self._closed or self._failed:
                raise InputClosed("the session's input is closed")
            if self._queued + len(data) > self._limit:
                raise InputBacklog(f"more than {self._limit} bytes of input wait unread")
            if data:
                self._queue.append(data)
                self._queued += len(data)
                self._wake.notify()

    def end(self) -> None:
        """EOF after what is queued; idempotent."""
        with self._wake:
            if self._closed:
                return
            self._closed = True
            self._queue.append(None)
            self._wake.notify()

    def abandon(self) -> None:
        """The sandbox is gone: drop what is queued and let the thread end (it may be blocked in a write
        until the backend closes the connection)."""
        with self._wake:
            self._closed = True
            self._failed = True
            self._queue.clear()
            self._queued = 0
            self._queue.append(None)
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._queue:
                    self._wake.wait()
                item = self._queue.popleft()
                if item is not None:
                    self._queued -= len(item)
            try:
                if item is None:
                    if not self._failed:
                        self._close_input()
                    return
                self._write(item)
            except Exception as exc:  # the sandbox went away mid-write: nothing more can be sent
                log.debug("session input stopped: %s", type(exc).__name__)
                with self._wake:
                    self._failed = True
                    self._queue.clear()
                    self._queued = 0
                return


def send_to(feed: InputFeed, sandbox: str, data: bytes) -> None:
    """``feed.send`` as a backend's ``send_input`` answers: a closed input is the caller's mistake for
    good (INPUT.INVALID), a backlog may clear once the command reads (SANDBOX.UNAVAILABLE)."""
    try:
        feed.send(data)
    except InputClosed as exc:
        raise InputInvalid(f"{sandbox}: {exc}", details={"sandbox": sandbox}) from None
    except InputBacklog as exc:
        raise SandboxUnavailable(f"{sandbox}: {exc}", details={"sandbox": sandbox}) from None
