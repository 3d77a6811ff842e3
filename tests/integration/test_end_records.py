"""A hostile workload cannot suppress its own end record, nor leak a secret cut by the output cap.

On the real engine, runc and runsc (gVisor): the workload fills the workspace with many files whose
names are long and not UTF-8 (escaped, each byte takes four characters: the side-effect listing runs to
megabytes), writes output with control characters, invalid UTF-8 and a multi-megabyte line, puts the
value of its own secret env variable right across the stdout cap and its base64 across the stderr cap,
and then ends each way an execution can end: its own exit, the deadline, the OOM killer, a
cancellation. Every time the evidence chain verifies, every execution that began has exactly one end
record, that record holds the outcome (exit code, sizes, side-effect counts) within the record limit,
and neither the secret nor any part of it is in the output or the evidence.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.docker import DockerBackend
from orchestrator.domain.errors import OrchestratorError
from orchestrator.evidence import END_EVENTS, MAX_RECORD_BYTES, EvidenceRecord, iter_records, verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import ExecutionResult, Orchestrator
from orchestrator.profiles import ProfileRegistry

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("run_sandboxes")]

PROFILES = ["workspace-write", "untrusted"]
# what the gate cannot see (python3 code) is asked even in mode allow; a rule approves every ask
POLICY = "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"
SECRET = "s3cr3t-Straddle-0123456789abcdefXYZ"
SECRET_ENV = "FORCE_COLOR"  # allowlisted by every profile: the request may set it
FILES_PER_DIR = 500
DIRS = 3
HOSTILE_PREFIX = b"\x00\x1b[2J\x07\xff\xfe\xc3(\r" * 600  # control characters, invalid UTF-8
INSIDE = 7  # bytes of the secret (and of its base64) before the cap

WORKLOAD = r"""
import base64, os, sys, time
ending, stdout_cap, stderr_cap = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
secret = os.environ["FORCE_COLOR"].encode()
for d in range(DIRS):
    directory = bytes([0xFF]) * 200 + b"%d" % d
    os.mkdir(directory)
    for i in range(FILES_PER_DIR):
        name = b"%05d" % i + bytes([0x80 + (i + j) % 0x7E for j in range(250)])
        fd = os.open(directory + b"/" + name, os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, b"\x1b[31m\xff")
        os.close(fd)
