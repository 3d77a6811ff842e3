"""verify() and ``evidence verify`` name every execution that began and never ended."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from orchestrator.cli.evidence_cmd import register
from orchestrator.evidence import EventType, EvidenceWriter, Unended, verify


@pytest.fixture
def now() -> float:
    """The clock when the test starts (the CLI checks deadlines against it): never when the module was
    imported, which in a long suite can be many minutes before the test runs."""
    return float(int(time.time()))


def started(execution_id: str, deadline: float | None) -> dict[str, object]:
    data: dict[str, object] = {"image": "img", "runtime": "runc"}
    if deadline is not None:
        data["deadline_unix"] = round(deadline)
    return {"event": EventType.EXECUTION_STARTED, "execution_id": execution_id, "status": "starting", "data": data}


def ended(execution_id: str, event: EventType) -> dict[str, object]:
    return {"event": event, "execution_id": execution_id, "status": "succeeded"}


@pytest.fixture
def path(tmp_path: Path, now: float) -> Path:
    """ex-done ends each way; ex-lost passed its deadline; ex-live is before it; ex-old has no deadline."""
    p = tmp_path / "evidence.jsonl"
    with EvidenceWriter(p) as writer:
        for event in (
            {"event": EventType.REQUEST_RECEIVED, "execution_id": "ex-refused"},
            {"event": EventType.RUN_FAILED, "execution_id": "ex-refused", "status": "refused"},
            started("ex-finished", now + 60),
            started("ex-failed", now - 60),
            started("ex-lost", now - 1),
            started("ex-abandoned", now - 3600),
            ended("ex-finished", EventType.EXECUTION_FINISHED),
            ended("ex-failed", EventType.RUN_FAILED),
            ended("ex-abandoned", EventType.EXECUTION_ABANDONED),
            started("ex-live", now + 300),
            started("ex-old", None),
            {"event": EventType.CONTAINER_STARTED, "execution_id": "ex-live"},
        ):
            writer.append_sync(event)
    return p


def test_unended_executions_are_listed_in_file_order(path: Path, now: float) -> None:
    report = verify(path, now=now)
    assert report.ok and report.records == 12
    assert report.unended == (
        Unended("ex-lost", 5, 4, report.unended[0].started_ts, now - 1, running=False),
        Unended("ex-live", 10, 9, report.unended[1].started_ts, now + 300, running=True),
        Unended("ex-old", 11, 10, report.unended[2].started_ts, None, running=False),
    )
    assert not report.complete
    assert report.to_dict()["complete"] is False
    assert [u["execution_id"] for u in report.to_dict()["unended"]] == ["ex-lost", "ex-live", "ex-old"]


def test_an_execution_before_its_deadline_is_running_not_missing(tmp_path: Path, now: float) -> None:
    p = tmp_path / "evidence.jsonl"
    with EvidenceWriter(p) as writer:
        writer.append_sync(started("ex-1", now + 10))
    assert verify(p, now=now).complete
    assert not verify(p, now=now + 11).complete  # the same record, once its deadline passed
    with EvidenceWriter(p) as writer:
        writer.append_sync(ended("ex-1", EventType.EXECUTION_FINISHED))
    report = verify(p, now=now + 11)
    assert report.complete and report.unended == ()


def test_a_broken_chain_reports_corruption_not_unended(path: Path, now: float) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:6] + lines[7:]))  # ex-finished's end record deleted
    report = verify(path, now=now)
    assert not report.ok and report.first_bad_line == 7
    assert report.unended == ()


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sandboxctl")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.handler(args)
    assert isinstance(code, int)
    return code


def test_cli_exit_3_names_each_unended_execution(path: Path, capsys: pytest.CaptureFixture[str], now: float) -> None:
    assert run(["evidence", "verify", "--path", str(path)]) == 3
    out, err = capsys.readouterr()
    assert out.startswith("OK: 12 record(s), chain intact")
    lines = err.splitlines()
    assert lines[0].startswith("EVIDENCE.INCOMPLETE: execution ex-lost began at line 5 (seq 4, ")
    assert lines[0].endswith(
        "and never ended: no execution_finished, run_failed or execution_abandoned record "
        f"(its deadline passed at unix {now - 1:.0f})"
    )
    assert lines[1].startswith("note: execution ex-live began at line 10 (seq 9, ")
    assert lines[1].endswith("and has not ended yet: its deadline has not passed")
    assert lines[2].startswith("EVIDENCE.INCOMPLETE: execution ex-old began at line 11 (seq 10, ")
    assert lines[2].endswith("execution_abandoned record")
    assert len(lines) == 3


def test_cli_json_has_unended_and_complete(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["evidence", "verify", "--path", str(path), "--json"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["complete"] is False
    assert [(u["execution_id"], u["running"]) for u in report["unended"]] == [
        ("ex-lost", False),
        ("ex-live", True),
        ("ex-old", False),
    ]


def test_cli_only_running_executions_exit_0_with_a_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], now: float
) -> None:
    p = tmp_path / "evidence.jsonl"
    with EvidenceWriter(p) as writer:
        writer.append_sync(started("ex-now", now + 300))
    assert run(["evidence", "verify", "--path", str(p)]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("OK: 1 record(s)")
    assert err.startswith("note: execution ex-now began at line 1 (seq 0, ")


def test_cli_lists_at_most_twenty_then_points_to_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], now: float
) -> None:
    p = tmp_path / "evidence.jsonl"
    with EvidenceWriter(p) as writer:
        for i in range(25):
            writer.append_sync(started(f"ex-{i}", now - 10))
    assert run(["evidence", "verify", "--path", str(p)]) == 3
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 21 and lines[-1] == "... and 5 more (see --json)"
