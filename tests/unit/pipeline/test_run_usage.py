"""A run's usage as its end record says it: the end cause, the limits it had, and the same figures whether the
runner builds them from the record it has just written or they are read back from the evidence file."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import pytest

from orchestrator.backends.base import ResourceUsage
from orchestrator.domain.errors import ExecutionCancelled, SandboxPidsLimit, SandboxUnavailable
from orchestrator.domain.usage import EndCause, RunLimits
from orchestrator.evidence import EventType, EvidenceWriter
from orchestrator.evidence.usage import RunContext, abandoned_run, read_usage, usage_from_end
from orchestrator.pipeline.end_record import end_cause, failed_cause, finished_fields, run_limits
from orchestrator.pipeline.executor import KeptOutput
from orchestrator.profiles import ProfileRegistry, ResolvedProfile
from tests.unit.pipeline.test_end_record import outcome


@pytest.fixture(scope="module")
def profile() -> ResolvedProfile:
    return ProfileRegistry().resolve("workspace-write")


@pytest.mark.parametrize(
    ("changes", "cause"),
    [
        ({"exit_code": 0, "stdout_kept": KeptOutput(b"", 0, False, 0)}, EndCause.OK),
        ({"stdout_kept": KeptOutput(b"", 0, False, 0)}, EndCause.EXIT_NONZERO),  # exit 7
        ({}, EndCause.OUTPUT_CAP),  # exit 7, stdout truncated: the cap is what it met
        ({"timed_out": True, "oom_killed": True}, EndCause.WALL_TIMEOUT),  # the first that applies
        ({"oom_killed": True, "exit_code": 137}, EndCause.OOM),
        ({"pids_limit_killed": True}, EndCause.PIDS_LIMIT),
        ({"exit_code": None}, EndCause.FAILED),
    ],
)
def test_the_end_cause_is_the_first_that_applies(changes: dict[str, object], cause: EndCause) -> None:
    assert end_cause(outcome(**changes)) is cause


def test_what_the_run_was_told_counts_too() -> None:
    """Forks refused at the pids limit under runc (the command went on: exit 0, SANDBOX.PIDS_LIMIT) met that
    limit; a pre-started sandbox gone before the command was sent ran nothing of it."""
    ran = outcome(exit_code=0, stdout_kept=KeptOutput(b"", 0, False, 0))
    assert end_cause(ran, SandboxPidsLimit("2 process creation(s) refused")) is EndCause.PIDS_LIMIT
    assert end_cause(ran, SandboxUnavailable("the sandbox had ended")) is EndCause.FAILED
    assert end_cause(ran, None) is EndCause.OK


@pytest.mark.parametrize(
    ("stopped_by", "cause"),
    [("closed", EndCause.CANCELLED), ("idle", EndCause.IDLE_TIMEOUT), ("lifetime", EndCause.WALL_TIMEOUT),
     ("exit", EndCause.EXIT_NONZERO), (None, EndCause.EXIT_NONZERO)],
)  # fmt: skip
def test_a_session_its_caller_stopped_ended_by_that(stopped_by: str | None, cause: EndCause) -> None:
    """A session's kill (137) is not its command's exit: closed is cancelled, idle its idle timeout, lifetime its
    wall timeout; its own exit stays its own. An OOM kill before the stop is still an OOM."""
    killed = outcome(exit_code=137, stdout_kept=KeptOutput(b"", 0, False, 0))
    assert end_cause(killed, None, stopped_by) is cause
    assert end_cause(outcome(exit_code=137, oom_killed=True), None, "closed") is EndCause.OOM
    # stopped when idle, its pod dying past its lifetime's deadline: the stop came first
    assert end_cause(outcome(exit_code=137, timed_out=True), None, "idle") is EndCause.IDLE_TIMEOUT


def test_a_run_failed_is_cancelled_or_failed() -> None:
    assert failed_cause(ExecutionCancelled("gone")) is EndCause.CANCELLED
    assert failed_cause(SandboxUnavailable("lost")) is EndCause.FAILED


def test_the_end_record_carries_the_limits_the_run_had(profile: ResolvedProfile) -> None:
    data = finished_fields(outcome(), profile, None)["data"]
    assert data["end_cause"] == "output_cap"
    limits = RunLimits.from_json(data["limits"])
    assert limits == run_limits(profile)
    assert (limits.memory_bytes, limits.cpus, limits.pids) == (profile.memory_bytes, profile.cpus, profile.pids_limit)


def test_usage_from_the_end_record_keeps_unknown_apart_from_zero(profile: ResolvedProfile) -> None:
    usage = ResourceUsage(memory_peak_bytes=0, cpu_total_ns=None, pids_peak=5, source="cgroup")
    data = finished_fields(outcome(usage=usage, duration_ms=1500), profile, None)["data"]
    context = RunContext("workspace-write", "acme", "shell_exec", "org/repo")
    run = usage_from_end("ex-1", context, data, ended_at=10.0)
    assert run is not None
    assert (run.memory_peak_bytes, run.cpu_seconds, run.pids_peak, run.source) == (0, None, 5, "cgroup")
    assert (run.wall_seconds, run.stdout_bytes, run.stderr_bytes) == (1.5, 10_000_000, 0)
    assert (run.workspace_bytes_written, run.workspace_files_written) == (None, None)  # no record of the workspace
    assert run.cores is None  # CPU unknown: never 0 cores
    assert (run.tenant, run.tool, run.ci_repository, run.cause) == (
        "acme",
        "shell_exec",
        "org/repo",
        EndCause.OUTPUT_CAP,
    )


def _ts(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_the_evidence_file_gives_the_same_usage(tmp_path: Path, profile: ResolvedProfile) -> None:
    """Three runs began; one ended with its usage, one was cancelled, one (written by an older version) has
    no limits on its end record; a fourth never began; runs of another profile and before ``since`` are left out."""
    path = tmp_path / "evidence.jsonl"
    finished = finished_fields(outcome(usage=ResourceUsage(7 * 2**20, 2_000_000_000, 9, source="init")), profile, None)
    finished["data"]["duration_ms"] = 4000
    old = finished_fields(outcome(), profile, None)
    del old["data"]["limits"], old["data"]["end_cause"]
    cancelled = {"end_cause": "cancelled", "limits": run_limits(profile).to_json(), "side_effects": None}

    def begin(execution_id: str, name: str) -> dict[str, object]:
        data = {"profile": name, "ci": {"repository": "org/repo"}} if execution_id == "ex-a" else {"profile": name}
        return {
            "event": EventType.EXECUTION_STARTED,
            "execution_id": execution_id,
            "tenant": "t",
            "tool": "x",
            "data": data,
        }

    with EvidenceWriter(path) as writer:
        for record in (
            begin("ex-a", "workspace-write"),
            begin("ex-b", "workspace-write"),
            begin("ex-c", "workspace-write"),
            begin("ex-d", "ci"),
            {"event": EventType.EXECUTION_FINISHED, "execution_id": "ex-a", **finished},
            {"event": EventType.RUN_FAILED, "execution_id": "ex-b", "status": "cancelled", "data": cancelled},
            {"event": EventType.EXECUTION_FINISHED, "execution_id": "ex-c", **old},
            {"event": EventType.EXECUTION_FINISHED, "execution_id": "ex-d", **finished},
            {"event": EventType.EXECUTION_FINISHED, "execution_id": "ex-never-began", **finished},
        ):
            writer.append_sync(record)
    runs = list(read_usage(path, profile="workspace-write"))
    assert [r.execution_id for r in runs] == ["ex-a", "ex-b"]
    a, b = runs
    assert (a.memory_peak_bytes, a.cpu_seconds, a.pids_peak, a.wall_seconds, a.source) == (
        7 * 2**20,
        2.0,
        9,
        4.0,
        "init",
    )
    assert a.cores == 0.5 and a.ci_repository == "org/repo" and (a.tenant, a.tool) == ("t", "x")
    assert a.limits == run_limits(profile) and a.cause is EndCause.OUTPUT_CAP
    assert b.cause is EndCause.CANCELLED and (b.cpu_seconds, b.memory_peak_bytes, b.wall_seconds) == (None, None, None)
    assert [r.execution_id for r in read_usage(path)] == ["ex-a", "ex-b", "ex-d"]
    assert list(read_usage(path, since=a.ended_at + 3600)) == []


def test_lines_that_are_no_records_are_passed_over(tmp_path: Path, profile: ResolvedProfile) -> None:
    """The reader is a statistic, not the verifier: a line that is not a JSON object, or that only mentions an
    end event inside another field, is no run (and never a crash)."""
    path = tmp_path / "evidence.jsonl"
    with EvidenceWriter(path) as writer:
        writer.append_sync(
            {"event": EventType.EXECUTION_STARTED, "execution_id": "ex-a", "data": {"profile": "workspace-write"}}
        )
    with open(path, "ab") as f:
        f.write(b'[{"event":"execution_started"}]\n')
        f.write(b'{"event":"decision_made","execution_id":"ex-a","reason":"\\"event\\":\\"run_failed\\""}\n')
        f.write(b"not json\n")
    assert list(read_usage(path)) == []


def test_a_run_its_controller_abandoned_is_failed_with_the_limits_it_began_with(
    tmp_path: Path, profile: ResolvedProfile
) -> None:
    """No end record after a controller died: the restart's execution_abandoned ends it, its limits from its
    begin record (which has them since this version), every measure unknown; a begin record without limits
    (an older version's) gives no row."""
    path = tmp_path / "evidence.jsonl"
    limits = run_limits(profile).to_json()
    with EvidenceWriter(path) as writer:
        for execution_id, data in (("ex-new", {"profile": "workspace-write", "limits": limits}),
                                   ("ex-old", {"profile": "workspace-write"})):  # fmt: skip
            writer.append_sync({"event": EventType.EXECUTION_STARTED, "execution_id": execution_id, "data": data})
        for execution_id in ("ex-new", "ex-old"):
            writer.append_sync(
                {"event": EventType.EXECUTION_ABANDONED, "execution_id": execution_id, "status": "abandoned"}
            )
    (run,) = read_usage(path)
    assert (run.execution_id, run.cause, run.limits) == ("ex-new", EndCause.FAILED, run_limits(profile))
    assert (run.cpu_seconds, run.memory_peak_bytes, run.wall_seconds, run.stdout_bytes) == (None, None, None, None)
    assert abandoned_run(path, "ex-new", ended_at=5.0) == dataclasses.replace(run, ended_at=5.0)
    assert abandoned_run(path, "ex-old", ended_at=5.0) is None
