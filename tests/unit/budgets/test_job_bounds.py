"""Grants that bound what they match (``on_exhausted: refuse``) and grants on CI context (``conditions.ci``, with
``job_key``: one job run), over a real SQLite state store; and every JSON example of docs/grants.md, as written,
a grant the book issues."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.budgets.book import GrantBook, RunCaps
from orchestrator.ci.gitlab.protocol import failure_kind
from orchestrator.domain.ci import CiContext
from orchestrator.domain.errors import GrantExhausted
from orchestrator.domain.grants import GrantRequest, Usage
from orchestrator.domain.requests import parse_request
from orchestrator.gate.matching import RequestFacts
from orchestrator.gate.sanitize import sanitize
from orchestrator.state.store import MIGRATIONS, StateStore
from tests.support.paths import DOCS

CAPS = RunCaps(wall_seconds=60.0, cpu_seconds=120.0, output_bytes=1 << 20)
JOB = {"provider": "github", "repository": "org/app", "job": "test", "run_id": "4242", "ref": "refs/heads/feature"}
KEY = CiContext.model_validate(JOB).recorded().job_key
OTHER_KEY = CiContext.model_validate({**JOB, "run_id": "4243"}).recorded().job_key


def step(ci: dict[str, Any] | None = JOB, *, command: tuple[str, ...] = ("make", "test")) -> RequestFacts:
    raw: dict[str, Any] = {"tool": "shell", "command": list(command), "tenant": "team-a", "subject": "runner"}
    if ci is not None:
        raw["ci"] = ci
    sanitized, analysis = sanitize(parse_request(raw))
    return RequestFacts(sanitized, analysis, "ci")


def grant(**fields: Any) -> GrantRequest:
    return GrantRequest.model_validate({"tenant": "team-a", "reason": "a job", "ttl_s": 3600, **fields})


class Clock:
    now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def book(tmp_path: Path) -> AsyncIterator[GrantBook]:
    store = StateStore(tmp_path / "service.db")
    try:
        yield GrantBook(store, clock=Clock())
    finally:
        await store.close()


async def test_a_job_key_covers_the_steps_of_that_job_run_only(book: GrantBook) -> None:
    view = await book.create(grant(conditions={"ci": {"job_key": KEY}}, budgets={"wall_seconds": 100}), created_by="a")
    assert await book.reserve(tenant="team-a", facts=step(), execution_id="ex-1", caps=CAPS) is not None
    other_step = step({**JOB, "step": "__run_2"})  # another step of the same job run: the same key
    assert await book.reserve(tenant="team-a", facts=other_step, execution_id="ex-2", caps=CAPS) is not None
    rerun = step({**JOB, "run_id": "4243"})
    assert await book.reserve(tenant="team-a", facts=rerun, execution_id="ex-3", caps=CAPS) is None
    assert await book.reserve(tenant="team-a", facts=step(None), execution_id="ex-4", caps=CAPS) is None
    assert (await book.get(view.id)).reserved.executions == 2  # type: ignore[union-attr]


async def test_ci_globs_mean_what_a_rules_ci_condition_means(book: GrantBook) -> None:
    await book.create(
        grant(conditions={"ci": {"repository": ["ORG/*"], "ref": ["refs/heads/feat*"]}}, budgets={"executions": 9}),
        created_by="a",
    )
    assert await book.reserve(tenant="team-a", facts=step(), execution_id="ex-1", caps=CAPS) is not None
    main = step({**JOB, "ref": "refs/heads/main"})
    assert await book.reserve(tenant="team-a", facts=main, execution_id="ex-2", caps=CAPS) is None


async def test_a_bound_charges_what_it_matches_and_answers_no_ask(book: GrantBook) -> None:
    anything = await book.create(grant(budgets={"executions": 100}), created_by="a")
    bound = await book.create(
        grant(conditions={"ci": {"job_key": KEY}}, budgets={"wall_seconds": 90}, on_exhausted="refuse"),
        created_by="a",
    )
    # an ask is answered by the grant that may answer it, never by the bound
    covered = await book.reserve(tenant="team-a", facts=step(), execution_id="ex-1", caps=CAPS)
    assert covered is not None and covered.grant_id == anything.id and not covered.bounding
    # and the bound is charged beside it, narrowed to what is left of it
    [first] = await book.bound(tenant="team-a", facts=step(), execution_id="ex-1", caps=CAPS)
    assert first.grant_id == bound.id and first.bounding and first.wall_seconds == 60
    assert await book.bound(tenant="team-a", facts=step(), execution_id="ex-1", caps=CAPS) == (first,)  # held
    [second] = await book.bound(tenant="team-a", facts=step(), execution_id="ex-2", caps=CAPS)
    assert second.wall_seconds == 30
    with pytest.raises(GrantExhausted) as refused:
        await book.bound(tenant="team-a", facts=step(), execution_id="ex-3", caps=CAPS)
    assert refused.value.details == {"grant_id": bound.id} and refused.value.code == "GRANT.EXHAUSTED"
    # another job is no business of this bound
    assert (
        await book.bound(tenant="team-a", facts=step({**JOB, "run_id": "4243"}), execution_id="ex-4", caps=CAPS) == ()
    )

    await book.settle(covered, Usage(executions=1, wall_seconds=50.0))
    await book.settle(first, Usage(executions=1, wall_seconds=60.0))
    await book.settle(second, Usage(executions=1, wall_seconds=30.0))
    spent, other = await book.get(bound.id), await book.get(anything.id)
    assert spent is not None and spent.state == "exhausted" and spent.on_exhausted == "refuse"
    assert spent.used.executions == 2 and spent.used.wall_seconds == 90
    assert other is not None and other.used.executions == 1 and other.used.wall_seconds == 50
    assert [c.execution_id for c in (await book.charges(bound.id)).items] == ["ex-1", "ex-2"]
    with pytest.raises(GrantExhausted):  # exhausted: still a bound
        await book.bound(tenant="team-a", facts=step(), execution_id="ex-5", caps=CAPS)
    await book.revoke(bound.id, by="a", reason="lifted")
    assert await book.bound(tenant="team-a", facts=step(), execution_id="ex-6", caps=CAPS) == ()  # revoked: gone


async def test_a_bound_alone_answers_no_ask(book: GrantBook) -> None:
    await book.create(
        grant(conditions={"ci": {"job_key": KEY}}, budgets={"wall_seconds": 90}, on_exhausted="refuse"),
        created_by="a",
    )
    assert await book.reserve(tenant="team-a", facts=step(), execution_id="ex-1", caps=CAPS) is None


async def test_every_bound_a_run_matches_is_charged_or_none_is(book: GrantBook) -> None:
    job = await book.create(
        grant(conditions={"ci": {"job_key": KEY}}, budgets={"wall_seconds": 90}, on_exhausted="refuse"),
        created_by="a",
    )
    daily = await book.create(
        grant(conditions={"ci": {"repository": ["org/*"]}}, budgets={"wall_seconds": 100}, on_exhausted="refuse"),
        created_by="a",
    )
    both = await book.bound(tenant="team-a", facts=step(), execution_id="ex-1", caps=CAPS)
    assert sorted(r.grant_id for r in both) == sorted([job.id, daily.id])
    # a dry check reserves nothing
    assert await book.bound(tenant="team-a", facts=step(), execution_id="ex-2", caps=CAPS, dry=True) == ()
    assert (await book.get(daily.id)).reserved.wall_seconds == 60  # type: ignore[union-attr]
    # the repository's bound has 40 s left, the job's 30 s: each narrows the run
    [a, b] = await book.bound(tenant="team-a", facts=step(), execution_id="ex-2", caps=CAPS)
    assert {a.grant_id: a.wall_seconds, b.grant_id: b.wall_seconds} == {job.id: 30, daily.id: 40}
    # the job's bound is spent: refused, and the other bound keeps what it had (nothing reserved)
    with pytest.raises(GrantExhausted) as refused:
        await book.bound(tenant="team-a", facts=step(), execution_id="ex-3", caps=CAPS)
    assert refused.value.details == {"grant_id": job.id}
    assert (await book.get(daily.id)).reserved.wall_seconds == 100  # type: ignore[union-attr]


async def test_an_asking_grant_without_room_only_stops_covering(book: GrantBook) -> None:
    await book.create(grant(conditions={"ci": {"job_key": KEY}}, budgets={"executions": 1}), created_by="a")
    taken = await book.reserve(tenant="team-a", facts=step(), execution_id="ex-1", caps=CAPS)
    assert taken is not None and not taken.bounding
    assert await book.reserve(tenant="team-a", facts=step(), execution_id="ex-2", caps=CAPS) is None


def test_a_bad_ci_condition_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match=r"conditions\.ci\.repository\.0"):
        grant(conditions={"ci": {"repository": ["org/[app"]}}, budgets={"executions": 1})
    with pytest.raises(ValueError, match=r"conditions\.ci\.job_key"):
        grant(conditions={"ci": {"job_key": "not-a-key"}}, budgets={"executions": 1})
    with pytest.raises(ValueError, match=r"conditions\.ci\.branch"):
        grant(conditions={"ci": {"branch": ["main"]}}, budgets={"executions": 1})
    with pytest.raises(ValueError, match="on_exhausted"):
        grant(budgets={"executions": 1}, on_exhausted="stop")


def test_a_gitlab_job_stopped_by_its_bound_fails_as_the_builds_own_doing() -> None:
    assert failure_kind("GRANT.EXHAUSTED") == "build" and failure_kind("SANDBOX.GRANT_LIMIT") == "build"


def test_grants_of_an_older_store_read_as_asking(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    for number, migration in enumerate(MIGRATIONS[:2]):
        for statement in migration.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {number + 1}")
    db.execute(
        "INSERT INTO budget_grants (id, tenant, conditions, reason, created_by, created_at, state, max_executions)"
        " VALUES ('grt_old', 'team-a', '{}', 'r', 'a', 1.0, 'active', 5)"
    )
    db.close()

    async def read() -> str:
        store = StateStore(path)
        try:
            view = await GrantBook(store).get("grt_old")
            assert view is not None
            return view.on_exhausted
        finally:
            await store.close()

    assert asyncio.run(read()) == "ask"


def test_reservations_and_ledgers_of_an_older_store_carry_over(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path, isolation_level=None)
    for number, migration in enumerate(MIGRATIONS[:4]):  # before a run could hold several grants' reservations
        for statement in migration.split(";"):
            if statement.strip():
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {number + 1}")
    db.execute(
        "INSERT INTO budget_grants (id, tenant, conditions, reason, created_by, created_at, state, max_executions,"
        " used_executions, res_executions) VALUES ('grt_old', 'team-a', '{}', 'r', 'a', 1.0, 'active', 5, 1, 1)"
    )
    db.execute("INSERT INTO budget_grant_reservations VALUES ('ex-2', 'grt_old', 1, 0, 0, 0, 2.0)")
    db.execute(
        "INSERT INTO budget_grant_charges (grant_id, execution_id, kind, executions, cpu_us, output_bytes, wall_us,"
        " state_after, at) VALUES ('grt_old', 'ex-1', 'settled', 1, 0, 0, 0, 'active', 1.5)"
    )
    db.close()

    async def carry_over() -> list[tuple[str, str]]:
        store = StateStore(path)
        try:
            book = GrantBook(store)
            [held] = await store.release_budget_reservations((), at=3.0)  # ex-2's, left by the older process
            assert (held.execution_id, held.kind) == ("ex-2", "released")
            view = await book.get("grt_old")
            assert view is not None and (view.used.executions, view.reserved.executions) == (1, 0)
            again = await book.reserve(tenant="team-a", facts=step(), execution_id="ex-3", caps=CAPS)
            assert again is not None
            await book.settle(again, Usage(executions=1))
            return [(c.execution_id, c.kind) for c in (await book.charges("grt_old")).items]
        finally:
            await store.close()

    assert asyncio.run(carry_over()) == [("ex-1", "settled"), ("ex-2", "released"), ("ex-3", "settled")]


GRANTS_DOC = (DOCS / "grants.md").read_text(encoding="utf-8")
EXAMPLES = re.findall(r"```json\n(.*?)```", GRANTS_DOC, re.S)


def test_the_grants_doc_has_its_examples() -> None:
    assert len(EXAMPLES) == 2


@pytest.mark.parametrize("example", EXAMPLES, ids=["model", "ci-bound"])
async def test_every_example_of_the_grants_doc_is_a_grant_the_book_issues(book: GrantBook, example: str) -> None:
    raw = json.loads(example)
    view = await book.create(GrantRequest.model_validate(raw), created_by="a")
    assert view.conditions.model_dump(exclude_none=True) == raw["conditions"]
    assert view.on_exhausted == raw.get("on_exhausted", "ask")
