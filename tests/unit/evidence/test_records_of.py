"""records_of: one execution's records found by bisecting the file on record times — the same records a
whole-file scan finds, without reading the file from its start."""

from __future__ import annotations

from pathlib import Path

from orchestrator.evidence import EventType, EvidenceWriter, iter_records, records_of


def test_the_same_records_as_a_full_scan(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    with EvidenceWriter(path) as writer:
        for i in range(3000):  # enough to bisect over many blocks
            writer.append_sync(
                {"event": EventType.REQUEST_RECEIVED, "execution_id": f"ex-{i % 50}", "reason": "x" * 200},
                durable=False,
            )
        writer.flush_sync()
    every = list(iter_records(path))
    first, last = every[0].ts, every[-1].ts
    middle = every[1500]
    for ident in ("ex-0", "ex-17", "ex-49"):
        expected = [r for r in every if r.execution_id == ident]
        assert records_of(path, ident, since="2000-01-01T00:00:00.000000Z") == expected
        assert records_of(path, ident, since=first, until=last) == expected
        assert records_of(path, ident, since=first, limit=3) == expected[:3]
        assert records_of(path, ident, since=middle.ts) == [r for r in expected if r.ts >= middle.ts]
    assert records_of(path, "ex-nothing", since=first) == []
    assert records_of(path, "ex-0", since="2999-01-01T00:00:00.000000Z") == []
