"""What answers an ask, and in which order: an approval rule's no is final (auto-approve and grants never turn
it into a yes); nothing approves hosts it does not name; a grant's reservation is freed on every path that
does not run (a cancel while its approval is recorded, a caller that gives up before running)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.approvals.auto import AutoApprove
from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.budgets.book import GrantBook
from orchestrator.domain.errors import ApprovalDenied
from orchestrator.domain.grants import GrantRequest
from orchestrator.evidence import EvidenceWriter
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.factory import assemble
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles import ProfileRegistry
from orchestrator.state import open_grant_book

ASKED = {"tool": "shell_exec", "argv": ["python3", "-c", "print(1)"], "tenant": "ci"}  # opaque: always asked


def rules(*entries: dict[str, Any]) -> RuleApprover:
    return RuleApprover(RuleApprovalsConfig.model_validate({"rules": list(entries)}))


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[GrantBook]:
    opened = await open_grant_book(tmp_path / "state.db")
    yield opened
    await opened.aclose()


def make(tmp_path: Path, **kw: Any) -> Orchestrator:
    return assemble(
        evidence=EvidenceWriter(tmp_path / "e.jsonl"), policy=PolicySource(), profiles=ProfileRegistry(), **kw
    )


def grant(executions: int = 5) -> GrantRequest:
    return GrantRequest.model_validate(
        {
            "tenant": "ci",
            "conditions": {"argv_prefix": "python3"},
            "ttl_s": 600,
            "budgets": {"executions": executions},
            "reason": "t",
        }
    )


async def test_an_approval_rules_no_beats_auto_approve_and_grants(tmp_path: Path, book: GrantBook) -> None:
    never = rules({"name": "never-python-c", "argv_prefix": "python3", "outcome": "denied", "reason": "operator"})
    await book.create(grant(), created_by="admin")
    o = make(tmp_path, approvals=never, auto_approve=AutoApprove.model_validate({"tenants": {"ci": "all"}}),
             budget_grants=book)  # fmt: skip
    try:
        with pytest.raises(ApprovalDenied, match="never-python-c"):
            await o.authorize(ASKED)
    finally:
        await o.aclose()
    assert [g.reserved.executions for g in await book.list()] == [0]


async def test_nothing_approves_hosts_it_does_not_name(tmp_path: Path) -> None:
    with_hosts = {**ASKED, "argv": ["pytest", "-q"], "sandbox_permissions": {"network": ["exfil.example.org:443"]}}
    broad = rules({"name": "tests", "argv_glob": "pytest*", "outcome": "approved_for_session"})
    o = make(tmp_path, approvals=broad)
    try:  # the rule approves pytest, but names no host: the ask about one is not its to answer (default: denied)
        with pytest.raises(ApprovalDenied, match="rule:default"):
            await o.authorize({**with_hosts, "session_id": "s1"})
        assert (await o.authorize({**with_hosts, "sandbox_permissions": {}, "session_id": "s1"})).approved_by
    finally:
        await o.aclose()
    naming = rules(
        {"name": "tests-net", "argv_glob": "pytest*", "outcome": "approved", "network": ["*.example.org:443"]}
    )
    (tmp_path / "n").mkdir()
    o = make(tmp_path / "n", approvals=naming)
    try:
        assert (await o.authorize(with_hosts)).approved_by == "rule:tests-net"
    finally:
        await o.aclose()


async def test_a_reservation_is_freed_when_its_approval_is_never_recorded(
    tmp_path: Path, book: GrantBook, monkeypatch: pytest.MonkeyPatch
) -> None:
    await book.create(grant(executions=2), created_by="admin")
    o = make(tmp_path, budget_grants=book)
    original = o.authorizer._record_approval

    async def cancelled(*args: Any, **kwargs: Any) -> None:
        raise asyncio.CancelledError

    try:
        monkeypatch.setattr(o.authorizer, "_record_approval", cancelled)
        with pytest.raises(asyncio.CancelledError):
            await o.authorize(ASKED)
        monkeypatch.setattr(o.authorizer, "_record_approval", original)
        [view] = await book.list()
        assert view.reserved.executions == 0 and o.authorizer.reservations._held == {}
        # an authorization its caller gives up on (the service could not make its workspace): freed too
        auth = await o.authorize(ASKED)
        assert auth.reservation is not None
        await o.abandon(auth)
        [view] = await book.list()
        assert (view.reserved.executions, view.used.executions) == (0, 0)
    finally:
        await o.aclose()
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    assert [r["data"]["kind"] for r in records if r["event"] == "grant_charged"] == ["released"]
