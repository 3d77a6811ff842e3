"""Grants with budgets on the real engine: a live grant answers asks without anyone, exactly as many runs as its
budget allows however many come at once, each narrowed to what it reserved and charged what the engine says
it used; revoked, it stops covering at the next request; every charge is on the evidence."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.docker import DockerBackend
from orchestrator.budgets.book import GrantBook
from orchestrator.domain.errors import NoApprovalProvider
from orchestrator.domain.grants import GrantRequest
from orchestrator.evidence import EvidenceWriter, verify
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.factory import assemble
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles import ProfileRegistry
from orchestrator.state import open_grant_book
from tests.support.engine import answering_or_skip
from tests.support.evidence import record_dicts

pytestmark = pytest.mark.integration

# the built-in policy asks about python3 -c (the gate cannot read the code it runs): only a grant answers
ASKED = {"tool": "shell_exec", "argv": ["python3", "-c", "print('granted')"], "tenant": "ci"}


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[GrantBook]:
    opened = await open_grant_book(tmp_path / "state.db")
    yield opened
    await opened.aclose()


@pytest.fixture
async def orch(tmp_path: Path, book: GrantBook) -> AsyncIterator[Orchestrator]:
    backend = DockerBackend()
    await answering_or_skip(backend, "container engine")
    o = assemble(
        evidence=EvidenceWriter(tmp_path / "evidence.jsonl"),
        policy=PolicySource(),
        backend=backend,
        profiles=ProfileRegistry(),
        budget_grants=book,
    )
    yield o
    await o.aclose()
    assert verify(tmp_path / "evidence.jsonl").ok


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    return ws


def grant(**budgets: Any) -> GrantRequest:
    return GrantRequest.model_validate(
        {
            "tenant": "ci",
            "conditions": {"argv_prefix": "python3"},
            "ttl_s": 3600,
            "budgets": budgets,
            "reason": "test",
        }
    )


async def test_fifty_at_once_against_ten_executions_run_exactly_ten(
    orch: Orchestrator, book: GrantBook, tmp_path: Path, workspace: Path
) -> None:
    view = await book.create(grant(executions=10), created_by="admin")

    async def one() -> str:
        try:
            result = await orch.execute(ASKED, workspace=workspace)
        except NoApprovalProvider:  # not covered: asked, and nobody answers here
            return "asked"
        return "ran" if result.to_json()["stdout"] == "granted\n" else "failed"

    outcomes = await asyncio.gather(*(one() for _ in range(50)))
    assert outcomes.count("ran") == 10 and outcomes.count("asked") == 40, outcomes
    after = await book.get(view.id)
    assert after is not None and after.state == "exhausted"
    assert (after.used.executions, after.reserved.executions) == (10, 0)
    approvals = [
        r
        for r in record_dicts(tmp_path / "evidence.jsonl", event="approval_decided")
        if r["approver"].startswith("grant:")
    ]
    charges = record_dicts(tmp_path / "evidence.jsonl", event="grant_charged")
    assert len(approvals) == 10 and len(charges) == 10
    assert {c["data"]["grant_id"] for c in charges} == {view.id}
    # every charge is the engine's: CPU time measured, the output the caller was given
    assert all(c["data"]["charged"]["output_bytes"] == len("granted\n") for c in charges)
    assert all(0 < c["data"]["charged"]["cpu_seconds"] < 5 for c in charges)
    assert sum(c["data"]["charged"]["executions"] for c in charges) == 10


async def test_a_run_is_narrowed_to_its_reservation_and_charged_what_it_used(
    orch: Orchestrator, book: GrantBook, tmp_path: Path, workspace: Path
) -> None:
    view = await book.create(grant(wall_seconds=3, output_bytes=64), created_by="admin")
    sleeper = {**ASKED, "argv": ["python3", "-c", "import time; print('x' * 1000, flush=True); time.sleep(30)"]}
    result = await orch.execute(sleeper, workspace=workspace)
    out = result.to_json()
    assert out["error"]["code"] == "SANDBOX.TIMEOUT"  # the profile allows 300 s: the grant allowed 3
    assert len(out["stdout"]) <= 64 and out["truncated"]
    after = await book.get(view.id)
    assert after is not None and after.state == "exhausted" and after.remaining.wall_seconds == 0
    [charge] = record_dicts(tmp_path / "evidence.jsonl", event="grant_charged")
    assert 3 <= charge["data"]["charged"]["wall_seconds"] <= 3.0 + 0.001
    started = record_dicts(tmp_path / "evidence.jsonl", event="execution_started")[0]
    assert started["data"]["deadline_unix"] - datetime.now(UTC).timestamp() < 60  # narrowed, not 300 s
    # nothing is left: the next ask is not covered
    with pytest.raises(NoApprovalProvider):
        await orch.execute(ASKED, workspace=workspace)


async def test_revocation_and_expiry_stop_covering_at_the_next_request(
    orch: Orchestrator, book: GrantBook, tmp_path: Path, workspace: Path
) -> None:
    view = await book.create(grant(executions=100), created_by="admin")
    assert (await orch.execute(ASKED, workspace=workspace)).ok
    await book.revoke(view.id, by="admin", reason="done")
    with pytest.raises(NoApprovalProvider):
        await orch.execute(ASKED, workspace=workspace)
    expired = GrantRequest.model_validate(
        {
            "tenant": "ci",
            "conditions": {"argv_prefix": "python3"},
            "expires_at": (datetime.now(UTC) + timedelta(seconds=1)).isoformat(),
            "budgets": {"executions": 100},
            "reason": "short",
        }
    )
    await book.create(expired, created_by="admin")
    assert (await orch.execute(ASKED, workspace=workspace)).ok
    await asyncio.sleep(1.2)
    with pytest.raises(NoApprovalProvider):
        await orch.execute(ASKED, workspace=workspace)
    # another tenant's ask, or an escalation, is never covered
    with pytest.raises(NoApprovalProvider):
        await orch.execute({**ASKED, "tenant": "other"}, workspace=workspace)
