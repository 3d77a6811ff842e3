"""Bounded capture of one output stream: keep the first ``limit`` bytes, count everything.

Memory stays at ``limit`` bytes whatever the total (gigabytes are counted, not held). Nothing here hashes
the raw output: it may hold secrets, and a hash of a low-entropy secret confirms a guess. The caller
redacts, then caps (it asks for more than its cap: see ``Redactor.redact_capped``). Pure code: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.backends.base import StreamCapture


class StreamSink:
    """One output stream: the first ``limit`` bytes kept, every byte counted; ``tap``, if given, gets each
    piece that is kept as it is written (nothing past the limit)."""

    __slots__ = ("_data", "_tap", "limit", "total")

    def __init__(self, limit: int, tap: Callable[[bytes], None] | None = None) -> None:
        if limit < 0:
            raise ValueError("limit must be >= 0")
        self.limit = limit
        self.total = 0
        self._data = bytearray()
        self._tap = tap

    def write(self, chunk: bytes | memoryview) -> None:
        size = len(chunk)
        if not size:
            return
        self.total += size
        room = self.limit - len(self._data)
        if room > 0:
            kept = chunk[:room]
            self._data += kept
            if self._tap is not None:
                self._tap(bytes(kept))

    def result(self) -> StreamCapture:
        return StreamCapture(
            data=bytes(self._data),
            total_bytes=self.total,
            truncated=self.total > self.limit,
        )
