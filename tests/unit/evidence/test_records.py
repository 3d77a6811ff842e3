"""Records, line building and the default path."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from orchestrator.domain.canonical import canonical_json
from orchestrator.evidence import (
    GENESIS_HASH,
    EventType,
    EvidenceEvent,
    EvidenceRecord,
    default_evidence_path,
    format_ts,
    record_hash,
)
from orchestrator.evidence.chain import LineProblem, build_line, parse_line
from orchestrator.evidence.records import EVENT_FIELDS, RECORD_FIELDS, WRITER_FIELDS, now_ts


def test_event_types() -> None:
    assert EventType("container_oom") is EventType.CONTAINER_OOM
    assert {e.value for e in EventType} >= {
        "request_received",
        "decision_made",
        "approval_requested",
        "approval_decided",
        "execution_started",
        "execution_finished",
        "run_failed",
        "execution_abandoned",
        "container_created",
        "container_started",
        "container_died",
        "container_oom",
        "container_killed",
        "container_destroyed",
    }


def test_every_field_is_described() -> None:
    for model in (EvidenceEvent, EvidenceRecord):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name}"


def test_record_fields_are_event_fields_plus_writer_fields() -> None:
    assert RECORD_FIELDS == EVENT_FIELDS | WRITER_FIELDS
    assert EvidenceRecord.model_config.get("frozen") and EvidenceRecord.model_config.get("extra") == "forbid"
    assert EvidenceEvent.model_config.get("frozen") and EvidenceEvent.model_config.get("extra") == "forbid"


def test_event_validation() -> None:
    with pytest.raises(ValidationError):
        EvidenceEvent(event="decision_made", execution_id="x", unknown=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError):
        EvidenceEvent(event="Not A Name", execution_id="x")
    with pytest.raises(ValidationError):
        EvidenceEvent(event="run_failed", execution_id="x", error_code="not-a-code")
    with pytest.raises(ValidationError):
        EvidenceEvent(event="run_failed", execution_id="x", data={"x": float("inf")})
    with pytest.raises(ValidationError):
        EvidenceEvent(event="container_died", execution_id="x", engine_ts="12:00")
    ok = EvidenceEvent(
        event=EventType.CONTAINER_DIED,
        execution_id="x",
        engine_ts="2026-11-22T03:54:54.123456789Z",
        error_code="SANDBOX.OOM",
    )
    assert ok.event == "container_died"


def test_timestamps() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=2)))
    assert format_ts(moment) == "2026-01-02T01:04:05.000006Z"
    with pytest.raises(ValueError, match="timezone"):
        format_ts(datetime(2026, 1, 1))
    assert EvidenceEvent(event="x", execution_id="x", engine_ts=format_ts(datetime.now(UTC))).engine_ts
    stamp = now_ts()
    assert (
        EvidenceRecord.model_validate(
            {"v": 1, "seq": 0, "ts": stamp, "event": "x", "prev_hash": GENESIS_HASH, "hash": "0" * 64}
        ).ts
        == stamp
    )


def test_record_is_strict() -> None:
    base = {"v": 1, "seq": 0, "ts": now_ts(), "event": "x", "prev_hash": GENESIS_HASH, "hash": "0" * 64}
    EvidenceRecord.model_validate(base)
    for bad in (
        {"seq": "0"},
        {"seq": True},
        {"v": 2},
        {"v": True},
        {"v": 1.0},
        {"seq": -1},
        {"hash": "A" * 64},
        {"extra": 1},
    ):
        with pytest.raises(ValidationError):
            EvidenceRecord.model_validate({**base, **bad})


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    data=st.none() | st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    reason=st.none() | st.text(max_size=60),
    subject=st.none() | st.text(min_size=1, max_size=30),
    digest=st.none() | st.text("0123456789abcdef", min_size=64, max_size=64),
    seq=st.integers(0, 2**62),
)
def test_build_line_is_canonical_and_parses_back(
    data: dict[str, object] | None, reason: str | None, subject: str | None, digest: str | None, seq: int
) -> None:
    try:
        event = EvidenceEvent(
            event="decision_made",
            execution_id="ex-1",
            data=data,
            reason=reason,
            subject=subject,
            policy_version_hash=digest,
        )
        payload = {k: v for k, v in event.model_dump(mode="json").items() if v is not None}
        canonical_json(payload)
    except (ValidationError, ValueError):
        return  # not representable (lone surrogates): refused before it gets here
    fields, line = build_line(payload, seq=seq, ts=now_ts(), prev_hash="e" * 64)
    assert line == canonical_json(fields) + b"\n"
    assert fields["hash"] == record_hash(fields)
    assert parse_line(line) == fields
    assert EvidenceRecord.model_validate(fields).to_json_line() == line


def test_parse_line_problems() -> None:
    fields, line = build_line({"event": "x", "execution_id": "e"}, seq=0, ts=now_ts(), prev_hash=GENESIS_HASH)
    assert parse_line(line) == fields
    with pytest.raises(LineProblem, match="newline"):
        parse_line(line[:-1])
    with pytest.raises(LineProblem, match="not a JSON object"):
        parse_line(b"[1,2]\n")
    with pytest.raises(LineProblem, match="missing field"):
        parse_line(b'{"event":"x"}\n')
    with pytest.raises(LineProblem, match="invalid JSON"):
        parse_line(b'{"seq":NaN}\n')


def test_default_evidence_path(tmp_path: Path) -> None:
    home = Path.home()
    assert default_evidence_path({"SANDBOX_EVIDENCE_PATH": "/x/e.jsonl"}) == Path("/x/e.jsonl")
    assert default_evidence_path({"SANDBOX_EVIDENCE_PATH": "", "SANDBOX_STATE_DIR": "/s"}) == Path("/s/evidence.jsonl")
    assert default_evidence_path({"XDG_STATE_HOME": "/xdg"}) == Path("/xdg/sandbox-orchestrator/evidence.jsonl")
    fallback = home / ".local/state/sandbox-orchestrator/evidence.jsonl"
    assert default_evidence_path({"XDG_STATE_HOME": "relative"}) == fallback
    assert default_evidence_path({}) == fallback
    assert default_evidence_path({"SANDBOX_STATE_DIR": "~/st"}) == home / "st" / "evidence.jsonl"
