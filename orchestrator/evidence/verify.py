"""Verify an evidence file: every line, the chain between them, and the head anchor at the end; then
whether every execution that began (``execution_started``) also ended (``execution_finished``,
``run_failed`` or ``execution_abandoned``).

Streaming: one pass; memory is the last two hashes, one line of look-ahead to name a problem, and the
executions begun and not yet ended. It stops at the first bad record and says which line and why.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from orchestrator.evidence.chain import LineProblem, parse_line
from orchestrator.evidence.reader import iter_lines, open_snapshot
from orchestrator.evidence.records import END_EVENTS, GENESIS_HASH, MAX_RECORD_BYTES, EventType

HEAD_MISSING = "no head anchor: deleting the last records of the file cannot be detected"


@dataclass(frozen=True, slots=True)
class Unended:
    """An execution that began and has no end record (yet)."""

    execution_id: str
    line: int
    """1-based line of its ``execution_started`` record."""
    seq: int
    started_ts: str
    deadline_unix: float | None
    """When its sandbox was due to be gone (wall timeout plus grace), if the begin record says."""
    running: bool
    """Its deadline has not passed: it may still be running (no end record expected yet)."""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of :func:`verify`."""

    path: str
    ok: bool
    records: int
    """Records checked and found good (all of them when ``ok``; those before the first bad one otherwise)."""
    first_bad_line: int | None = None
    """1-based line of the first bad record; for records deleted from the end, the line after the last."""
    first_bad_seq: int | None = None
    """seq written on that line when it could be read; for deleted tail records, the first missing seq."""
    problem: str | None = None
    head_checked: bool = False
    """True when a head anchor existed and was compared with the file."""
    head_seq: int | None = None
    last_seq: int | None = None
    last_hash: str | None = None
    warnings: tuple[str, ...] = ()
    unended: tuple[Unended, ...] = ()
    """Executions that began and did not end, in file order (only checked when the chain is intact)."""

    @property
    def complete(self) -> bool:
        """Every execution that began has ended, or may still be running (its deadline has not passed)."""
        return not any(not u.running for u in self.unended)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["warnings"] = list(self.warnings)
        out["unended"] = [asdict(u) for u in self.unended]
        out["complete"] = self.complete
        return out

    def location(self) -> str:
        """'line N (seq S)', 'line N', or 'head anchor' for a problem with the anchor file itself."""
        if self.first_bad_line is None:
            return "head anchor"
        if self.first_bad_seq is None:
            return f"line {self.first_bad_line}"
        return f"line {self.first_bad_line} (seq {self.first_bad_seq})"


@dataclass(slots=True)
class _Link:
    seq: int
    prev_hash: str
    hash: str


class _Lines:
    """Numbered lines with one line of look-ahead."""

    def __init__(self, lines: Iterator[bytes]) -> None:
        self._lines = lines
        self._peeked: bytes | None = None
        self.lineno = 0

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> bytes:
        self.lineno += 1
        if self._peeked is not None:
            raw, self._peeked = self._peeked, None
            return raw
        return next(self._lines)

    def peek(self) -> bytes | None:
        if self._peeked is None:
            self._peeked = next(self._lines, None)
        return self._peeked


def _link(raw: bytes | None) -> _Link | None:
    if raw is None:
        return None
    try:
        fields = parse_line(raw)
    except LineProblem:
        return None
    return _Link(fields["seq"], fields["prev_hash"], fields["hash"])


def _diagnose(rec: _Link, n: int, *, expected: int, prev: str, prev2: str | None, nxt: _Link | None) -> tuple[int, str]:
    """(first bad line, problem) for a record at line ``n`` that does not continue the chain.

    ``expected`` is the seq it should have had, ``prev``/``prev2`` the hashes of the two lines before it,
    ``nxt`` the next line when it is a valid record on its own.
    """
    next_continues = nxt is not None and nxt.seq == expected and nxt.prev_hash == prev
    if rec.seq == expected - 1 and rec.prev_hash == prev2:
        if rec.hash == prev:
            return n, f"duplicate of line {n - 1} (the same record twice)"
        return n - 1, (
            f"inserted record: line {n} (seq {rec.seq}) chains to line {n - 2}, so line {n - 1} "
            "does not belong in the chain"
        )
    if next_continues:
        assert nxt is not None
        if rec.seq == expected + 1 and rec.prev_hash == nxt.hash:
            return (
                n,
                f"records out of order: line {n} (seq {rec.seq}) and line {n + 1} (seq {nxt.seq}) are swapped",
            )
        return (
            n,
            f"inserted record: line {n + 1} continues the chain from line {n - 1}, so line {n} does not belong",
        )
    if rec.seq > expected:
        missing = rec.seq - expected
        if rec.prev_hash == prev:
            return n, f"seq jumps from {expected - 1} to {rec.seq} but the record chains to line {n - 1}"
        return n, (
            f"seq gap: expected seq {expected}, found {rec.seq}: {missing} record(s) missing before "
            "this line (deleted or moved)"
        )
    if rec.seq < expected:
        return (
            n,
            f"seq goes backwards: expected seq {expected}, found {rec.seq} (records reordered or inserted)",
        )
    return n, (
        f"prev_hash does not match the hash of line {n - 1}: line {n - 1} was changed and re-hashed, "
        "or this record was forged"
    )


