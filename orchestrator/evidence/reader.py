"""Reading evidence files: every record in order (optionally filtered), or the last N read from the end.

Readers take a shared lock on the file just long enough to note its size (writers hold the exclusive lock
while they append a batch), then read up to that size: they never see half of a batch being written.
Readers parse and validate every line they return but do not check the chain: that is :func:`verify`.
A line that is not a valid record raises EvidenceCorrupt naming the line; records before it are returned.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from pydantic import ValidationError

from orchestrator.domain.errors import EvidenceCorrupt, EvidenceUnavailable
from orchestrator.evidence.chain import HeadAnchor, read_head
from orchestrator.evidence.records import MAX_RECORD_BYTES, EvidenceRecord

SHARED_LOCK_TIMEOUT_S: Final = 10.0
_BLOCK: Final = 64 * 1024
_validate_json = EvidenceRecord.model_validate_json


@dataclass(slots=True)
class Snapshot:
    """An open evidence file and its size (and head anchor) taken together under the shared lock."""

    file: BinaryIO
    size: int
    head: HeadAnchor | None
    head_error: str | None


def _lock_shared(fd: int, path: Path) -> bool:
    deadline = time.monotonic() + SHARED_LOCK_TIMEOUT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise EvidenceUnavailable(
                    f"{path} stayed locked by a writer for {SHARED_LOCK_TIMEOUT_S:.0f}s",
                    details={"path": str(path)},
                ) from None
            time.sleep(0.002)
        except OSError as exc:
            if exc.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                return False  # a file system without flock: read without it
            raise
        else:
            return True


@contextmanager
def open_snapshot(path: str | os.PathLike[str], *, with_head: bool = False) -> Iterator[Snapshot]:
    """Open ``path`` for reading and note its size (and head anchor) under the shared lock.

    Raises EvidenceUnavailable when the file does not exist or cannot be read.
    """
    p = Path(path)
    try:
        file = open(p, "rb", buffering=16 * _BLOCK)  # noqa: SIM115 - closed by the with below
    except FileNotFoundError:
        raise EvidenceUnavailable(f"evidence file not found: {p}", details={"path": str(p)}) from None
    except OSError as exc:
        raise EvidenceUnavailable(
            f"cannot read evidence file {p}: {exc.strerror or exc}", details={"path": str(p)}
        ) from exc
    with file:
        try:
            locked = _lock_shared(file.fileno(), p)
            try:
                size = os.fstat(file.fileno()).st_size
                head: HeadAnchor | None = None
                head_error: str | None = None
                if with_head:
                    try:
                        head = read_head(p)
                    except EvidenceCorrupt as exc:
                        head_error = exc.message
            finally:
                if locked:
                    fcntl.flock(file.fileno(), fcntl.LOCK_UN)
        except OSError as exc:
            raise EvidenceUnavailable(
                f"cannot read evidence file {p}: {exc.strerror or exc}", details={"path": str(p)}
            ) from exc
        yield Snapshot(file, size, head, head_error)


def iter_lines(file: BinaryIO, size: int) -> Iterator[bytes]:
    """The lines of the first ``size`` bytes, newline included. A line longer than a record may be is cut
    after ``MAX_RECORD_BYTES + 1`` bytes (so it has no newline), as is a torn last line."""
    readline = file.readline
    limit = MAX_RECORD_BYTES + 1
    remaining = size
    while remaining > 0:
        raw = readline(min(limit, remaining))
        if not raw:
            return  # the file shrank under us
        remaining -= len(raw)
        yield raw
        if not raw.endswith(b"\n") and len(raw) == limit:
            return  # an over-long line: nothing after it can be placed reliably


def reverse_lines(fd: int, size: int) -> Iterator[bytes]:
    """The lines of the first ``size`` bytes from the last to the first, newline included (the very last
    may lack it: torn). Reads blocks from the end; raises EvidenceCorrupt on an over-long line."""
    pos = size
    buf = b""
    end = 0  # buf[:end] is read and not yet yielded; it starts at file offset pos
    while True:
        cut = buf.rfind(b"\n", 0, end - 1) if end > 1 else -1
        if cut >= 0:
            yield buf[cut + 1 : end]
            end = cut + 1
            continue
        if pos == 0:
            if end:
                yield buf[:end]
            return
        if end > MAX_RECORD_BYTES + 1:
            raise EvidenceCorrupt(f"a line ending at byte {pos + end} is longer than {MAX_RECORD_BYTES} bytes")
        step = min(_BLOCK, pos)
        pos -= step
        buf = os.pread(fd, step, pos) + buf[:end]
        end = len(buf)


def _record(raw: bytes, path: Path, where: str) -> EvidenceRecord:
    if not raw.endswith(b"\n"):
        if len(raw) > MAX_RECORD_BYTES:
            problem = f"longer than {MAX_RECORD_BYTES} bytes"
        else:
            problem = "torn last line (no newline at the end: a partial write)"
        raise EvidenceCorrupt(f"{path}: {where}: {problem}", details={"path": str(path)})
    try:
        return _validate_json(raw)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False)[0]
        loc = ".".join(str(part) for part in err["loc"]) or "record"
        raise EvidenceCorrupt(
            f"{path}: {where}: not a valid record: {loc}: {err['msg']}", details={"path": str(path)}
        ) from None


def _matches(record: EvidenceRecord, execution_id: str | None, event: str | None) -> bool:
    return (execution_id is None or record.execution_id == execution_id) and (event is None or record.event == event)


def iter_raw(
    path: str | os.PathLike[str], *, execution_id: str | None = None, event: str | None = None
) -> Iterator[tuple[int, bytes, EvidenceRecord]]:
    """``(line number from 1, raw line with its newline, record)`` of every matching record, in order."""
    p = Path(path)
    with open_snapshot(p) as snap:
        for lineno, raw in enumerate(iter_lines(snap.file, snap.size), start=1):
            record = _record(raw, p, f"line {lineno}")
            if _matches(record, execution_id, event):
                yield lineno, raw, record


def iter_records(
    path: str | os.PathLike[str], *, execution_id: str | None = None, event: str | None = None
) -> Iterator[EvidenceRecord]:
    """Every record of the file in order, optionally only those of one execution and/or one event name."""
    for _, _, record in iter_raw(path, execution_id=execution_id, event=event):
        yield record


def tail_raw(
    path: str | os.PathLike[str],
    n: int = 10,
    *,
    execution_id: str | None = None,
    event: str | None = None,
) -> list[tuple[bytes, EvidenceRecord]]:
    """The last ``n`` matching ``(raw line, record)``, oldest first, read from the end of the file."""
    if n <= 0:
        return []
    p = Path(path)
    found: list[tuple[bytes, EvidenceRecord]] = []
    with open_snapshot(p) as snap:
        for back, raw in enumerate(reverse_lines(snap.file.fileno(), snap.size), start=1):
            where = "the last line" if back == 1 else f"line {back} from the end"
            record = _record(raw, p, where)
            if _matches(record, execution_id, event):
                found.append((raw, record))
                if len(found) == n:
                    break
    found.reverse()
    return found


def tail(
    path: str | os.PathLike[str],
    n: int = 10,
    *,
    execution_id: str | None = None,
    event: str | None = None,
) -> list[EvidenceRecord]:
    """The last ``n`` matching records, oldest first, read from the end of the file (cheap on big files)."""
    return [record for _, record in tail_raw(path, n, execution_id=execution_id, event=event)]


def _ts_of(raw: bytes) -> str | None:
    """The record's own ``ts`` (the last ``"ts":"`` of a canonical line: only ``v`` sorts after it, and a
    quote inside a string value is escaped), without parsing the line."""
    at = raw.rfind(b'"ts":"')
    if at < 0:
        return None
    end = raw.find(b'"', at + 6)
    return raw[at + 6 : end].decode("ascii", "replace") if end > 0 else None


def _first_at_or_after(fd: int, size: int, ts: str) -> int:
    """A line start at or before the first record written at ``ts`` or later (bisection on record times,
    which a file's writers append in order; callers leave a margin for writers of other processes)."""
    lo, hi = 0, size
    while hi - lo > _BLOCK:
        mid = (lo + hi) // 2
        block = os.pread(fd, min(MAX_RECORD_BYTES + 2, size - mid), mid)
        newline = block.find(b"\n")
        if newline < 0:
            return lo
        start = mid + newline + 1
        line_end = block.find(b"\n", newline + 1)
        line_ts = _ts_of(block[newline + 1 : line_end]) if line_end > 0 else None
        if line_ts is None or start >= hi:
            hi = mid
        elif line_ts < ts:
            lo = start
        else:
            hi = mid
    return lo


def records_of(
    path: str | os.PathLike[str], execution_id: str, *, since: str, until: str | None = None, limit: int = 1000
) -> list[EvidenceRecord]:
    """One execution's records (at most ``limit``) written at ``since`` (a ``ts``) or later — and up to
    ``until`` when given: the file is bisected on record times and read forward, never scanned whole."""
    p = Path(path)
    needle = execution_id.encode("utf-8")
    found: list[EvidenceRecord] = []
    with open_snapshot(p) as snap:
        start = _first_at_or_after(snap.file.fileno(), snap.size, since)
        snap.file.seek(start)
        for raw in iter_lines(snap.file, snap.size - start):
            if until is not None and (line_ts := _ts_of(raw)) is not None and line_ts > until:
                break
            if needle not in raw:
                continue
            record = _record(raw, p, f"byte {start}")
            if record.execution_id == execution_id and record.ts >= since:
                found.append(record)
                if len(found) >= limit:
                    break
    return found
