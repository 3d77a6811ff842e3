"""Output shown while the command runs: redacted and capped exactly as the kept result will be.

The backend hands over raw chunks of what it keeps (on the event loop); each stream goes through its own
:class:`StreamRedactor` with the profile's cap, and whatever may be shown goes to the caller, in order.
:meth:`LiveOutput.finish` adds what was held back once the capture ended. Put together, a stream's chunks
are the execution result's output for it: both are the redactor's capped view of the same captured bytes.

The caller's callback must never break a run: if it raises, that is logged (the exception's type only: its
message may quote the output) and it is not called again. The same holds for a failure here: the result
is computed apart from this.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from orchestrator.backends.base import OutputCallback, OutputStream, StreamCapture
from orchestrator.profiles import ResolvedProfile
from orchestrator.results import Redactor
from orchestrator.results.stream_redact import StreamRedactor

log = logging.getLogger(__name__)


class LiveOutput:
    def __init__(
        self,
        redactor: Redactor,
        profile: ResolvedProfile,
        callback: OutputCallback,
        on_capped: Callable[[OutputStream], None] | None = None,
    ) -> None:
        """``on_capped(stream)``: once per stream, as soon as it is known that not all of it will be shown
        (it passed the profile's cap)."""
        self._callback: OutputCallback | None = callback
        self._on_capped = on_capped
        self._capped: set[OutputStream] = set()
        self._streams: dict[OutputStream, StreamRedactor] = {
            "stdout": StreamRedactor(redactor, profile.stdout_max_bytes),
            "stderr": StreamRedactor(redactor, profile.stderr_max_bytes),
        }
        self._finished = False

    def feed(self, stream: OutputStream, data: bytes) -> None:
        """A raw chunk of what the backend keeps (its callback)."""
        if self._callback is None or self._finished:
            return
        redactor = self._streams[stream]
        try:
            shown = redactor.feed(data)
        except Exception as exc:  # a bug here must not reach the backend's reader, nor the run
            self._stop("redacting the live output", exc)
            return
        self._show(stream, shown)
        if redactor.truncated and stream not in self._capped:
            self._capped.add(stream)
            if self._on_capped is not None:
                try:
                    self._on_capped(stream)
                except Exception as exc:
                    log.warning("on_capped raised %s", type(exc).__name__)

    def finish(self, captures: tuple[StreamCapture, StreamCapture] | None) -> None:
        """What was held back, once (later calls do nothing). ``captures`` None: the capture did not end
        normally, so nothing is taken for the end of a stream (a secret cut there stays hidden)."""
        if self._finished:
            return
        self._finished = True
        ends = (None, None) if captures is None else captures
        for (stream, redactor), capture in zip(self._streams.items(), ends, strict=True):
            if self._callback is None:
                return
            try:
                shown = redactor.finish(complete=capture is not None and not capture.truncated)
            except Exception as exc:
                self._stop("redacting the live output", exc)
                return
            self._show(stream, shown)

    def _show(self, stream: OutputStream, data: bytes) -> None:
        if not data or self._callback is None:
            return
        try:
            self._callback(stream, data)
        except Exception as exc:
            self._stop("on_output", exc)

    def _stop(self, what: str, exc: Exception) -> None:
        log.warning("%s raised %s; the output is no longer streamed", what, type(exc).__name__)
        self._callback = None