class _OpenExecutions:
    """Executions begun and not yet ended, as the records go by."""

    def __init__(self) -> None:
        self._open: dict[str, tuple[int, int, str, float | None]] = {}

    def see(self, fields: dict[str, Any], line: int) -> None:
        event, execution_id = fields["event"], fields.get("execution_id")
        if execution_id is None:
            return
        if event == EventType.EXECUTION_STARTED:
            data = fields.get("data") or {}
            deadline = data.get("deadline_unix")
            if not isinstance(deadline, int | float) or isinstance(deadline, bool):
                deadline = None
            self._open[execution_id] = (line, fields["seq"], fields["ts"], deadline)
        elif event in END_EVENTS:
            self._open.pop(execution_id, None)

    def report(self, now: float) -> tuple[Unended, ...]:
        return tuple(
            Unended(eid, line, seq, ts, deadline, running=deadline is not None and deadline > now)
            for eid, (line, seq, ts, deadline) in self._open.items()
        )


def verify(path: str | os.PathLike[str], *, now: float | None = None) -> VerifyReport:
    """Check every record of the evidence file ``path``, the chain, and the head anchor ``<path>.head``;
    then list the executions that began and never ended (``unended``; ``running`` when their deadline is
    after ``now``, default the current time).

    Returns a report (``ok`` False names the first bad record). Raises EvidenceUnavailable when the file
    does not exist or cannot be read. A missing head anchor is not a failure: ``head_checked`` is False and
    a warning says that deleted tail records cannot be detected.
    """
    p = Path(path)
    executions = _OpenExecutions()
    with open_snapshot(p, with_head=True) as snap:
        head = snap.head
        warnings: tuple[str, ...] = () if head is not None or snap.head_error else (HEAD_MISSING,)
        base: dict[str, Any] = {
            "path": str(p),
            "head_checked": head is not None,
            "head_seq": head.seq if head is not None else None,
            "warnings": warnings,
        }

        lines = _Lines(iter_lines(snap.file, snap.size))
        expected = 0
        prev = GENESIS_HASH
        prev2: str | None = None
        count = 0

        def bad(line: int | None, seq: int | None, problem: str, good: int) -> VerifyReport:
            return VerifyReport(
                ok=False,
                records=good,
                first_bad_line=line,
                first_bad_seq=seq,
                problem=problem,
                last_seq=expected - 1 if expected else None,
                last_hash=prev if expected else None,
                **base,
            )

        if snap.head_error is not None:
            base["head_checked"] = False
            return bad(None, None, snap.head_error, 0)

        for raw in lines:
            n = lines.lineno
            try:
                fields = parse_line(raw)
            except LineProblem as exc:
                problem = exc.problem
                if not raw.endswith(b"\n"):
                    problem = (
                        f"line longer than {MAX_RECORD_BYTES} bytes"
                        if len(raw) > MAX_RECORD_BYTES
                        else "torn last line: no newline at the end (a partial write)"
                    )
                return bad(n, exc.seq, problem, count)
            seq = fields["seq"]
            prev_hash = fields["prev_hash"]
            this_hash = fields["hash"]
            if seq != expected or prev_hash != prev:
                rec = _Link(seq, prev_hash, this_hash)
                line, problem = _diagnose(rec, n, expected=expected, prev=prev, prev2=prev2, nxt=_link(lines.peek()))
                if line != n:
                    return bad(line, seq, problem, count - 1)
                return bad(line, seq, problem, count)
            if head is not None and seq == head.seq and this_hash != head.hash:
                return bad(
                    n,
                    seq,
                    f"differs from the head anchor (anchor hash {head.hash[:16]}..., record hash "
                    f"{this_hash[:16]}...): the record was replaced",
                    count,
                )
            executions.see(fields, n)
            prev2 = prev
            prev = this_hash
            expected += 1
            count += 1

        if head is not None and head.seq >= expected:
            missing = head.seq - expected + 1
            return bad(
                count + 1,
                expected,
                f"the head anchor says the chain reaches seq {head.seq}, but the file ends "
                + (f"at seq {expected - 1}" if expected else "before any record")
                + f": {missing} record(s) deleted from the end",
                count,
            )
        return VerifyReport(
            ok=True,
            records=count,
            last_seq=expected - 1 if expected else None,
            last_hash=prev if expected else None,
            unended=executions.report(time.time() if now is None else now),
            **base,
        )
