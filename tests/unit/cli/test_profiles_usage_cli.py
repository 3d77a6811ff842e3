"""sandboxctl profiles usage | recommend | whatif over an evidence file (no service): the JSON is the model the
API answers with, the text says the same for people, and bad input is a stable code, never a traceback.
(Against the running service: tests/api/test_api_profile_usage.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.backends.base import ResourceUsage
from orchestrator.cli.main import main
from orchestrator.evidence import EventType, EvidenceWriter
from orchestrator.pipeline.end_record import finished_fields
from orchestrator.profiles import ProfileRegistry
from tests.unit.pipeline.test_end_record import outcome

MIB = 2**20


@pytest.fixture(scope="module")
def evidence(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 runs of workspace-write: memory peaks 10, 20, … 400 MiB, 1 s of CPU over 2 s of wall each; the last
    one OOM-killed. Written by the real writer, with the end records the runner writes."""
    path = tmp_path_factory.mktemp("usage") / "evidence.jsonl"
    profile = ProfileRegistry().resolve("workspace-write")
    with EvidenceWriter(path) as writer:
        for i in range(1, 41):
            execution_id = f"ex-{i:02d}"
            begin = {"profile": "workspace-write"}
            writer.append_sync(
                {
                    "event": EventType.EXECUTION_STARTED,
                    "execution_id": execution_id,
                    "tenant": f"t{i % 2}",
                    "data": begin,
                }
            )
            usage = ResourceUsage(memory_peak_bytes=i * 10 * MIB, cpu_total_ns=10**9, pids_peak=4, source="cgroup")
            run = outcome(usage=usage, duration_ms=2000, exit_code=137 if i == 40 else 0, oom_killed=i == 40)
            writer.append_sync(
                {
                    "event": EventType.EXECUTION_FINISHED,
                    "execution_id": execution_id,
                    **finished_fields(run, profile, None),
                }
            )
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["profiles", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_usage_json_and_text(capsys: pytest.CaptureFixture[str], evidence: Path) -> None:
    code, out, _ = run(capsys, "usage", "workspace-write", "--evidence", str(evidence), "--json")
    assert code == 0
    report = json.loads(out)
    assert report["runs"] == 40 and report["profile"] == "workspace-write"
    (group,) = report["groups"]
    memory = next(m for m in group["measures"] if m["measure"] == "memory_peak_bytes")
    # nearest rank over 10..400 MiB in steps of 10: p50 = rank 20 = 200 MiB, p90 = rank 36 = 360 MiB
    assert (memory["known"], memory["percentiles"]["p50"], memory["percentiles"]["p90"]) == (40, 200 * MIB, 360 * MIB)
    assert memory["limit"] == 512 * MIB and memory["ended_at_limit"] == 1
    assert group["ended"]["oom"] == 1 and group["ended"]["output_cap"] == 39  # outcome() truncates stdout
    code, out, _ = run(capsys, "usage", "workspace-write", "--evidence", str(evidence), "--by", "tenant")
    assert code == 0 and "tenant t0: 20 runs" in out and "tenant t1: 20 runs" in out
    assert "memory_peak_bytes" in out and "200.0Mi" in out


def test_recommend_gives_a_patch_that_is_a_profile(capsys: pytest.CaptureFixture[str], evidence: Path) -> None:
    code, out, _ = run(capsys, "recommend", "workspace-write", "--evidence", str(evidence), "--json")
    assert code == 0
    answer = json.loads(out)
    memory = next(r for r in answer["resources"] if r["key"] == "memory")
    assert memory["confidence"] == "low" and memory["recommended"] is not None
    assert memory["recommended"] >= 400 * MIB * 1.2  # the OOM-killed run's 400 MiB, bumped as the VPA does
    code, out, _ = run(capsys, "recommend", "workspace-write", "--evidence", str(evidence))
    assert code == 0 and "\nlimits:\n" in out and "\n  memory: 707m\n" in out


def test_whatif_names_the_runs_a_lower_limit_would_have_killed(
    capsys: pytest.CaptureFixture[str], evidence: Path
) -> None:
    argv = ("whatif", "workspace-write", "--evidence", str(evidence), "--set", "memory=256m")
    code, out, _ = run(capsys, *argv, "--node-cpus", "2", "--node-memory", "8g", "--json")
    assert code == 0
    report = json.loads(out)
    (memory,) = report["limits"]
    # peaks of 260 .. 390 MiB pass 256 MiB (14 runs); the run killed at 512 MiB needed more than 256 too
    assert memory["would_meet"]["total"] == 15 and "ex-26" in memory["would_meet"]["execution_ids"]
    assert report["node"]["current"] == 2 and report["node"]["proposed"] == 2  # cpus 1 bounds it: 2 cores
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "memory: 512.0Mi -> 256.0Mi: 15 would end as oom" in out


@pytest.mark.parametrize(
    ("argv", "code", "fragment"),
    [
        (("whatif", "workspace-write", "--set", "memory=lots"), "INPUT.INVALID", "limits.memory"),
        (("whatif", "workspace-write", "--set", "colour=blue"), "INPUT.INVALID", "colour"),
        (("whatif", "workspace-write", "--set", "memory"), "INPUT.INVALID", "KEY=VALUE"),
        (("usage", "workspace-write", "--since", "yesterday"), "INPUT.INVALID", "since"),
        (("recommend", "no-such-profile"), "PROFILE.NOT_FOUND", "no-such-profile"),
        (
            ("whatif", "workspace-write", "--set", "memory=64m", "--node-cpus", "inf", "--node-memory", "8g"),
            "INPUT.INVALID",
            "node",
        ),
    ],
)
def test_bad_input_is_a_stable_code(
    capsys: pytest.CaptureFixture[str], evidence: Path, argv: tuple[str, ...], code: str, fragment: str
) -> None:
    status, out, err = run(capsys, *argv, "--evidence", str(evidence), "--json")
    assert status == {"INPUT.INVALID": 2, "PROFILE.NOT_FOUND": 125}[code]  # docs/errors.md
    error = json.loads(out)["error"]
    assert error["code"] == code and fragment in error["message"], error
    assert err.startswith(f"sandboxctl: {code}: ")  # said for people too


def test_the_window_leaves_older_runs_out(capsys: pytest.CaptureFixture[str], evidence: Path) -> None:
    code, out, _ = run(capsys, "usage", "workspace-write", "--evidence", str(evidence), "--since", "0s", "--json")
    assert code == 0 and json.loads(out)["runs"] == 0  # a window of nothing: every run ended before it
    code, out, _ = run(capsys, "usage", "workspace-write", "--evidence", str(evidence), "--since", "1.5h", "--json")
    assert code == 0 and json.loads(out)["runs"] == 40


def test_evidence_alone_reads_the_default_file(
    capsys: pytest.CaptureFixture[str], evidence: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SANDBOX_EVIDENCE_PATH", str(evidence))  # as `sandboxctl evidence` finds it
    code, out, _ = run(capsys, "usage", "workspace-write", "--evidence", "--json")
    assert code == 0 and json.loads(out)["runs"] == 40
