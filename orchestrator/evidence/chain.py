"""The hash chain: how a line is built and checked, and the head anchor beside the file.

Line format: ``canonical_json(record) + b"\\n"`` where ``record["hash"]`` is
``sha256_hex(canonical_json(record without "hash"))``, ``prev_hash`` is the previous record's ``hash``
(64 zeros for ``seq`` 0) and ``seq`` counts lines from 0. A line must be byte-for-byte canonical, so any
change of any byte is either invalid JSON, non-canonical, an invalid record or a hash mismatch.

Head anchor: ``<path>.head`` holds ``{"v":1,"seq":S,"hash":H,"ts":T}``: the last record the writer had
fsynced when it last checkpointed. The file may be ahead of the anchor (records written since, or a crash
between the two writes), never behind it: a file that ends before the anchor lost records from its end.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pydantic_core
from pydantic import ValidationError

from orchestrator.domain.canonical import canonical_json, sha256_hex
from orchestrator.domain.errors import EvidenceCorrupt, EvidenceUnavailable
from orchestrator.evidence.records import (
    FORMAT_VERSION,
    RECORD_FIELDS,
    REQUIRED_FIELDS,
    EvidenceRecord,
)

_HASH_KEY: Final = b',"hash":"'
_HASH_SEGMENT_LEN: Final = len(_HASH_KEY) + 64 + 1
# the keys that sort after "hash", up to prev_hash (always present): where build_line inserts "hash"
_KEYS_AFTER_HASH: Final = tuple(k for k in sorted(RECORD_FIELDS) if "hash" < k <= "prev_hash")
_validate_record = EvidenceRecord.__pydantic_validator__.validate_python


class LineProblem(Exception):
    """One line is not a valid record; ``problem`` says why, ``seq`` is its seq when it could be read."""

    def __init__(self, problem: str, seq: int | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.seq = seq


def record_hash(fields: Mapping[str, Any]) -> str:
    """sha256 hex of canonical_json of the record without ``hash`` (fields that do not apply left out)."""
    return sha256_hex(canonical_json({k: v for k, v in fields.items() if k != "hash" and v is not None}))


def build_line(payload: Mapping[str, Any], *, seq: int, ts: str, prev_hash: str) -> tuple[dict[str, Any], bytes]:
    """The record (as a dict of JSON values) and its line for an event payload at a place in the chain.

    ``payload`` holds the caller's fields, JSON values only, fields that do not apply left out.
    """
    fields = dict(payload)
    fields["v"] = FORMAT_VERSION
    fields["seq"] = seq
    fields["ts"] = ts
    fields["prev_hash"] = prev_hash
    body = canonical_json(fields)
    digest = sha256_hex(body)
    fields["hash"] = digest
    # Insert '"hash":...' where sorting puts it: before the first key after it that is present (prev_hash
    # always is). Every value after that key is a scalar, so its last occurrence in the body is the key.
    following = next(key for key in _KEYS_AFTER_HASH if key in fields)
    at = body.rfind(b',"' + following.encode() + b'":')
    return fields, b"".join((body[:at], _HASH_KEY, digest.encode(), b'"', body[at:], b"\n"))


def _first_error(exc: ValidationError) -> str:
    err = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in err["loc"]) or "record"
    return f"field {where!r}: {err['msg']}"


def parse_line(raw: bytes) -> dict[str, Any]:
    """Check one complete line (its trailing newline included) on its own: JSON, canonical form, fields,
    own hash. Its place in the chain (seq, prev_hash) is the caller's business. Raises :class:`LineProblem`.
    """
    if not raw.endswith(b"\n"):
        raise LineProblem("no newline at the end of the line (a partial write)")
    line = raw[:-1]
    if not line.strip():
        raise LineProblem("blank line")
    try:
        fields = pydantic_core.from_json(line, allow_inf_nan=False)
    except ValueError as exc:
        raise LineProblem(f"invalid JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise LineProblem("not a JSON object")
    seq = fields.get("seq")
    seq_hint = seq if type(seq) is int else None
    keys = fields.keys()
    if not keys <= RECORD_FIELDS:
        unknown = ", ".join(sorted(keys - RECORD_FIELDS))
        raise LineProblem(f"unknown field(s): {unknown}", seq_hint)
    if not keys >= REQUIRED_FIELDS:
        missing = ", ".join(sorted(REQUIRED_FIELDS - keys))
        raise LineProblem(f"missing field(s): {missing}", seq_hint)
    if None in fields.values():
        nulls = ", ".join(sorted(k for k, v in fields.items() if v is None))
        raise LineProblem(f"null field(s) (fields that do not apply are left out): {nulls}", seq_hint)
    try:
        canonical = canonical_json(fields)
    except ValueError as exc:
        raise LineProblem(f"not encodable as canonical JSON: {exc}", seq_hint) from None
    if canonical != line:
        raise LineProblem("not in canonical form (the line was re-encoded or edited)", seq_hint)
    try:
        _validate_record(fields)
    except ValidationError as exc:
        raise LineProblem(f"invalid record: {_first_error(exc)}", seq_hint) from None
    # The line is canonical and every field after "hash" is a scalar, so the last '"hash":"' is the key.
    at = line.rfind(_HASH_KEY)
    body = line[:at] + line[at + _HASH_SEGMENT_LEN :]
    if sha256_hex(body) != fields["hash"]:
        raise LineProblem("hash mismatch: the record was changed after it was written", seq_hint)
    return fields


# ---- head anchor -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeadAnchor:
    """What ``<path>.head`` holds: the last anchored record of the file."""

    seq: int
    hash: str
    ts: str

    def to_json(self) -> bytes:
        return canonical_json({"v": FORMAT_VERSION, "seq": self.seq, "hash": self.hash, "ts": self.ts}) + b"\n"


def head_path(path: str | os.PathLike[str]) -> Path:
    """The head anchor of an evidence file: ``<path>.head``."""
    return Path(f"{os.fspath(path)}.head")


def read_head(path: str | os.PathLike[str]) -> HeadAnchor | None:
    """The head anchor of the evidence file ``path``; None when there is none.

    Raises EvidenceCorrupt when it exists but is not a valid anchor, EvidenceUnavailable when unreadable.
    """
    hpath = head_path(path)
    try:
        raw = hpath.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EvidenceUnavailable(
            f"cannot read head anchor {hpath}: {exc.strerror or exc}", details={"path": str(hpath)}
        ) from exc
    try:
        value = json.loads(raw)
    except ValueError:
        value = None
    ok = (
        isinstance(value, dict)
        and set(value) == {"v", "seq", "hash", "ts"}
        and value["v"] == FORMAT_VERSION
        and type(value["seq"]) is int
        and value["seq"] >= 0
        and isinstance(value["hash"], str)
        and len(value["hash"]) == 64
        and all(c in "0123456789abcdef" for c in value["hash"])
        and isinstance(value["ts"], str)
    )
    if not ok:
        raise EvidenceCorrupt(
            f"head anchor {hpath} is not valid (expected {{v, seq, hash, ts}})", details={"path": str(hpath)}
        )
    assert isinstance(value, dict)
    return HeadAnchor(seq=value["seq"], hash=value["hash"], ts=value["ts"])


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_head(path: str | os.PathLike[str], anchor: HeadAnchor) -> None:
    """Replace the head anchor atomically: write a temporary file, fsync it, rename it over, fsync the dir.

    The caller holds the evidence file's exclusive lock and has fsynced the records the anchor names.
    """
    hpath = head_path(path)
    tmp = hpath.with_name(hpath.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        data = anchor.to_json()
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, hpath)
    fsync_dir(hpath.parent)
