"""The engine's multiplexed output stream, split into two bounded sinks (``_support.stream_sink``).

The engine multiplexes stdout and stderr on one connection (non-TTY containers) as frames::

    [stream type: 1 byte][0 0 0][payload length: uint32 big-endian][payload]

:class:`FrameDemuxer` parses that incrementally, chunk by chunk, and hands payload slices straight to
the sinks, so memory stays at ``limit`` bytes per stream plus one read buffer whatever the frame sizes
or the total output (gigabytes are counted, not held). Nothing here hashes the raw output: it may hold
secrets, and a hash of a low-entropy secret confirms a guess. The caller redacts, then caps (it asks for
more than its cap: see ``Redactor.redact_capped``). Pure code: no I/O.
"""

from __future__ import annotations

import struct

from orchestrator.backends._support.stream_sink import StreamSink

STDIN, STDOUT, STDERR, SYSTEMERR = 0, 1, 2, 3
HEADER_SIZE = 8
_HEADER = struct.Struct(">BxxxL")


class FrameDemuxer:
    """Incremental parser of the engine's multiplexed stdio stream."""

    __slots__ = ("_header", "_remaining", "_stderr", "_stdout", "_target")

    def __init__(self, stdout: StreamSink, stderr: StreamSink) -> None:
        self._stdout = stdout
        self._stderr = stderr
        self._header = bytearray()
        self._remaining = 0
        self._target: StreamSink = stdout

    @property
    def pending(self) -> bool:
        """True when the stream stopped inside a frame (the engine closed it mid-frame)."""
        return bool(self._header) or self._remaining > 0

    def feed(self, chunk: bytes) -> None:
        view = memoryview(chunk)
        pos = 0
        end = len(view)
        while pos < end:
            if self._remaining:
                take = min(self._remaining, end - pos)
                self._target.write(view[pos : pos + take])
                self._remaining -= take
                pos += take
                continue
            need = HEADER_SIZE - len(self._header)
            if need == HEADER_SIZE and end - pos >= HEADER_SIZE:
                kind, length = _HEADER.unpack_from(view, pos)
                pos += HEADER_SIZE
            else:
                self._header += view[pos : pos + need]
                pos += min(need, end - pos)
                if len(self._header) < HEADER_SIZE:
                    return
                kind, length = _HEADER.unpack(self._header)
                self._header.clear()
            # stdin echo (0) never occurs without a TTY; engine-side errors (3) go with stderr
            self._target = self._stdout if kind in (STDIN, STDOUT) else self._stderr
            self._remaining = length
