"""The evidence writer: an append-only, hash-chained JSONL file, written off the hot path.

One background thread per writer takes whatever is queued and appends it as one batch, under an exclusive
``flock`` on the file, so several processes can share one file. Each batch:

1. checks the path still names the file it has open, and whether the file grew since this writer last
   wrote (another process appended); if so it re-reads the last record and continues from it;
2. builds the lines (seq, ts, prev_hash, hash), writes them with one ``write`` on an ``O_APPEND`` fd
   (a failed or short write is cut back off with ``ftruncate`` before the lock is released);
3. when the batch holds a durable record or a flush, or the last checkpoint is older than
   ``checkpoint_interval``: ``fsync`` the file, then replace the head anchor ``<path>.head``.

Torn last line policy (a partial line without its newline, left by a crash or a power loss). On open and
whenever the file is re-read, the writer never chains over it. It recovers only when that is provably
safe, and never silently:

* the head anchor is not beyond the last complete record (so the torn bytes were never fsynced and
  anchored: a durable append never returned for them), or there is no anchor yet;
* then the torn bytes are copied to ``<path>.torn-<offset>-<unix time>`` (0600, fsynced), cut off the file,
  and an ``evidence_recovered`` record (offset, size, sha256 and file name of the quarantined bytes) is
  appended, fsynced and anchored, before anything else is written.

Otherwise (the anchor names records that are no longer complete) it raises EvidenceCorrupt and writes
nothing. A file that shrank under a writer, a last line that is not a valid record, or an anchor ahead of
the file also raise EvidenceCorrupt: the writer refuses to extend a chain that was damaged.

A worker failure is never lost: it is logged, every queued append fails with EvidenceUnavailable (cause
attached), and so does every later call. The writer stays failed; open a new one to continue.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fcntl
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from pydantic import ValidationError

from orchestrator.domain.canonical import canonical_json, sha256_hex
from orchestrator.domain.errors import EvidenceCorrupt, EvidenceUnavailable, InputInvalid, OrchestratorError
from orchestrator.evidence.chain import (
    HeadAnchor,
    LineProblem,
    build_line,
    fsync_dir,
    parse_line,
    read_head,
    write_head,
)
from orchestrator.evidence.fit import DEGRADED_KEY, fit_fields
from orchestrator.evidence.paths import default_evidence_path
from orchestrator.evidence.records import (
    ENCODED_NEXT,
    GENESIS_HASH,
    MAX_RECORD_BYTES,
    EventType,
    EvidenceEvent,
    EvidenceRecord,
    now_ts,
)

_log = logging.getLogger(__name__)

_WRITER_OVERHEAD: Final = 256  # bytes v, seq, ts, prev_hash, hash and the newline add to an event
_MAX_BATCH_BYTES: Final = 4 * 1024 * 1024
_MAX_TORN_BYTES: Final = 64 * 1024 * 1024
_SCAN_BLOCK: Final = 64 * 1024


# ---- completion of queued items --------------------------------------------------------------------


class _SyncWaiter:
    __slots__ = ("_done", "error", "record")

    def __init__(self) -> None:
        self._done = threading.Event()
        self.record: EvidenceRecord | None = None
        self.error: BaseException | None = None

    def settle(self, record: EvidenceRecord | None, error: BaseException | None) -> None:
        self.record, self.error = record, error
        self._done.set()

    def wait(self) -> EvidenceRecord | None:
        self._done.wait()
        if self.error is not None:
            raise self.error
        return self.record


class _AsyncWaiter:
    __slots__ = ("future", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[EvidenceRecord | None]) -> None:
        self.loop = loop
        self.future = future


_Outcome = tuple[asyncio.Future[EvidenceRecord | None], EvidenceRecord | None, BaseException | None]


def _settle_futures(outcomes: list[_Outcome]) -> None:
    for future, record, error in outcomes:
        if future.done():  # the awaiting task was cancelled: the record is written all the same
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(record)


@dataclass(slots=True)
class _Item:
    payload: dict[str, Any] | None  # None: a barrier (flush / close)
    ts: str
    durable: bool
    size: int
    waiter: _SyncWaiter | _AsyncWaiter | None = None
    fields: dict[str, Any] | None = field(default=None)  # the record, once written


# ---- the writer ----------------------------------------------------------------------------------


class EvidenceWriter:
    """Append-only hash-chained evidence file. Thread-safe; use one per process and file.

    Construction opens (creating the directory 0700 and the file 0600), locks and checks the file: it may
    raise EvidenceCorrupt (see the module doc) or EvidenceUnavailable. It does blocking I/O: in async code
    use ``await EvidenceWriter.open(path)``. Close it (``await close()``, ``close_sync()`` or a ``with``
    block); writers still open at interpreter exit are closed by an atexit hook, but a process ending with
    ``os._exit`` (e.g. a multiprocessing child) loses what was queued and not yet written.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        checkpoint_interval: float = 1.0,
        max_batch: int = 1024,
    ) -> None:
        if checkpoint_interval <= 0 or max_batch < 1:
            raise InputInvalid("checkpoint_interval must be > 0 and max_batch >= 1")
        self.path: Final[Path] = Path(path) if path is not None else default_evidence_path()
        self._interval = checkpoint_interval
        self._max_batch = max_batch
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._queue: deque[_Item] = deque()
        self._inflight: list[_Item] = []
        self._failure: BaseException | None = None
        self._closing = False
        self._closed = False
        # chain state: only the worker thread touches it once started (and __init__ before that)
        self._seq = -1
        self._hash = GENESIS_HASH
        self._known_size = 0
        self._dirty = False  # written and not yet fsynced + anchored
        self._last_checkpoint = 0.0
        self._fd = self._open_file()
        try:
            with self._locked():
                self._check_same_file()
                self._load_tail(os.fstat(self._fd).st_size, opening=True)
        except BaseException:
            os.close(self._fd)
            raise
        self._thread = threading.Thread(target=self._run, name=f"evidence-writer:{self.path.name}", daemon=True)
        self._thread.start()
        _LIVE.add(self)

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        checkpoint_interval: float = 1.0,
        max_batch: int = 1024,
    ) -> EvidenceWriter:
        """Construct off the event loop."""
        return await asyncio.to_thread(cls, path, checkpoint_interval=checkpoint_interval, max_batch=max_batch)

    # ---- public API: async -----------------------------------------------------------------------

    async def append(self, event: EvidenceEvent | Mapping[str, Any], *, durable: bool = False) -> EvidenceRecord:
        """Queue one event; return its record once written (``durable``: once it and everything queued
        before it are fsynced and anchored). Never blocks the event loop.

        Raises InputInvalid for a bad event (nothing is queued) and EvidenceUnavailable when the writer
        failed or is closed. If the awaiting task is cancelled the record is still written.
        """
        item = self._prepare(event, durable)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[EvidenceRecord | None] = loop.create_future()
        self._submit(item, _AsyncWaiter(loop, future))
        record = await future
        assert record is not None
        return record

    async def flush(self) -> None:
        """Return once everything queued before is written, fsynced and anchored."""
        if self._closed and self._failure is None:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[EvidenceRecord | None] = loop.create_future()
        self._submit(self._barrier(), _AsyncWaiter(loop, future))
        await future

    async def close(self) -> None:
        """Drain the queue, fsync, anchor, stop the worker and close the file. Idempotent.

        Raises EvidenceUnavailable if the writer failed (queued records were then not all written).
        """
        await asyncio.to_thread(self.close_sync)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self.close()
        except EvidenceUnavailable:
            if exc is None:
                raise
            _log.exception("closing the evidence writer for %s failed", self.path)

    # ---- public API: sync ------------------------------------------------------------------------

    def append_sync(self, event: EvidenceEvent | Mapping[str, Any], *, durable: bool = True) -> EvidenceRecord:
        """Blocking :meth:`append` for scripts and the CLI (do not call it on an event loop thread)."""
        item = self._prepare(event, durable)
        waiter = _SyncWaiter()
        self._submit(item, waiter)
        record = waiter.wait()
        assert record is not None
        return record

    def append_nowait(self, event: EvidenceEvent | Mapping[str, Any]) -> None:
        """Queue one event and return at once (fire and forget, callable from any thread).

        A bad event raises InputInvalid here; a later write failure surfaces on the next call.
        """
        self._submit(self._prepare(event, False), None)

    def flush_sync(self) -> None:
        """Blocking :meth:`flush`."""
        if self._closed and self._failure is None:
            return
        waiter = _SyncWaiter()
        self._submit(self._barrier(), waiter)
        waiter.wait()

    def close_sync(self) -> None:
        """Blocking :meth:`close`."""
        with self._cond:
            first = not self._closing
            if first:
                if self._failure is None and os.getpid() == self._pid:
                    self._queue.append(self._barrier())
                self._closing = True
                self._cond.notify_all()
        if first:
            if os.getpid() == self._pid:
                self._thread.join()
                os.close(self._fd)
            self._closed = True
            _LIVE.discard(self)
        else:
            self._thread.join()
        if self._failure is not None:
            raise self._unavailable()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self.close_sync()
        except EvidenceUnavailable:
            if exc is None:
                raise
            _log.exception("closing the evidence writer for %s failed", self.path)

    @property
    def failed(self) -> BaseException | None:
        """The worker's failure, if it failed."""
        return self._failure

    # ---- queueing --------------------------------------------------------------------------------

    def _prepare(self, event: EvidenceEvent | Mapping[str, Any], durable: bool) -> _Item:
        """Validate an event, made to fit one record first (see :mod:`orchestrator.evidence.fit`): an event
        is refused (InputInvalid) for a wrong field, never for its size or its text."""
        if isinstance(event, EvidenceEvent):
            fields = event.model_dump(mode="json", exclude_none=True)
        elif isinstance(event, Mapping):
            fields = dict(event)
        else:
            raise InputInvalid(f"evidence event must be an EvidenceEvent, not {type(event).__name__}")
        fast = self._as_is(fields)
        if fast is not None:
            return _Item(fast[0], now_ts(), durable, fast[1])
        fitted = fit_fields(fields, MAX_RECORD_BYTES - _WRITER_OVERHEAD)
        data = fitted.get("data")
        if isinstance(data, dict) and DEGRADED_KEY in data and DEGRADED_KEY not in (fields.get("data") or {}):
            _log.warning(
                "evidence event %s of %s degraded to fit one record (%d change(s), listed in data.%s)",
                fitted.get("event"),
                fitted.get("execution_id"),
                len(data[DEGRADED_KEY]),
                DEGRADED_KEY,
            )
        try:
            valid = EvidenceEvent.model_validate(fitted)
        except ValidationError as exc:
            err = exc.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in err["loc"])
            raise InputInvalid(f"evidence event field {where!r}: {err['msg']}", details={"field": where}) from None
        payload = {k: v for k, v in valid.model_dump(mode="json").items() if v is not None}
        try:
            size = len(canonical_json(payload))
        except ValueError as exc:
            raise InputInvalid(f"evidence event is not encodable as canonical JSON: {exc}") from None
        if size + _WRITER_OVERHEAD > MAX_RECORD_BYTES:  # fit_fields bounds every part: a bug if reached
            raise InputInvalid(
                f"evidence event too large: {size} bytes encoded (limit {MAX_RECORD_BYTES - _WRITER_OVERHEAD})",
                details={"bytes": size},
            )
        return _Item(payload, now_ts(), durable, size)

    @staticmethod
    def _as_is(fields: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
        """(payload, encoded size) when the event is valid and fits as it is — the common case, one
        validation and one encoding; None when it needs fitting (or is invalid: the full path says why)."""
        try:
            present = {k: v for k, v in fields.items() if v is not None}
            valid = EvidenceEvent.model_validate(present, context={ENCODED_NEXT: True})
        except ValidationError:
            return None
        payload = {k: v for k, v in valid.model_dump(mode="json").items() if v is not None}
        try:
            size = len(canonical_json(payload))
        except ValueError:  # text that is not UTF-8 (UnicodeEncodeError), NaN
            return None
        return (payload, size) if size + _WRITER_OVERHEAD <= MAX_RECORD_BYTES else None

    @staticmethod
    def _barrier() -> _Item:
        return _Item(None, "", True, 0)

    def _submit(self, item: _Item, waiter: _SyncWaiter | _AsyncWaiter | None) -> None:
        item.waiter = waiter
        with self._cond:
            if self._failure is not None:
                raise self._unavailable()
            if self._closing:
                raise EvidenceUnavailable(f"the evidence writer for {self.path} is closed")
            if os.getpid() != self._pid:
                raise EvidenceUnavailable(
                    "this EvidenceWriter was opened in another process (fork): open a new one here"
                )
            self._queue.append(item)
            self._cond.notify()

    def _unavailable(self) -> EvidenceUnavailable:
        cause = self._failure
        if isinstance(cause, OrchestratorError):
            what = str(cause)
        elif isinstance(cause, OSError):
            what = f"{type(cause).__name__}: {cause}"
        else:
            what = repr(cause)
        err = EvidenceUnavailable(
            f"the evidence writer for {self.path} failed and stopped: {what}",
            details={"path": str(self.path), "cause": what},
        )
        err.__cause__ = cause
        err.__suppress_context__ = True
        return err

    # ---- worker ----------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._closing:
                        timeout = self._idle_timeout()
                        if timeout is not None and timeout <= 0:
                            break
                        self._cond.wait(timeout)
                    batch = self._take_batch()
                    stop = self._closing and not self._queue
                    self._inflight = batch
                if batch:
                    self._process(batch)
                elif self._dirty:
                    with self._locked():
                        self._check_same_file()
                        self._sync_to_file()
                        self._checkpoint_locked()
                with self._cond:
                    self._inflight = []
                if stop:
                    return
        except BaseException as exc:
            self._fail(exc)

    def _idle_timeout(self) -> float | None:
        if not self._dirty:
            return None
        return self._last_checkpoint + self._interval - time.monotonic()

    def _take_batch(self) -> list[_Item]:
        batch: list[_Item] = []
        size = 0
        queue = self._queue
        while queue and len(batch) < self._max_batch:
            item = queue[0]
            if batch and size + item.size > _MAX_BATCH_BYTES:
                break
            batch.append(queue.popleft())
            size += item.size + _WRITER_OVERHEAD
        return batch

    def _process(self, batch: list[_Item]) -> None:
        records = [item for item in batch if item.payload is not None]
        sync = any(item.durable for item in batch)
        with self._locked():
            self._check_same_file()
            self._sync_to_file()
            if records:
                self._append_locked(records)
            if sync or time.monotonic() - self._last_checkpoint >= self._interval:
                self._checkpoint_locked()
        self._notify([(item, None) for item in batch])

    def _notify(self, outcomes: list[tuple[_Item, BaseException | None]]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {}
        for item, error in outcomes:
            waiter = item.waiter
            if waiter is None:
                continue
            record = None
            if error is None and item.fields is not None:
                record = EvidenceRecord.model_validate(item.fields)
            if isinstance(waiter, _AsyncWaiter):
                by_loop.setdefault(waiter.loop, []).append((waiter.future, record, error))
            else:
                waiter.settle(record, error)
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                loop.call_soon_threadsafe(_settle_futures, settled)

    def _fail(self, exc: BaseException) -> None:
        with self._cond:
            self._failure = exc
            pending = [*self._inflight, *self._queue]
            self._inflight = []
            self._queue.clear()
            self._cond.notify_all()
        _log.error(
            "evidence writer for %s failed; %d queued record(s) not written, no further records will be",
            self.path,
            sum(1 for item in pending if item.payload is not None),
            exc_info=exc,
        )
        self._notify([(item, self._unavailable()) for item in pending])

    # ---- file -----------------------------------------------------------------------------------

    def _open_file(self) -> int:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise EvidenceUnavailable(
                f"cannot open evidence file {self.path}: {exc.strerror or exc}",
                details={"path": str(self.path)},
            ) from exc

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _check_same_file(self) -> None:
        mine = os.fstat(self._fd)
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (mine.st_dev, mine.st_ino):
            raise EvidenceUnavailable(
                f"{self.path} was removed or replaced while the evidence writer had it open",
                details={"path": str(self.path)},
            )

    def _sync_to_file(self) -> None:
        size = os.fstat(self._fd).st_size
        if size != self._known_size:
            self._load_tail(size, opening=False)

    def _load_tail(self, size: int, *, opening: bool) -> None:
        """Continue the chain from the file's last record (under the lock). See the module doc."""
        if not opening and size < self._known_size:
            raise EvidenceCorrupt(
                f"{self.path} shrank from {self._known_size} to {size} bytes under the writer: records were removed",
                details={"path": str(self.path)},
            )
        torn_at = size
        seq, last_hash = -1, GENESIS_HASH
        if size:
            newline = self._last_newline(size, _MAX_TORN_BYTES)
            end = newline + 1 if newline is not None else 0
            torn_at = end
            if end:
                start_nl = self._last_newline(end - 1, MAX_RECORD_BYTES + 1)
                start = start_nl + 1 if start_nl is not None else 0
                raw = os.pread(self._fd, end - start, start)
                try:
                    fields = parse_line(raw)
                except LineProblem as exc:
                    raise EvidenceCorrupt(
                        f"the last record of {self.path} (byte {start}) is not valid: {exc.problem}; "
                        "run `sandboxctl evidence verify`",
                        details={"path": str(self.path), "offset": start},
                    ) from None
                seq, last_hash = fields["seq"], fields["hash"]
        head = read_head(self.path)
        if head is not None:
            self._check_head(head, seq, last_hash, torn=torn_at < size)
        self._seq, self._hash, self._known_size = seq, last_hash, size
        if torn_at < size:
            self._recover_torn(torn_at, size, head)
        elif head is None and seq >= 0:
            _log.warning("evidence head anchor for %s is missing; writing a new one at seq %d", self.path, seq)
            self._dirty = True
            self._checkpoint_locked()

    def _check_head(self, head: HeadAnchor, seq: int, last_hash: str, *, torn: bool) -> None:
        where = f"the last complete record of {self.path} is seq {seq}" if seq >= 0 else f"{self.path} has no record"
        if head.seq > seq:
            raise EvidenceCorrupt(
                f"the head anchor says the chain reaches seq {head.seq}, but {where}"
                + (" (followed by a torn line)" if torn else "")
                + ": anchored records were removed or damaged; refusing to write. "
                "Run `sandboxctl evidence verify`",
                details={"path": str(self.path), "head_seq": head.seq, "last_seq": seq},
            )
        if head.seq == seq and head.hash != last_hash:
            raise EvidenceCorrupt(
                f"the last record of {self.path} (seq {seq}) differs from the head anchor: it was replaced; "
                "refusing to write. Run `sandboxctl evidence verify`",
                details={"path": str(self.path), "head_seq": head.seq},
            )

    def _last_newline(self, end: int, max_scan: int) -> int | None:
        """Offset of the last b'\\n' before ``end``; None if the file has none there. Raises EvidenceCorrupt
        when none is found within ``max_scan`` bytes."""
        pos = end
        block = 4096
        while pos > 0:
            start = max(0, pos - block)
            chunk = os.pread(self._fd, pos - start, start)
            found = chunk.rfind(b"\n")
            if found >= 0:
                return start + found
            pos = start
            if end - pos > max_scan:
                raise EvidenceCorrupt(
                    f"{self.path}: no line break in the {end - pos} bytes before byte {end}: "
                    "not an evidence file, or badly damaged",
                    details={"path": str(self.path)},
                )
            block = _SCAN_BLOCK
        return None

    def _recover_torn(self, offset: int, size: int, head: HeadAnchor | None) -> None:
        """Quarantine the torn bytes, cut them off and record that (the head check passed already)."""
        quarantine = self.path.with_name(f"{self.path.name}.torn-{offset}-{int(time.time())}")
        digest = self._copy_out(offset, size, quarantine)
        os.ftruncate(self._fd, offset)
        os.fsync(self._fd)
        self._known_size = offset
        _log.warning(
            "evidence file %s ended with a torn line (%d bytes at offset %d, never anchored): "
            "moved to %s and recorded as evidence_recovered",
            self.path,
            size - offset,
            offset,
            quarantine,
        )
        payload: dict[str, Any] = {
            "event": EventType.EVIDENCE_RECOVERED.value,
            "reason": "torn last line (a partial write, never anchored) cut off and quarantined",
            "data": {
                "torn_offset": offset,
                "torn_bytes": size - offset,
                "torn_sha256": digest,
                "quarantine_file": quarantine.name,
                "head_seq": head.seq if head is not None else None,
            },
        }
        self._append_locked([_Item(payload, now_ts(), True, 0)])
        self._checkpoint_locked()

    def _copy_out(self, offset: int, size: int, target: Path) -> str:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            data = os.pread(self._fd, size - offset, offset)
            written = 0
            while written < len(data):
                written += os.write(out, data[written:])
            os.fsync(out)
        finally:
            os.close(out)
        fsync_dir(target.parent)
        return sha256_hex(data)

    def _append_locked(self, items: list[_Item]) -> None:
        seq, prev = self._seq, self._hash
        lines: list[bytes] = []
        for item in items:
            assert item.payload is not None
            seq += 1
            item.fields, line = build_line(item.payload, seq=seq, ts=item.ts, prev_hash=prev)
            prev = item.fields["hash"]
            lines.append(line)
        data = b"".join(lines)
        start = self._known_size
        view = memoryview(data)
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, view[written:])
        except BaseException:
            if written:
                try:  # cut the partial batch off: the lock is still ours, nobody appended after it
                    os.ftruncate(self._fd, start)
                except OSError:
                    _log.exception("could not cut a partial batch off %s: a torn line is left", self.path)
            for item in items:
                item.fields = None
            raise
        self._seq, self._hash = seq, prev
        self._known_size = start + len(data)
        self._dirty = True

    def _checkpoint_locked(self) -> None:
        if self._dirty:
            os.fsync(self._fd)
            write_head(self.path, HeadAnchor(seq=self._seq, hash=self._hash, ts=now_ts()))
            self._dirty = False
        self._last_checkpoint = time.monotonic()


_LIVE: weakref.WeakSet[EvidenceWriter] = weakref.WeakSet()


@atexit.register
def _close_writers_at_exit() -> None:
    for writer in list(_LIVE):
        try:
            writer.close_sync()
        except Exception:
            _log.exception("closing the evidence writer for %s at exit failed", writer.path)
