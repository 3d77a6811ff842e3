"""Streaming redaction: a command's output, redacted and capped while it is produced.

:class:`StreamRedactor` takes a stream chunk by chunk and returns, each time, what may be shown now. Put
together, what it shows is exactly what the :class:`Redactor` makes of the whole stream, whatever the
chunks -- with a cap, exactly what ``Redactor.redact_capped`` keeps of the stream's first
``limit + margin`` bytes (what the backend captures) -- so a secret split across chunks is never shown,
not even its first byte.

Held back until settled, and nothing else (ordinary text comes out as it arrives; a line ending in a
newline is settled, unless it is inside a private key block):

* the longest end of the text that begins a literal secret (or one of its encodings);
* an unfinished pattern match, as far as the secret goes (each built-in pattern comes with the regex of its
  beginnings): ``ghp_12…`` until the token ends, ``password=hun`` from ``hun`` until the value ends, an open
  private key block until its END line. Such a secret is held whole, however long, so its one marker comes
  out as on the whole stream; the backend's capture bounds what a stream can hold (``limit + margin``);
* an unfinished UTF-8 character: every piece decodes on its own, and the cap cuts as on the whole stream;
* with a cap, raw bytes past offset ``limit``, until the end (at most ``margin`` bytes): if the stream
  goes on past ``limit + margin`` they only served as look-ahead and are never shown, as in
  ``redact_capped``;
* with custom patterns (their beginnings are unknown): the last ``margin`` bytes.

Each chunk re-scans the part of the stream not yet settled, from a point no match crosses (so matching
resumes as on the whole stream), with :data:`LOOK_BEHIND` bytes before it for look-behinds. An unsettled
stretch longer than ``margin`` is scanned again only once it has grown by half: the work stays linear in
the stream however small the chunks (what follows such a stretch may then wait for that). Pure: no I/O.
"""

from __future__ import annotations

from orchestrator.results.redact import LOOK_BEHIND, Redactor, cap, marker


class StreamRedactor:
    """One output stream: :meth:`feed` each chunk, then :meth:`finish`; shows at most ``limit`` bytes
    (no cap when None). ``truncated`` says, as soon as it is known, that not all of the (redacted) stream
    is shown; from then on nothing more is."""

    def __init__(self, redactor: Redactor, limit: int | None = None) -> None:
        if limit is not None and limit < 0:
            raise ValueError("limit must be >= 0")
        self._redactor = redactor
        self._limit = limit
        self._margin = redactor.margin
        self._reach = None if limit is None else limit + self._margin  # raw bytes judged
        self._window = bytearray()  # the stream from raw offset _base on
        self._base = 0
        self._fed = 0  # raw bytes taken in (the rest past _reach is only noted)
        self._scanned = 0  # raw bytes taken in at the last scan
        self._shown = 0  # raw offset up to which output was produced
        self._resume = 0  # raw offset where matching resumes (no match crosses it)
        self._room = limit
        self._beyond = False  # bytes came past _reach: the stream is longer than what is judged
        self._closed = False
        self.truncated = False
        self.count = 0  # markers shown
        self._kinds: set[str] = set()

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of the secrets shown as markers, sorted."""
        return tuple(sorted(self._kinds))

    @property
    def held(self) -> int:
        """Raw bytes taken in but not yet settled."""
        return 0 if self._closed else self._fed - self._shown

    def feed(self, data: bytes) -> bytes:
        """Take the next chunk; return what may be shown now (often all of it)."""
        if self._closed or not data:
            return b""
        if self._reach is not None and self._fed + len(data) > self._reach:
            data = data[: self._reach - self._fed]
            self._beyond = True
        self._window += data
        self._fed += len(data)
        if self._beyond:  # past the reach the rest is only look-ahead: settle now, as redact_capped would
            return self._settle(final=True, complete=False)
        backlog = self._scanned - self._resume
        if backlog > self._margin and 2 * (self._fed - self._scanned) < backlog:
            # a long unsettled stretch (an open secret): scan it again once it grew by half, so that the
            # work stays linear in the stream however it is chunked
            return b""
        return self._settle(final=False, complete=False)

    def finish(self, *, complete: bool = True) -> bytes:
        """The rest, once the stream ended. ``complete=False``: it went on past what was fed (the capture
        kept only its beginning), so its last ``margin`` bytes are only look-ahead."""
        if self._closed:
            return b""
        return self._settle(final=True, complete=complete and not self._beyond)

    def _settle(self, *, final: bool, complete: bool) -> bytes:
        data = bytes(self._window)
        self._scanned = self._fed
        start = self._resume - self._base
        scan = self._redactor.scan_window(data, start, final=final)
        pos = self._shown - self._base
        hold = scan.hold
        for span_start, span_end, _ in scan.spans:  # never stop inside a secret
            if span_start < hold < span_end:
                hold = span_start
                break
        if final:
            end = len(data) if complete else max(pos, len(data) - self._margin)
        elif self._limit is None:
            end = hold
        else:  # past the raw limit only once the stream is known to end within the reach
            end = min(hold, self._limit - self._base)
        out = bytearray()
        for span_start, span_end, kind in scan.spans:
            if span_end <= pos:
                continue
            if span_start >= end:
                break
            # (a secret never crosses what was shown: max() only guards that no part of one ever is)
            if not self._show(out, data[pos : max(pos, span_start)]) or not self._show_marker(out, kind):
                return bytes(out)
            pos = span_end
        stop = end if final else _character_end(data, pos, end)
        if stop > pos:
            if not self._show(out, data[pos:stop]):
                return bytes(out)
            pos = stop
        self._shown = self._base + pos
        if final:
            self.truncated = self.truncated or not complete
            self._close()
        elif self._room == 0 and self._fed > self._shown:  # whatever it turns out to be, it cannot fit
            self._cut()
        else:
            self._advance(scan.matches, min(scan.restart, pos))
        return bytes(out)

    def _advance(self, matches: tuple[tuple[int, int], ...], resume: int) -> None:
        """Resume matching where no match crosses, and drop what is no longer needed before it."""
        moved = True
        while moved:
            moved = False
            for match_start, match_end in matches:
                if match_start < resume < match_end:
                    resume, moved = match_start, True
        self._resume = self._base + resume
        drop = max(0, resume - LOOK_BEHIND)
        del self._window[:drop]
        self._base += drop

    def _show(self, out: bytearray, clear: bytes) -> bool:
        if self._room is not None:
            clear, cut = cap(clear, self._room)
            self._room -= len(clear)
            if cut:
                out += clear
                self._cut()
                return False
        out += clear
        return True

    def _show_marker(self, out: bytearray, kind: str) -> bool:
        replacement = marker(kind)
        if self._room is not None:
            if len(replacement) > self._room:  # a marker is shown whole or not at all
                self._cut()
                return False
            self._room -= len(replacement)
        out += replacement
        self.count += 1
        self._kinds.add(kind)
        return True

    def _cut(self) -> None:
        self.truncated = True
        self._close()

    def _close(self) -> None:
        self._closed = True
        self._window = bytearray()


def _character_end(data: bytes, start: int, end: int) -> int:
    """``end``, or the start of a UTF-8 character that ``data[start:end]`` ends inside of (the cap's view
    of a character: see ``cap``)."""
    lead = end - 1
    while lead >= max(start, end - 3) and data[lead] & 0xC0 == 0x80:
        lead -= 1
    if lead >= start and data[lead] >= 0xC0:
        first = data[lead]
        width = 2 if first < 0xE0 else 3 if first < 0xF0 else 4 if first < 0xF8 else 0
        if lead + width > end:
            return lead
    return end
