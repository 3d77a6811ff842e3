"""The writer degrades an event that does not fit one record, or holds text that is not UTF-8; it never
refuses it for that. What was changed is listed in the record itself, and the chain verifies."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.canonical import canonical_json
from orchestrator.evidence import MAX_RECORD_BYTES, EvidenceWriter, iter_records, verify
from orchestrator.evidence.fit import DEGRADED_KEY, OMITTED_KEY, TEXT_LIMITS, fit_fields

END = {"event": "execution_finished", "execution_id": "ex-1", "status": "succeeded"}


def write_one(tmp_path: Path, event: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "evidence.jsonl"
    with EvidenceWriter(path) as writer:
        writer.append_sync(event)
    report = verify(path)
    assert report.ok and report.records == 1, report
    raw = path.read_bytes()
    assert len(raw) <= MAX_RECORD_BYTES
    (record,) = iter_records(path)
    return record.fields()


def test_text_limits_are_the_free_text_fields() -> None:
    assert TEXT_LIMITS == {
        "execution_id": 256,
        "tenant": 256,
        "subject": 256,
        "tool": 64,
        "call_id": 256,
        "decision": 64,
        "approver": 256,
        "reason": 16 * 1024,
        "status": 64,
    }


def test_an_event_that_fits_is_left_alone() -> None:
    event = {**END, "reason": "ok", "data": {"exit_code": 0, "paths": ["a", "b"]}}
    assert fit_fields(event, 1000) == event


def test_an_oversized_part_is_replaced_by_its_size_and_hash(tmp_path: Path) -> None:
    listing = [f"dir/{i:06d}-" + "n" * 200 for i in range(3000)]  # ~640 KB
    data = {"exit_code": 3, "stdout": {"bytes": 10}, "side_effects": {"created": 3000, "created_paths": listing}}
    fields = write_one(tmp_path, {**END, "data": data})
    got = fields["data"]
    assert got["exit_code"] == 3 and got["stdout"] == {"bytes": 10}  # small facts stay
    effects = got["side_effects"]
    assert effects["created"] == 3000  # only the part too large is replaced, as deep as that suffices
    encoded = canonical_json(listing)
    assert effects["created_paths"] == {
        OMITTED_KEY: "too large for one evidence record",
        "bytes": len(encoded),
        "sha256": hashlib.sha256(encoded).hexdigest(),
        "items": 3000,
    }
    assert got[DEGRADED_KEY] == [
        f"data.side_effects.created_paths: replaced by its size and sha256 ({len(encoded)} bytes encoded)"
    ]


def test_many_large_parts_are_replaced_largest_first(tmp_path: Path) -> None:
    data = {f"part{i}": "x" * (40_000 + i) for i in range(10)}  # 400 KB in ten parts
    fields = write_one(tmp_path, {**END, "data": data})
    got = fields["data"]
    omitted = sorted(k for k, v in got.items() if isinstance(v, dict) and OMITTED_KEY in v)
    kept = sorted(k for k, v in got.items() if isinstance(v, str))
    assert omitted and kept and set(omitted) | set(kept) == set(data)
    assert min(int(k[4:]) for k in omitted) > max(int(k[4:]) for k in kept)  # the largest went first
    assert all(got[k] == data[k] for k in kept)


def test_text_that_is_not_utf8_is_escaped_in_values_and_keys(tmp_path: Path) -> None:
    name = "caf\udce9-\udcff.txt"  # os.fsdecode of b"caf\xe9-\xff.txt"
    data = {"created_paths": [name], "by_name": {name: 1, "caf\\udce9-\\udcff.txt": 2}}
    fields = write_one(tmp_path, {**END, "reason": "bad \ud800 text", "data": data})
    assert fields["reason"] == "bad \\ud800 text"
    got = fields["data"]
    assert got["created_paths"] == ["caf\\udce9-\\udcff.txt"]
    # the escaped key never takes the place of a key that already had that text
    assert got["by_name"] == {"caf\\udce9-\\udcff.txt": 2, "caf\\udce9-\\udcff.txt~": 1}
    assert len(got[DEGRADED_KEY]) == 3 and all("not UTF-8 escaped" in note for note in got[DEGRADED_KEY])


def test_overlong_free_text_is_clipped_with_its_length_and_hash(tmp_path: Path) -> None:
    reason = "engine said: " + "z" * 100_000
    fields = write_one(tmp_path, {**END, "reason": reason, "subject": "s" * 1000})
    assert len(fields["reason"]) == 16 * 1024 and fields["reason"].startswith("engine said: zzz")
    digest = hashlib.sha256(reason.encode()).hexdigest()[:16]
    assert fields["reason"].endswith(f"[clipped: {len(reason)} chars, sha256 {digest}]")
    assert len(fields["subject"]) == 256 and fields["subject"].startswith("sss")
    assert sorted(fields["data"][DEGRADED_KEY]) == ["reason: clipped to 16384 chars", "subject: clipped to 256 chars"]


def test_degradation_never_hides_a_wrong_field(tmp_path: Path) -> None:
    from orchestrator.domain.errors import InputInvalid

    with EvidenceWriter(tmp_path / "evidence.jsonl") as writer:
        with pytest.raises(InputInvalid, match="error_code"):
            writer.append_sync({**END, "error_code": "not a code", "data": {"x": "y" * 400_000}})
        with pytest.raises(InputInvalid, match="data"):
            writer.append_sync({**END, "data": {"n": float("inf"), "x": "y" * 400_000}})


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(alphabet=st.characters(), max_size=3000),  # surrogates included
)
json_value = st.recursive(
    json_leaf,
    lambda children: st.lists(children, max_size=30) | st.dictionaries(st.text(max_size=40), children, max_size=30),
    max_leaves=200,
)


@settings(max_examples=60, deadline=None)
@given(data=st.dictionaries(st.text(max_size=20), json_value, max_size=20), reason=st.text(max_size=20_000))
def test_any_event_fits(tmp_path_factory: pytest.TempPathFactory, data: dict[str, Any], reason: str) -> None:
    budget = 20_000
    fitted = fit_fields({**END, "reason": reason, "data": data}, budget)
    assert len(canonical_json(fitted)) <= budget
    json.loads(canonical_json(fitted))