open(b"ctl\n\r\x1b[2J\x07\xfe", "wb").close()
out, err = sys.stdout.buffer, sys.stderr.buffer
prefix = PREFIX
out.write(prefix + b"." * (stdout_cap - INSIDE - len(prefix)) + secret)
out.write(b"A" * (3 << 20) + b"\xff\xfe\n" + secret + b"\n")
encoded = base64.b64encode(secret[: len(secret) // 3 * 3])
err.write(b"." * (stderr_cap - INSIDE) + encoded + b"\x00" * 100000)
out.flush(); err.flush()
open("ready", "w").close()
if ending == "exit":
    sys.exit(3)
if ending == "oom":
    b = []
    while True:
        b.append(bytearray(8 << 20))
time.sleep(999)
"""


def workload_command(ending: str, stdout_cap: int, stderr_cap: int) -> str:
    script = (
        WORKLOAD.replace("DIRS", str(DIRS))
        .replace("FILES_PER_DIR", str(FILES_PER_DIR))
        .replace("PREFIX", repr(HOSTILE_PREFIX))
        .replace("INSIDE", str(INSIDE))
    )
    return f"python3 - {ending} {stdout_cap} {stderr_cap} <<'WORKLOAD'\n{script}\nWORKLOAD\n"


class Harness:
    def __init__(self, tmp_path: Path, sandboxes: Any) -> None:
        self.sandboxes = sandboxes
        self.workspace = tmp_path / "ws"
        self.workspace.mkdir()
        os.chown(self.workspace, 1000, 1000)
        config = tmp_path / "config.yaml"
        config.write_text(POLICY)
        self.evidence_path = tmp_path / "evidence.jsonl"
        self.orch: Orchestrator = build_orchestrator(
            config,
            workspace=self.workspace,
            evidence_path=self.evidence_path,
            backend=DockerBackend(),
            profiles=ProfileRegistry(),
        )

    async def execute(self, ending: str, profile: str, **request: Any) -> ExecutionResult:
        resolved = ProfileRegistry().resolve(profile)
        raw = {
            "tool": "shell_command",
            "command": workload_command(ending, resolved.stdout_max_bytes, resolved.stderr_max_bytes),
            "profile": profile,
            "env": {SECRET_ENV: SECRET},
            **request,
        }
        try:
            result = await self.orch.execute(raw, workspace=self.workspace)
        except OrchestratorError as err:
            self.sandboxes.add(str(err.details.get("execution_id")))
            raise
        self.sandboxes.add(str(result.authorization.execution_id))
        return result

    async def records(self) -> list[EvidenceRecord]:
        await self.orch.evidence.flush()
        return list(iter_records(self.evidence_path))


@pytest.fixture
async def harness(tmp_path: Path, run_sandboxes: Any) -> AsyncIterator[Harness]:
    h = Harness(tmp_path, run_sandboxes)
    try:
        yield h
    finally:
        await h.orch.aclose()


def assert_one_end_each(h: Harness, records: list[EvidenceRecord]) -> EvidenceRecord:
    """The chain verifies and is complete; the one execution began once and ended once, in a record
    within the size limit, and nothing of the secret is anywhere in the evidence."""
    report = verify(h.evidence_path)
    assert report.ok, f"{report.location()}: {report.problem}"
    assert report.head_checked and report.complete and report.unended == ()
    began = [r for r in records if r.event == "execution_started"]
    ends = [r for r in records if r.event in END_EVENTS]
    assert len(began) == 1 and [e.execution_id for e in ends] == [began[0].execution_id]
    lines = h.evidence_path.read_bytes().splitlines(keepends=True)
    assert max(len(line) for line in lines) <= MAX_RECORD_BYTES
    raw = h.evidence_path.read_bytes()
    for fragment in (SECRET[:INSIDE], SECRET[INSIDE:], base64.b64encode(SECRET.encode()[:33]).decode()[:INSIDE]):
        assert fragment.encode() not in raw
    return ends[0]


def assert_side_effects(end: EvidenceRecord) -> None:
    """Bounded (the full listing is megabytes): every change counted and digested, what fits listed."""
    assert end.data is not None
    effects = end.data["side_effects"]
    assert effects["created_count"] == DIRS * (FILES_PER_DIR + 1) + 2  # files, their dirs, ctl file, ready
    assert len(effects["digest"]) == 64 and effects["created"]
    assert effects["listing_complete"] is False and len(effects["created"]) < effects["created_count"]
    assert "evidence_degraded" not in end.data  # bounded in advance


def expected_stdout(cap: int) -> bytes:
    """Everything before the secret: the redaction marker does not fit in the INSIDE bytes left."""
    return HOSTILE_PREFIX + b"." * (cap - INSIDE - len(HOSTILE_PREFIX))


@pytest.mark.parametrize("profile", PROFILES)
async def test_exit_with_hostile_names_and_output(harness: Harness, profile: str) -> None:
    resolved = ProfileRegistry().resolve(profile)
    result = await harness.execute("exit", profile)
    outcome = result.outcome
    assert (outcome.exit_code, outcome.timed_out, outcome.oom_killed) == (3, False, False)
    assert result.error is not None and result.error.code == "SANDBOX.OUTPUT_LIMIT"
    assert outcome.stdout == expected_stdout(resolved.stdout_max_bytes)
    assert outcome.stderr == b"." * (resolved.stderr_max_bytes - INSIDE)
    end = assert_one_end_each(harness, await harness.records())
    assert (end.event, end.status, end.error_code) == ("execution_finished", "failed", "SANDBOX.OUTPUT_LIMIT")
    assert end.data is not None and end.data["exit_code"] == 3
    total = len(HOSTILE_PREFIX) + (resolved.stdout_max_bytes - INSIDE - len(HOSTILE_PREFIX)) + len(SECRET)
    total += (3 << 20) + 3 + len(SECRET) + 1
    assert end.data["stdout"] == {
        "bytes": total,
        "kept_bytes": len(outcome.stdout),
        "sha256": hashlib.sha256(outcome.stdout).hexdigest(),  # of what was kept, never the raw stream
        "truncated": True,
    }
    assert end.data["stderr"]["sha256"] == hashlib.sha256(outcome.stderr).hexdigest()
    assert_side_effects(end)


@pytest.mark.parametrize("profile", PROFILES)
async def test_timeout_with_hostile_names(harness: Harness, profile: str) -> None:
    result = await harness.execute("sleep", profile, timeout_ms=15_000)
    assert result.outcome.timed_out and result.error is not None and result.error.code == "SANDBOX.TIMEOUT"
    end = assert_one_end_each(harness, await harness.records())
    assert (end.event, end.status, end.error_code) == ("execution_finished", "timeout", "SANDBOX.TIMEOUT")
    assert_side_effects(end)


@pytest.mark.parametrize("profile", PROFILES)
async def test_oom_with_hostile_names(harness: Harness, profile: str) -> None:
    result = await harness.execute("oom", profile)
    assert result.outcome.oom_killed and result.error is not None and result.error.code == "SANDBOX.OOM"
    end = assert_one_end_each(harness, await harness.records())
    assert (end.event, end.status, end.error_code) == ("execution_finished", "oom", "SANDBOX.OOM")
    assert_side_effects(end)


@pytest.mark.parametrize("profile", PROFILES)
async def test_cancel_with_hostile_names(harness: Harness, profile: str) -> None:
    task = asyncio.create_task(harness.execute("sleep", profile))
    deadline = time.monotonic() + 60
    while not (harness.workspace / "ready").exists() and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.05)
    assert (harness.workspace / "ready").exists()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    records = await harness.records()
    end = assert_one_end_each(harness, records)
    assert (end.event, end.status, end.error_code) == ("run_failed", "cancelled", "EXECUTION.CANCELLED")
    harness.sandboxes.add(str(end.execution_id))
    assert_side_effects(end)
