"""iter_records / tail on real files."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.domain.errors import EvidenceCorrupt, EvidenceUnavailable
from orchestrator.evidence import (
    EventType,
    EvidenceEvent,
    EvidenceWriter,
    iter_raw,
    iter_records,
    tail,
    tail_raw,
)
from orchestrator.evidence.reader import reverse_lines

KINDS = [EventType.REQUEST_RECEIVED, EventType.DECISION_MADE, EventType.EXECUTION_FINISHED]


def make(path: Path, n: int, pad: int = 0) -> None:
    with EvidenceWriter(path) as writer:
        for i in range(n):
            data: dict[str, object] = {"i": i}
            if pad:
                data["pad"] = "p" * pad
            writer.append_nowait(
                EvidenceEvent.model_validate({"event": KINDS[i % 3], "execution_id": f"ex-{i // 3}", "data": data})
            )


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "evidence.jsonl"
    make(p, 30)
    return p


def test_iter_records_in_order(path: Path) -> None:
    records = list(iter_records(path))
    assert [r.seq for r in records] == list(range(30))


def test_filters(path: Path) -> None:
    assert [r.seq for r in iter_records(path, execution_id="ex-2")] == [6, 7, 8]
    assert [r.seq for r in iter_records(path, event="decision_made")] == list(range(1, 30, 3))
    assert [r.seq for r in iter_records(path, execution_id="ex-2", event=EventType.EXECUTION_FINISHED)] == [8]
    assert list(iter_records(path, execution_id="nope")) == []


def test_iter_raw_gives_line_numbers_and_bytes(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    got = list(iter_raw(path, execution_id="ex-1"))
    assert [(n, raw) for n, raw, _ in got] == [(4, lines[3]), (5, lines[4]), (6, lines[5])]


def test_tail(path: Path) -> None:
    assert [r.seq for r in tail(path, 3)] == [27, 28, 29]
    assert [r.seq for r in tail(path, 100)] == list(range(30))
    assert tail(path, 0) == []
    assert [r.seq for r in tail(path, 2, event="request_received")] == [24, 27]
    assert [r.seq for r in tail(path, 5, execution_id="ex-0")] == [0, 1, 2]
    lines = path.read_bytes().splitlines(keepends=True)
    assert [raw for raw, _ in tail_raw(path, 2)] == lines[-2:]


def test_tail_across_blocks(tmp_path: Path) -> None:
    p = tmp_path / "big.jsonl"
    make(p, 12, pad=100_000)  # lines longer than the 64 KiB read blocks
    assert [r.seq for r in tail(p, 5)] == [7, 8, 9, 10, 11]
    lines = p.read_bytes().splitlines(keepends=True)
    with p.open("rb") as f:
        assert list(reverse_lines(f.fileno(), p.stat().st_size)) == lines[::-1]


def test_reverse_lines_edge_cases(tmp_path: Path) -> None:
    p = tmp_path / "x"
    for content in [b"", b"a\n", b"a\nb\n", b"a\nb", b"\n\n", b"abc"]:
        p.write_bytes(content)
        with p.open("rb") as f:
            assert list(reverse_lines(f.fileno(), len(content))) == content.splitlines(keepends=True)[::-1]


def test_empty_file(tmp_path: Path) -> None:
    p = tmp_path / "e.jsonl"
    p.write_bytes(b"")
    assert list(iter_records(p)) == [] and tail(p, 5) == []


def test_torn_last_line(path: Path) -> None:
    with path.open("ab") as f:
        f.write(b'{"event":"dec')
    seen = []
    with pytest.raises(EvidenceCorrupt, match="line 31: torn last line"):
        for record in iter_records(path):
            seen.append(record.seq)
    assert seen == list(range(30))  # everything before it was returned
    with pytest.raises(EvidenceCorrupt, match="the last line: torn"):
        tail(path, 3)


def test_invalid_record(path: Path) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[4] = lines[4].replace(b'"v":1', b'"v":"one"')
    path.write_bytes(b"".join(lines))
    with pytest.raises(EvidenceCorrupt, match="line 5: not a valid record: v"):
        list(iter_records(path))
    assert [r.seq for r in tail(path, 3)] == [27, 28, 29]  # tail does not read that far


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(EvidenceUnavailable, match="not found"):
        list(iter_records(tmp_path / "nope"))
    with pytest.raises(EvidenceUnavailable, match="cannot read"):
        tail(tmp_path, 1)  # a directory
