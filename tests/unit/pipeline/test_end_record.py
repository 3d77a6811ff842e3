"""The end record is bounded in advance and cannot fail to build: hostile workspaces (thousands of long,
non-UTF-8 names) and hostile output still give one record that fits, verifies and keeps the outcome."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.backends.base import ExitState, ResourceUsage, StreamCapture
from orchestrator.domain.canonical import canonical_json
from orchestrator.domain.errors import SandboxOutputLimit
from orchestrator.evidence import MAX_RECORD_BYTES, EventType, EvidenceWriter, iter_records, verify
from orchestrator.evidence.fit import DEGRADED_KEY
from orchestrator.pipeline.end_record import (
    clip,
    finished_fields,
    run_limits,
    side_effects_json,
    stream_json,
)
from orchestrator.pipeline.executor import KeptOutput, RunOutcome, keep_output
from orchestrator.profiles import ProfileRegistry, ResolvedProfile
from orchestrator.results import Redactor, collect, snapshot
from orchestrator.results.record import SIDE_EFFECTS_MAX_BYTES


@pytest.fixture(scope="module")
def profile() -> ResolvedProfile:
    return ProfileRegistry().resolve("workspace-write")


def hostile_tree(root: Path, files: int, name_bytes: int = 255) -> None:
    """Files whose names are ``name_bytes`` bytes that are not UTF-8 (each becomes 4 characters, '\\xNN')."""
    for i in range(files):
        name = f"{i:05d}".encode() + bytes([0x80 + (i + j) % 0x7F for j in range(name_bytes - 5)])
        with open(os.path.join(os.fsencode(root), name), "wb") as f:
            f.write(b"x")


def outcome(**changes: object) -> RunOutcome:
    fields: dict[str, object] = {
        "exit_code": 7,
        "stdout": b"out",
        "stderr": b"",
        "stdout_kept": KeptOutput(b"out", 10_000_000, True, 0),
        "stderr_kept": KeptOutput(b"", 0, False, 0),
        "timed_out": False,
        "oom_killed": False,
        "duration_ms": 12,
        "state": ExitState(7, False, datetime.now(UTC), datetime.now(UTC), error="e" * 100_000, image_id="sha256:x"),
        "side_effects": None,
        "side_effects_error": None,
        "write_budget": None,
        "usage": ResourceUsage(1, 2, 3),
        "lifecycle": "failed: " + "\udcff" * 5000,
        "error": None,
    }
    fields.update(changes)
    return RunOutcome(**fields)  # type: ignore[arg-type]


def write_end(tmp_path: Path, fields: dict[str, object]) -> dict[str, object]:
    path = tmp_path / "evidence.jsonl"
    with EvidenceWriter(path) as writer:
        writer.append_sync({"event": EventType.EXECUTION_FINISHED, "execution_id": "ex-1", **fields})
    assert verify(path).ok
    assert len(path.read_bytes()) <= MAX_RECORD_BYTES
    (record,) = iter_records(path)
    return record.fields()


def test_a_huge_hostile_listing_is_bounded_within_its_budget(tmp_path: Path, profile: ResolvedProfile) -> None:
    """2,000 files with 255-byte names that are not UTF-8 (over 2 MiB written out): the record counts
    them all, digests them all, lists what fits, and the end record needs nothing degraded."""
    ws = tmp_path / "ws"
    ws.mkdir()
    before = snapshot(ws)
    hostile_tree(ws, 2000)
    effects = collect(before, ws, redactor=Redactor())
    summary = side_effects_json(effects)
    assert summary is not None
    assert len(canonical_json(summary)) <= SIDE_EFFECTS_MAX_BYTES
    assert summary["created_count"] == 2000 and summary["digest"] == effects.digest
    assert summary["listing_complete"] is False and 0 < len(summary["created"]) < 2000
    assert all(len(c["path"]) <= 256 for c in summary["created"]) and summary["created"][0]["path"].startswith(
        "00000\\x80\\x81"
    )
    fields = write_end(tmp_path, finished_fields(outcome(side_effects=effects, lifecycle="complete"), profile, None))
    data = fields["data"]
    assert isinstance(data, dict)
    assert DEGRADED_KEY not in data  # bounded in advance: nothing left for the writer to degrade
    assert data["exit_code"] == 7 and data["side_effects"]["created_count"] == 2000


def test_a_small_listing_is_recorded_whole(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    before = snapshot(ws)
    hostile_tree(ws, 3, name_bytes=20)
    effects = collect(before, ws, redactor=Redactor())
    assert side_effects_json(effects) == effects.to_dict() and effects.listing_complete


def test_free_text_is_clipped_and_output_is_sizes_and_the_hash_of_what_was_kept(
    tmp_path: Path, profile: ResolvedProfile
) -> None:
    error = SandboxOutputLimit("output passed the profile's cap and was truncated")
    fields = write_end(tmp_path, finished_fields(outcome(), profile, error))
    data = fields["data"]
    assert isinstance(data, dict)
    assert len(data["engine_error"]) <= 2048 and data["engine_error"].startswith("eee")
    assert data["lifecycle_stream"].startswith("failed: \\udcff")  # escaped by the writer, listed
    assert any(note.startswith("data.lifecycle_stream") for note in data[DEGRADED_KEY])
    assert data["stdout"] == {
        "bytes": 10_000_000,
        "kept_bytes": 3,
        "sha256": hashlib.sha256(b"out").hexdigest(),
        "truncated": True,
    }
    assert (fields["status"], fields["error_code"]) == ("failed", "SANDBOX.OUTPUT_LIMIT")


def test_the_output_hash_never_covers_the_raw_secret() -> None:
    secret = b"pin=4711-hunter2"
    capture = StreamCapture(b"token: " + secret + b"\n", 24, False)
    kept = keep_output(capture, 1024, Redactor(literals=[secret]))
    assert kept.data == b"token: [REDACTED:literal]\n" and kept.redactions == 1
    digest = stream_json(kept)
    assert digest is not None and digest["sha256"] == hashlib.sha256(kept.data).hexdigest()
    assert digest["sha256"] != hashlib.sha256(capture.data).hexdigest()


def test_a_bug_while_building_still_gives_an_end_record_with_the_exit(tmp_path: Path, profile: ResolvedProfile) -> None:
    broken = outcome(usage=object())  # not a dataclass: building the data raises
    fields = finished_fields(broken, profile, None)
    assert fields["data"] == {
        "exit_code": 7,
        "timed_out": False,
        "oom_killed": False,
        "pids_limit_killed": False,
        "duration_ms": 12,
        "end_cause": "output_cap",  # what a run's usage needs is still there
        "limits": run_limits(profile).to_json(),
        "assembly_failed": ["data: TypeError"],
    }
    assert write_end(tmp_path, fields)["status"] == "failed"


def test_clip() -> None:
    assert clip("abc", 3) == "abc"
    clipped = clip("a" * 5000, 100)
    assert len(clipped) == 100 and clipped.startswith("aaa") and "[5000 chars, sha256 " in clipped
