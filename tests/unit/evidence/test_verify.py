"""verify(): a clean chain passes; every kind of tampering is caught at the right first bad line."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.domain.canonical import canonical_json
from orchestrator.domain.errors import EvidenceUnavailable
from orchestrator.evidence import (
    GENESIS_HASH,
    EventType,
    EvidenceEvent,
    EvidenceWriter,
    head_path,
    record_hash,
    verify,
)
from orchestrator.evidence.chain import build_line

N = 6


def ev(i: int) -> EvidenceEvent:
    kinds = [EventType.REQUEST_RECEIVED, EventType.DECISION_MADE, EventType.EXECUTION_FINISHED]
    return EvidenceEvent(
        event=kinds[i % 3],
        execution_id=f"ex-{i // 3}",
        tenant="default",
        subject="agent-7",
        status="succeeded" if i % 3 == 2 else None,
        decision="allow" if i % 3 == 1 else None,
        reason=f"reason {i}: naïve ✓",
        data={"i": i, "float": 0.5, "nested": {"list": [1, None, "x"]}},
    )


def make_chain(path: Path, n: int = N) -> list[bytes]:
    with EvidenceWriter(path) as writer:
        for i in range(n):
            writer.append_sync(ev(i), durable=False)
    return path.read_bytes().splitlines(keepends=True)


def write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


def rehash(fields: dict[str, object]) -> bytes:
    fields = dict(fields)
    fields["hash"] = record_hash(fields)
    return canonical_json(fields) + b"\n"


@pytest.fixture
def chain(tmp_path: Path) -> tuple[Path, list[bytes]]:
    path = tmp_path / "evidence.jsonl"
    return path, make_chain(path)


def test_clean_chain_verifies_with_head(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    report = verify(path)
    assert report.ok, report
    assert report.records == N
    assert report.head_checked and report.head_seq == N - 1
    assert report.last_seq == N - 1
    assert report.problem is None and report.first_bad_line is None
    assert report.warnings == ()
    first = json.loads(lines[0])
    assert first["seq"] == 0 and first["prev_hash"] == GENESIS_HASH
    for a, b in itertools.pairwise(lines):
        assert json.loads(b)["prev_hash"] == json.loads(a)["hash"]


def test_every_line_is_canonical_and_hash_matches_spec(chain: tuple[Path, list[bytes]]) -> None:
    _, lines = chain
    for raw in lines:
        fields = json.loads(raw)
        assert canonical_json(fields) + b"\n" == raw
        assert None not in fields.values()
        body = {k: v for k, v in fields.items() if k != "hash"}
        assert fields["hash"] == record_hash(body)


def test_edited_field_is_a_hash_mismatch(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines[2] = lines[2].replace(b'"tenant":"default"', b'"tenant":"attackr"')
    write_lines(path, lines)
    report = verify(path)
    assert not report.ok
    assert (report.first_bad_line, report.first_bad_seq) == (3, 2)
    assert "hash mismatch" in (report.problem or "")
    assert report.records == 2


def test_edited_and_rehashed_record_breaks_the_next_link(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    fields = json.loads(lines[2])
    fields["status"] = "failed"
    lines[2] = rehash(fields)
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line, report.first_bad_seq) == (False, 4, 3)
    assert "prev_hash" in (report.problem or "")


def test_rehashed_last_record_is_caught_by_the_head(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    fields = json.loads(lines[-1])
    fields["reason"] = "nothing to see"
    lines[-1] = rehash(fields)
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line, report.first_bad_seq) == (False, N, N - 1)
    assert "head anchor" in (report.problem or "")


def test_swapped_pair(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines[2], lines[3] = lines[3], lines[2]
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line, report.first_bad_seq) == (False, 3, 3)
    assert "swapped" in (report.problem or "")


def test_forged_well_formed_record_inserted(chain: tuple[Path, list[bytes]]) -> None:
    """A forger who gets seq, prev_hash and hash right: the chain breaks at the record after it."""
    path, lines = chain
    before = json.loads(lines[2])
    _, forged = build_line(
        {"event": "decision_made", "execution_id": "ex-1", "decision": "allow"},
        seq=before["seq"] + 1,
        ts=before["ts"],
        prev_hash=before["hash"],
    )
    lines.insert(3, forged)
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line, report.first_bad_seq) == (False, 4, 3)
    assert "inserted" in (report.problem or "")
    assert report.records == 3


def test_forged_record_with_wrong_link_inserted(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    _, forged = build_line(
        {"event": "decision_made", "execution_id": "ex-1"},
        seq=3,
        ts=json.loads(lines[0])["ts"],
        prev_hash="f" * 64,
    )
    lines.insert(3, forged)
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, 4)
    assert "inserted" in (report.problem or "")


def test_deleted_middle_record(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    del lines[2]
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line, report.first_bad_seq) == (False, 3, 3)
    assert "seq gap" in (report.problem or "") and "expected seq 2" in (report.problem or "")


@pytest.mark.parametrize("deleted", [1, 2, N])
def test_deleted_tail_records_caught_by_head(chain: tuple[Path, list[bytes]], deleted: int) -> None:
    path, lines = chain
    write_lines(path, lines[: N - deleted])
    report = verify(path)
    assert not report.ok and report.head_checked
    assert report.first_bad_line == N - deleted + 1
    assert report.first_bad_seq == N - deleted
    assert f"{deleted} record(s) deleted from the end" in (report.problem or "")


def test_deleted_tail_without_head_is_not_detectable_and_says_so(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    head_path(path).unlink()
    write_lines(path, lines[:-1])
    report = verify(path)
    assert report.ok and not report.head_checked
    assert report.records == N - 1
    assert any("cannot be detected" in w for w in report.warnings)


def test_truncated_mid_line_is_a_torn_last_line(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines[-1] = lines[-1][: len(lines[-1]) // 2]
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, N)
    assert "torn last line" in (report.problem or "")


def test_invalid_json_line(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines[1] = b'{"seq": 1, oops\n'
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line, report.first_bad_seq) == (False, 2, None)
    assert "invalid JSON" in (report.problem or "")


def test_blank_line(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines.insert(2, b"\n")
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, 3)
    assert report.problem == "blank line"


def test_unknown_field(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines[4] = lines[4].replace(b',"v":1}', b',"v":1,"zz_extra":true}')
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line, report.first_bad_seq) == (False, 5, 4)
    assert "unknown field(s): zz_extra" in (report.problem or "")


def test_null_field_is_refused(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    fields = json.loads(lines[1])
    fields["approver"] = None
    lines[1] = canonical_json(fields) + b"\n"
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, 2)
    assert "null field" in (report.problem or "")


def test_invalid_field_value(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    fields = json.loads(lines[1])
    fields["ts"] = "yesterday"
    lines[1] = rehash(fields)
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, 2)
    assert "field 'ts'" in (report.problem or "")


def test_reencoded_line_is_not_canonical(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines[3] = json.dumps(json.loads(lines[3])).encode() + b"\n"  # same values, with spaces
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, 4)
    assert "canonical" in (report.problem or "")


def test_duplicated_record(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines.insert(3, lines[2])
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, 4)
    assert "duplicate of line 3" in (report.problem or "")


def test_unknown_event_names_verify(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    with EvidenceWriter(path) as writer:
        writer.append_sync({"event": "some_future_event", "execution_id": "ex-1"})
    lines = path.read_bytes().splitlines(keepends=True)
    prev = json.loads(lines[-1])
    _, line = build_line(
        {"event": "another.new_kind", "execution_id": "ex-2"}, seq=1, ts=prev["ts"], prev_hash=prev["hash"]
    )
    path.write_bytes(b"".join([*lines, line]))
    report = verify(path)
    assert report.ok and report.records == 2
    assert report.head_checked  # the anchor (seq 0) is behind the file: fine


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"")
    report = verify(path)
    assert report.ok and report.records == 0 and report.last_seq is None and not report.head_checked


def test_emptied_file_with_head(chain: tuple[Path, list[bytes]]) -> None:
    path, _ = chain
    path.write_bytes(b"")
    report = verify(path)
    assert (report.ok, report.first_bad_line, report.first_bad_seq) == (False, 1, 0)
    assert "before any record" in (report.problem or "")


def test_invalid_head_file(chain: tuple[Path, list[bytes]]) -> None:
    path, _ = chain
    head_path(path).write_text("not json")
    report = verify(path)
    assert not report.ok and report.first_bad_line is None
    assert report.location() == "head anchor"
    assert "head anchor" in (report.problem or "")


def test_missing_file_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(EvidenceUnavailable, match="not found"):
        verify(tmp_path / "nope.jsonl")


def test_overlong_line(chain: tuple[Path, list[bytes]]) -> None:
    path, lines = chain
    lines.insert(1, b"x" * (300 * 1024) + b"\n")
    write_lines(path, lines)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, 2)
    assert "longer than" in (report.problem or "")


# ---- property: any single-byte edit anywhere is caught at that line -------------------------------


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    base = tmp_path_factory.mktemp("pristine")
    path = base / "evidence.jsonl"
    return path, make_chain(path, 5)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_single_byte_edit_is_detected(
    pristine: tuple[Path, list[bytes]], tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    src, lines = pristine
    index = data.draw(st.integers(0, len(lines) - 1), label="line")
    line = lines[index]
    pos = data.draw(st.integers(0, len(line) - 1), label="byte")
    new = data.draw(st.integers(0, 255).filter(lambda b: b != line[pos]), label="new byte")
    edited = [*lines]
    edited[index] = line[:pos] + bytes([new]) + line[pos + 1 :]
    work = tmp_path_factory.mktemp("edit") / "evidence.jsonl"
    shutil.copy(head_path(src), head_path(work))
    write_lines(work, edited)
    report = verify(work)
    assert not report.ok
    assert report.first_bad_line == index + 1, report
