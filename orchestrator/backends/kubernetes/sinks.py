"""Where a pod's output goes once ``capture()`` brings its sinks; until then its readers wait.

A reader thread that has output before the sinks are there blocks (and with it the stream, and the
command's writes: back-pressure, never an unbounded buffer); ``close()`` releases it for good.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Deliver = Callable[[bytes], None]


class SinksClosed(Exception):
    """The stdio was closed while output waited for its sinks."""


class Sinks:
    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._sinks: dict[str, Deliver] | None = None
        self.closed = False

    def attach(self, stdout: Deliver, stderr: Deliver) -> None:
        with self._ready:
            self._sinks = {"stdout": stdout, "stderr": stderr}
            self._ready.notify_all()

    def close(self) -> None:
        with self._ready:
            self.closed = True
            self._ready.notify_all()

    def deliver(self, stream: str, data: bytes) -> None:
        """``data`` of ``stream`` to its sink, once there is one (raises SinksClosed once closed)."""
        with self._ready:
            while self._sinks is None and not self.closed:
                self._ready.wait()
            if self.closed or self._sinks is None:
                raise SinksClosed
            sink = self._sinks[stream]
        sink(data)

    def if_open(self, action: Callable[[], None]) -> bool:
        """Run ``action`` unless closed, atomically with ``close()``; False if closed."""
        with self._ready:
            if self.closed:
                return False
            action()
            return True
