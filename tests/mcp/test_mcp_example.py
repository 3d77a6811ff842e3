"""docs/examples/mcp_agent.py, run as its docstring shows, to the end of its plan: over Streamable HTTP against a
running service whose approver answers the asks (one of them late, so the transcript shows the wait), and over
stdio against `sandboxctl mcp --config` whose policy approves the local tenant's asks itself. Each time the
sandbox holds a step back (SANDBOX.RESTRICTED), the agent retries it with the escalation and retry_of, that
retry is asked about and approved; a denied step is given up; the REPL session keeps its import."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.client import AsyncClient
from tests.support.evidence import record_dicts
from tests.support.mcp import SANDBOXCTL, stdio_parameters
from tests.support.paths import ROOT
from tests.support.service import start_service, token_of, write_config

pytestmark = pytest.mark.integration
EXAMPLE = ROOT / "docs" / "examples" / "mcp_agent.py"
PYTEST = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=report.xml"]
KEEP = "mkdir -p /home/sandbox/lib && cp calc.py /home/sandbox/lib/"
PLAN = (
    "plan: write the code: done; write its test: done; run the tests: done; read the report: done; keep a copy"
    " outside the workspace: done; install it system-wide: given up; start a REPL: done; import the code: done;"
    " use it: done; quit: done"
)


async def run_example(*args: str, cwd: Path) -> tuple[int, str, str]:
    """The example as a user runs it (this venv's python), bounded: its own process group, killed whole."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=cwd, env=stdio_parameters().env, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 180)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def check_transcript(out: str) -> None:
    lines = out.splitlines()
    assert lines[0] == "tools: run, exec_command, write_stdin, read_file, write_file, apply_patch"
    assert "  <- exit 0: 1 passed" in out.split("* run the tests\n")[1].split("* ")[0]
    assert "    the report lists 1 test case(s)" in lines
    block = out.split("* keep a copy outside the workspace\n")[1].split("* ")[0].splitlines()
    kept = [line for line in block if not line.startswith("    ... ")]  # an ask's progress may come in between
    assert kept[1].startswith("  <- SANDBOX.RESTRICTED: the command exited 1 after the sandbox refused a write")
    assert kept[2].startswith('    retrying with {"sandbox_permissions": {"writable_root": true}}, retry_of ex-')
    assert kept[-1] == "  <- exit 0", kept
    assert "  <- POLICY.DENIED: denylisted: 'sudo' matches 'sudo make install'" in lines
    assert "  <- running: 42" in lines
    assert lines[-1] == PLAN


def check_retry(evidence: Path, approver: str) -> None:
    """The escalated retry is its own request, linked to the run it retries, asked about and approved."""
    received = record_dicts(evidence, event="request_received")
    keeps = [r for r in received if r["data"]["sanitized"].get("command") == KEEP]
    assert len(keeps) == 2, keeps
    first, retry = keeps
    assert record_dicts(evidence, first["execution_id"])[-1]["error_code"] == "SANDBOX.RESTRICTED"
    assert retry["data"]["retry_of"] == {
        "execution_id": first["execution_id"], "known": True, "denied": [{"kind": "read_only_root", "source": "output"}]
    }  # fmt: skip
    assert retry["data"]["sanitized"]["sandbox_permissions"]["writable_root"] is True
    [asked] = record_dicts(evidence, retry["execution_id"], "decision_made")
    assert (asked["decision"], asked["reason"]) == ("ask", "escalation asked: writable_root")
    [decided] = record_dicts(evidence, retry["execution_id"], "approval_decided")
    assert (decided["decision"], decided["approver"]) == ("approved", approver)
    assert record_dicts(evidence, retry["execution_id"])[-1]["status"] == "succeeded"


@contextlib.asynccontextmanager
async def approving(approver: AsyncClient, late: list[str]) -> AsyncIterator[list[dict[str, Any]]]:
    """A person at the approval page: every ask approved, the pytest run's only once it waited 4 s."""
    approved: list[dict[str, Any]] = []

    async def loop() -> None:
        while True:
            for ask in (await approver.approvals()).items:
                if ask.request.get("argv") == late and ask.seconds_left > 26:
                    continue
                await approver.approve(ask.execution_id, "looks fine")
                approved.append(ask.request)
            await asyncio.sleep(0.1)

    task = asyncio.create_task(loop())
    try:
        yield approved
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_the_example_over_streamable_http_with_an_approver(tmp_path: Path) -> None:
    config = write_config(tmp_path, approval_timeout_s=30)
    token = tmp_path / "token"
    token.write_text(token_of("agent-a") + "\n")
    harness = await start_service(config)
    try:
        async with approving(harness.client("approver-a"), PYTEST) as approved:
            rc, out, err = await run_example("--url", harness.url, "--token-file", str(token), cwd=tmp_path)
    finally:
        await harness.stop()
    assert (rc, err) == (0, ""), out + err
    check_transcript(out)
    # the ask the approver left waiting: the example printed its progress (which approval, the time left)
    waits = [line for line in out.splitlines() if line.startswith("    ... waiting for approval ex-")]
    assert waits and all(" s left)" in line for line in waits), out
    # what a person was asked: the two file writes, the tests, the copy and its escalated retry, the REPL
    assert [a.get("tool") for a in approved].count("file_write") == 2 and len(approved) == 6, approved
    check_retry(tmp_path / "evidence.jsonl", "api:approver-a")


async def test_the_example_over_stdio_with_asks_approved_by_the_policy(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        approvals={"provider": "queue", "auto_approve": {"tenants": {"default": {"writable_root": True}}}},
    )
    rc, out, err = await run_example("--stdio", "--", SANDBOXCTL, "mcp", "--config", str(config), cwd=tmp_path)
    assert (rc, err) == (0, ""), out + err
    check_transcript(out)
    check_retry(tmp_path / "evidence.jsonl", "auto")
