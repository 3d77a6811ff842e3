"""A bound (a grant with ``on_exhausted: refuse``) in the flow of an authorization: it charges and narrows every run
it matches — allowed by the policy, or approved by whoever answered its ask — and approves none; a spent bound
refuses what it matches, GRANT.EXHAUSTED, before anyone is asked."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.budgets.book import GrantBook
from orchestrator.domain.ci import CiContext
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.errors import ApprovalDenied, GrantExhausted, NoApprovalProvider
from orchestrator.domain.grants import GrantRequest, Usage
from orchestrator.evidence import EvidenceWriter
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.factory import assemble
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles import ProfileRegistry
from orchestrator.state import open_grant_book

JOB = {"provider": "github", "repository": "org/app", "job": "test", "run_id": "4242", "ref": "refs/heads/feature"}
KEY = CiContext.model_validate(JOB).recorded().job_key
ALLOWED = {"tool": "shell_exec", "argv": ["echo", "step"], "tenant": "ci", "ci": JOB}  # on the default allowlist
ASKED = {"tool": "shell_exec", "argv": ["make", "deploy"], "tenant": "ci", "ci": JOB}  # no rule: asked


class Person:
    """An approver who answers every ask with ``outcome``, and remembers what it was asked."""

    name = "person"

    def __init__(self, outcome: ApprovalOutcome = ApprovalOutcome.APPROVED) -> None:
        self.outcome = outcome
        self.asked: list[str] = []

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        self.asked.append(request.execution_id)
        return ApprovalResult(outcome=self.outcome, approver=self.name, reason="looked at it")


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[GrantBook]:
    opened = await open_grant_book(tmp_path / "state.db")
    yield opened
    await opened.aclose()


def make(tmp_path: Path, book: GrantBook, **kw: Any) -> Orchestrator:
    return assemble(
        evidence=EvidenceWriter(tmp_path / "e.jsonl"),
        policy=PolicySource(),
        profiles=ProfileRegistry(),
        budget_grants=book,
        **kw,
    )


async def bound(book: GrantBook, **budgets: float) -> str:
    view = await book.create(
        GrantRequest.model_validate(
            {
                "tenant": "ci",
                "conditions": {"ci": {"job_key": KEY}},
                "budgets": budgets,
                "on_exhausted": "refuse",
                "ttl_s": 600,
                "reason": "one job",
            }
        ),
        created_by="admin",
    )
    return view.id


async def test_a_bound_charges_and_narrows_the_steps_the_policy_allows(tmp_path: Path, book: GrantBook) -> None:
    grant_id = await bound(book, executions=2, wall_seconds=50)
    o = make(tmp_path, book)
    try:
        first = await o.authorize(ALLOWED)
        assert first.approved_by == "policy" and first.reservation is None
        [held] = first.bounds
        assert held.grant_id == grant_id and held.bounding and held.wall_seconds <= 50
        await book.settle(held, Usage(executions=1, wall_seconds=1.0))
        second = await o.authorize(ALLOWED)
        await book.settle(second.bounds[0], Usage(executions=1, wall_seconds=1.0))
        with pytest.raises(GrantExhausted, match=grant_id):  # spent: an allowed step is refused too
            await o.authorize(ALLOWED)
        # another job's step, or one without CI context: no business of this bound
        other = await o.authorize({**ALLOWED, "ci": {**JOB, "run_id": "4243"}})
        plain = await o.authorize({k: v for k, v in ALLOWED.items() if k != "ci"})
        assert other.bounds == () and plain.bounds == ()
    finally:
        await o.aclose()
    view = await book.get(grant_id)
    assert view is not None and view.state == "exhausted" and view.used.executions == 2
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    [refusal] = [r for r in records if r["event"] == "run_failed"]
    assert refusal["error_code"] == "GRANT.EXHAUSTED" and refusal["status"] == "refused"


async def test_an_ask_in_a_bounded_job_waits_for_a_person(tmp_path: Path, book: GrantBook) -> None:
    grant_id = await bound(book, executions=5)
    nobody = make(tmp_path, book)
    try:  # the bound has room, but answers no ask: with nobody to ask, it is refused
        with pytest.raises(NoApprovalProvider):
            await nobody.authorize(ASKED)
    finally:
        await nobody.aclose()
    assert (await book.get(grant_id)).reserved.executions == 0  # type: ignore[union-attr]

    (tmp_path / "p").mkdir()
    person = Person()
    o = make(tmp_path / "p", book, approvals=person)
    try:
        auth = await o.authorize(ASKED)
        # the person approved it; the bound is charged for it all the same
        assert auth.approved_by == "person" and len(person.asked) == 1
        assert [r.grant_id for r in auth.bounds] == [grant_id] and auth.reservation is None
        person.outcome = ApprovalOutcome.DENIED
        with pytest.raises(ApprovalDenied):
            await o.authorize(ASKED)
    finally:
        await o.aclose()
    view = await book.get(grant_id)
    assert view is not None and view.reserved.executions == 1  # the approved step only, not the denied one


async def test_a_spent_bound_refuses_an_ask_before_anyone_is_asked(tmp_path: Path, book: GrantBook) -> None:
    grant_id = await bound(book, executions=1)
    person = Person()
    o = make(tmp_path, book, approvals=person)
    try:
        auth = await o.authorize(ASKED)
        await book.settle(auth.bounds[0], Usage(executions=1))
        with pytest.raises(GrantExhausted, match=grant_id):
            await o.authorize(ASKED)
    finally:
        await o.aclose()
    assert len(person.asked) == 1  # the first ask only


async def test_a_step_a_grant_approves_is_charged_to_its_bound_too(tmp_path: Path, book: GrantBook) -> None:
    grant_id = await bound(book, executions=5)
    covering = await book.create(
        GrantRequest.model_validate(
            {
                "tenant": "ci",
                "conditions": {"argv_prefix": "make"},
                "budgets": {"executions": 3},
                "ttl_s": 600,
                "reason": "make in CI",
            }
        ),
        created_by="admin",
    )
    o = make(tmp_path, book)
    try:
        auth = await o.authorize(ASKED)
        assert auth.approved_by == f"grant:{covering.id}"
        assert auth.reservation is not None and auth.reservation.grant_id == covering.id
        assert [r.grant_id for r in auth.bounds] == [grant_id]
        await o.abandon(auth)  # never ran: both freed, each on the record
    finally:
        await o.aclose()
    for ident in (grant_id, covering.id):
        view = await book.get(ident)
        assert view is not None and (view.reserved.executions, view.used.executions) == (0, 0)
    records = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    charged = [r["data"] for r in records if r["event"] == "grant_charged"]
    assert sorted(c["grant_id"] for c in charged) == sorted([grant_id, covering.id])
    assert {c["kind"] for c in charged} == {"released"}
