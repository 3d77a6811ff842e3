"""The GrantBook over a real SQLite state store: issuing, matching, reservations that narrow to what is
left and never pass a budget (however many runs ask at once), settlement, the ledger, revocation, expiry,
restarts and recovery."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from orchestrator.budgets.book import GrantBook, Reservation, RunCaps
from orchestrator.domain.errors import InputInvalid, NotFound
from orchestrator.domain.grants import GrantRequest, Usage
from orchestrator.domain.requests import parse_request
from orchestrator.gate.matching import RequestFacts
from orchestrator.gate.sanitize import sanitize
from orchestrator.state import open_grant_book
from orchestrator.state.store import StateStore

CAPS = RunCaps(wall_seconds=60.0, cpu_seconds=60.0, output_bytes=2 * 1024 * 1024)


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def book(tmp_path: Path, clock: Clock) -> AsyncIterator[GrantBook]:
    store = StateStore(tmp_path / "service.db")
    try:
        yield GrantBook(store, clock=clock)
    finally:
        await store.close()


def facts(raw: dict[str, Any], *, tenant: str = "team-a", subject: str = "ci-1", profile: str = "ci") -> RequestFacts:
    request = parse_request({"tenant": tenant, "subject": subject, **raw})
    sanitized, analysis = sanitize(request)
    return RequestFacts(sanitized, analysis, request.profile or profile)


PYTEST = facts({"tool": "shell", "command": ["pytest", "-q"]})


def grant(**fields: Any) -> GrantRequest:
    return GrantRequest.model_validate({"tenant": "team-a", "reason": "nightly tests", **fields})


async def reserve(
    book: GrantBook, execution_id: str, *, what: RequestFacts = PYTEST, caps: RunCaps = CAPS, tenant: str = "team-a"
) -> Reservation | None:
    return await book.reserve(tenant=tenant, facts=what, execution_id=execution_id, caps=caps)


# -- issuing -----------------------------------------------------------------------------------------
async def test_create_get_list_revoke(book: GrantBook, clock: Clock) -> None:
    view = await book.create(grant(ttl_s=3600, budgets={"executions": 3}), created_by="api:ops")
    assert view.id.startswith("grt_") and len(view.id) == 28
    assert (view.tenant, view.state, view.created_by, view.reason) == ("team-a", "active", "api:ops", "nightly tests")
    assert view.expires_at == datetime.fromtimestamp(clock.now + 3600, UTC)
    assert view.remaining.executions == 3 and view.remaining.cpu_seconds is None
    assert view.used.executions == 0 and view.reserved.executions == 0
    assert await book.get(view.id) == view
    assert await book.get("grt_nope") is None
    other = await book.create(grant(tenant="team-b", budgets={"wall_seconds": 10}), created_by="api:ops")
    assert [g.id for g in await book.list()] == [view.id, other.id]
    assert [g.id for g in await book.list(["team-b"])] == [other.id]
    assert [g.id for g in await book.list(None, "active")] == [view.id, other.id]

    clock.now += 5
    revoked = await book.revoke(view.id, by="api:alice", reason="done")
    assert (revoked.state, revoked.revoked_by, revoked.revoke_reason) == ("revoked", "api:alice", "done")
    again = await book.revoke(view.id, by="api:bob", reason="twice")
    assert (again.revoked_by, again.revoke_reason, again.revoked_at) == ("api:alice", "done", revoked.revoked_at)
    assert [g.id for g in await book.list(None, "revoked")] == [view.id]
    assert [g.id for g in await book.list(None, "active")] == [other.id]
    with pytest.raises(NotFound):
        await book.revoke("grt_nope", by="api:alice", reason="")
    with pytest.raises(InputInvalid) as err:
        await book.list(None, "bogus")
    assert err.value.details["fields"] == ["state"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"conditions": {"argv_glob": "pytest [z-a]"}, "ttl_s": 60}, "conditions.argv_glob"),
        ({"conditions": {"subject": ["ci-["]}, "ttl_s": 60}, "conditions.subject.0"),
        ({"conditions": {"tool": []}, "ttl_s": 60}, "conditions.tool"),
        ({"budgets": {"executions": 0}, "ttl_s": 60}, "budgets.executions"),
        ({"budgets": {"cpu_seconds": -1}, "ttl_s": 60}, "budgets.cpu_seconds"),
        ({"budgets": {"output_bytes": 0}, "ttl_s": 60}, "budgets.output_bytes"),
        ({"ttl_s": 0}, "ttl_s"),
        ({"expires_at": "2030-01-01T00:00:00", "budgets": {"executions": 1}}, "expires_at"),
        ({"reason": "", "ttl_s": 60}, "reason"),
        ({"surprise": 1, "ttl_s": 60}, "surprise"),
    ],
)
def test_the_request_model_names_the_bad_field(fields: dict[str, Any], field: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as err:
        grant(**fields)
    assert field in [".".join(map(str, e["loc"])) for e in err.value.errors()]


def test_a_grant_needs_a_bound_and_one_expiry_at_most() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"an expiry .* or at least one budget"):
        grant()
    with pytest.raises(ValidationError, match="not both"):
        grant(ttl_s=60, expires_at="2030-01-01T00:00:00Z")
    assert grant(budgets={"output_bytes": 10}).ttl_s is None  # a budget alone bounds it


@pytest.mark.parametrize(
    ("conditions", "field"),
    [
        ({"tool": ["shell", "nope"]}, "conditions.tool"),
        ({"argv_prefix": "/"}, "conditions.argv_prefix"),
        ({"argv_prefix": "mkfs[ -f"}, "conditions.argv_prefix"),
        ({"argv_prefix": "git 'push"}, "conditions.argv_prefix"),
    ],
)
async def test_conditions_a_rule_would_refuse_are_refused_naming_the_field(
    book: GrantBook, conditions: dict[str, Any], field: str
) -> None:
    with pytest.raises(InputInvalid) as err:
        await book.create(grant(conditions=conditions, ttl_s=60), created_by="api:ops")
    assert err.value.details["fields"] == [field] and err.value.message.startswith(field)
    assert await book.list() == []


async def test_an_expiry_in_the_past_is_refused(book: GrantBook, clock: Clock) -> None:
    past = datetime.fromtimestamp(clock.now - 1, UTC)
    with pytest.raises(InputInvalid) as err:
        await book.create(grant(expires_at=past), created_by="api:ops")
    assert err.value.details["fields"] == ["expires_at"]


# -- matching ----------------------------------------------------------------------------------------
async def test_matching_by_conditions(book: GrantBook) -> None:
    await book.create(
        grant(
            ttl_s=600,
            conditions={"tool": ["exec"], "argv_prefix": "pytest", "subject": ["ci-*"], "profile": ["ci"]},
        ),
        created_by="api:ops",
    )
    assert await reserve(book, "ex-1") is not None
    refused = {
        "other program": facts({"tool": "shell", "command": ["make", "test"]}),
        "other subject": facts({"tool": "shell", "command": ["pytest"]}, subject="alice"),
        "other profile": facts({"tool": "shell", "command": ["pytest"]}, profile="untrusted"),
        "other tool": facts({"tool": "file_write", "path": "a.txt", "content": "x"}),
        # every command of a compound one must match
        "compound": facts({"tool": "shell_command", "command": "pytest -q && curl http://x"}),
    }
    for number, (label, what) in enumerate(refused.items()):
        assert await reserve(book, f"ex-no-{number}", what=what) is None, label
    both = facts({"tool": "shell_command", "command": "pytest -q; pytest -x"})
    assert await reserve(book, "ex-2", what=both) is not None
    # another tenant's requests are never covered, whatever they are
    theirs = facts({"tool": "shell", "command": ["pytest"]}, tenant="team-b")
    assert await reserve(book, "ex-3", tenant="team-b", what=theirs) is None
    assert await reserve(book, "ex-4", tenant="team-a", what=theirs) is None  # facts of another tenant: closed


async def test_the_oldest_grant_that_matches_and_has_room_covers(book: GrantBook) -> None:
    first = await book.create(grant(budgets={"executions": 1}), created_by="api:ops")
    narrow = await book.create(grant(conditions={"argv_prefix": "make"}, budgets={"executions": 5}), created_by="x")
    second = await book.create(grant(budgets={"executions": 5}), created_by="api:ops")
    one = await reserve(book, "ex-1")
    two = await reserve(book, "ex-2")
    assert one is not None and one.grant_id == first.id
    assert two is not None and two.grant_id == second.id  # the first is full, the narrow one does not match
    assert (await book.get(narrow.id)).reserved.executions == 0  # type: ignore[union-attr]


# -- reservations ------------------------------------------------------------------------------------
async def test_reservations_narrow_to_what_is_left(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"wall_seconds": 100, "output_bytes": 5000}), created_by="api:ops")
    caps = RunCaps(wall_seconds=60.0, cpu_seconds=120.0, output_bytes=4000)  # 2 cpus
    one = await reserve(book, "ex-1", caps=caps)
    assert one is not None
    assert (one.executions, one.wall_seconds, one.cpu_seconds, one.output_bytes) == (1, 60.0, 120.0, 4000)
    assert one.timeout_s(2.0) == 60.0 and one.output_caps(2000, 2000) == (2000, 2000)
    two = await reserve(book, "ex-2", caps=caps)
    assert two is not None
    assert (two.wall_seconds, two.cpu_seconds, two.output_bytes) == (40.0, 80.0, 1000)  # what was left
    assert two.timeout_s(2.0) == 40.0 and two.output_caps(3000, 1000) == (750, 250)
    assert await reserve(book, "ex-3", caps=caps) is None  # nothing left: not covered
    now = await book.get(view.id)
    assert now is not None and now.reserved.wall_seconds == 100 and now.remaining.wall_seconds == 0
    assert now.remaining.output_bytes == 0 and now.state == "active"


async def test_a_cpu_budget_narrows_the_timeout_at_the_runs_cpus(book: GrantBook) -> None:
    await book.create(grant(budgets={"cpu_seconds": 30}), created_by="api:ops")
    caps = RunCaps(wall_seconds=60.0, cpu_seconds=240.0, output_bytes=100)  # 4 cpus
    held = await reserve(book, "ex-1", caps=caps)
    assert held is not None and held.cpu_seconds == 30.0 and held.wall_seconds == 7.5
    assert held.timeout_s(4.0) == 7.5


async def test_crumbs_too_small_for_a_run_do_not_cover(book: GrantBook) -> None:
    await book.create(grant(budgets={"wall_seconds": 60.5}), created_by="api:ops")
    assert await reserve(book, "ex-1") is not None  # 60 s
    assert await reserve(book, "ex-2") is None  # 0.5 s left: less than a run (MIN_RUN_S)
    short = RunCaps(wall_seconds=0.2, cpu_seconds=0.2, output_bytes=100)
    held = await reserve(book, "ex-3", caps=short)  # a run whose own most is smaller fits
    assert held is not None and held.wall_seconds == 0.2


async def test_a_second_reserve_for_the_same_execution_is_the_same_reservation(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"executions": 5}), created_by="api:ops")
    one = await reserve(book, "ex-1")
    assert one is not None and await reserve(book, "ex-1") == one
    assert (await book.get(view.id)).reserved.executions == 1  # type: ignore[union-attr]
    await book.settle(one, Usage(wall_seconds=1))
    assert await reserve(book, "ex-1") is None  # it ended under the grant: never reserved twice


async def test_fifty_at_once_against_ten_executions_exactly_ten_succeed(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"executions": 10}), created_by="api:ops")
    held = await asyncio.gather(*(reserve(book, f"ex-{i}") for i in range(50)))
    won = [r for r in held if r is not None]
    assert len(won) == 10 and len({r.execution_id for r in won}) == 10
    after = await book.get(view.id)
    assert after is not None and after.reserved.executions == 10 and after.remaining.executions == 0
    # settled at once, concurrently: exactly ten charges, the grant exhausted
    await asyncio.gather(*(book.settle(r, Usage(executions=1, wall_seconds=0.1)) for r in won))
    done = await book.get(view.id)
    assert done is not None and done.used.executions == 10 and done.state == "exhausted"
    assert len((await book.charges(view.id)).items) == 10
    assert await reserve(book, "ex-late") is None


async def test_fifty_at_once_never_pass_an_output_budget(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"output_bytes": 10_000}), created_by="api:ops")
    caps = RunCaps(wall_seconds=10, cpu_seconds=10, output_bytes=3000)
    held = [r for r in await asyncio.gather(*(reserve(book, f"ex-{i}", caps=caps) for i in range(50))) if r]
    assert sum(r.output_bytes for r in held) == 10_000
    assert sorted(r.output_bytes for r in held) == [1000, 3000, 3000, 3000]
    # runs settle, new ones reserve, concurrently: the sum of what is used and held never passes the budget
    rounds = []
    for i, r in enumerate(held):
        rounds.append(book.settle(r, Usage(output_bytes=r.output_bytes // 2)))
        rounds.extend(reserve(book, f"ex-more-{i}-{j}", caps=caps) for j in range(5))
    await asyncio.gather(*rounds)
    after = await book.get(view.id)
    assert after is not None
    assert after.used.output_bytes + after.reserved.output_bytes <= 10_000
    assert after.remaining.output_bytes == 10_000 - after.used.output_bytes - after.reserved.output_bytes


# -- settlement --------------------------------------------------------------------------------------
async def test_settle_charges_real_usage_clamped_and_writes_the_ledger(book: GrantBook, clock: Clock) -> None:
    view = await book.create(grant(budgets={"cpu_seconds": 100, "output_bytes": 10_000}), created_by="api:ops")
    caps = RunCaps(wall_seconds=10, cpu_seconds=10, output_bytes=4000)
    one = await reserve(book, "ex-1", caps=caps)
    assert one is not None
    clock.now += 3
    charge = await book.settle(one, Usage(executions=1, cpu_seconds=2.5, output_bytes=99_999, wall_seconds=3.25))
    assert (charge.grant_id, charge.execution_id, charge.kind, charge.state) == (view.id, "ex-1", "settled", "active")
    assert charge.charged == Usage(executions=1, cpu_seconds=2.5, output_bytes=4000, wall_seconds=3.25)
    assert charge.at == datetime.fromtimestamp(clock.now, UTC)
    after = await book.get(view.id)
    assert after is not None and after.used == charge.charged and after.reserved == Usage()
    assert after.remaining.cpu_seconds == 97.5 and after.remaining.output_bytes == 6000
    # settling twice (or releasing after) is the same row, never a second charge
    assert await book.settle(one, Usage(executions=1, cpu_seconds=9, output_bytes=9)) == charge
    await book.release(one)
    assert (await book.get(view.id)) == after
    assert (await book.charges(view.id)).items == [charge]


async def test_a_fully_spent_budget_exhausts_the_grant(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"output_bytes": 6000}), created_by="api:ops")
    caps = RunCaps(wall_seconds=10, cpu_seconds=10, output_bytes=4000)
    one, two = await reserve(book, "ex-1", caps=caps), await reserve(book, "ex-2", caps=caps)
    assert one is not None and two is not None and two.output_bytes == 2000
    assert (await book.settle(one, Usage(output_bytes=4000))).state == "active"
    last = await book.settle(two, Usage(output_bytes=5000))
    assert last.state == "exhausted" and last.charged.output_bytes == 2000
    assert await book.list(None, "exhausted") == [await book.get(view.id)]
    assert await reserve(book, "ex-3", caps=caps) is None


async def test_release_charges_nothing_and_frees_the_reservation(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"executions": 1}), created_by="api:ops")
    one = await reserve(book, "ex-1")
    assert one is not None and await reserve(book, "ex-2") is None
    await book.release(one)
    await book.release(one)
    rows = (await book.charges(view.id)).items
    assert [(r.kind, r.charged) for r in rows] == [("released", Usage())]
    assert await book.settle(one, Usage(executions=1)) == rows[0]  # settle after release: nothing more
    assert await reserve(book, "ex-2") is not None


async def test_the_ledger_pages(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"executions": 10}), created_by="api:ops")
    for i in range(5):
        held = await reserve(book, f"ex-{i}")
        assert held is not None
        await book.settle(held, Usage(executions=1))
    first = await book.charges(view.id, limit=2)
    assert [c.execution_id for c in first.items] == ["ex-0", "ex-1"] and first.next_cursor is not None
    rest = await book.charges(view.id, cursor=first.next_cursor, limit=10)
    assert [c.execution_id for c in rest.items] == ["ex-2", "ex-3", "ex-4"] and rest.next_cursor is None
    with pytest.raises(InputInvalid):
        await book.charges(view.id, cursor="x")


# -- revocation and expiry ---------------------------------------------------------------------------
async def test_revocation_stops_the_next_reserve_at_once(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"executions": 100}), created_by="api:ops")
    running = await reserve(book, "ex-1")
    assert running is not None
    await book.revoke(view.id, by="api:alice", reason="stop")
    assert await reserve(book, "ex-2") is None
    # the run already under it ends and is charged; the grant stays revoked
    charge = await book.settle(running, Usage(executions=1, wall_seconds=1))
    assert charge.state == "revoked" and charge.charged.executions == 1


async def test_revocation_racing_reservations(book: GrantBook) -> None:
    view = await book.create(grant(budgets={"executions": 1000}), created_by="api:ops")
    results = await asyncio.gather(
        *(reserve(book, f"ex-{i}") for i in range(20)),
        book.revoke(view.id, by="api:alice", reason="stop"),
        *(reserve(book, f"ex-after-{i}") for i in range(20)),
    )
    after = [r for r in results[21:] if r is not None]
    assert after == []  # every reserve queued after the revocation was refused
    held = [r for r in results[:20] if isinstance(r, Reservation)]
    assert (await book.get(view.id)).reserved.executions == len(held)  # type: ignore[union-attr]


async def test_an_expired_grant_never_covers_and_reads_expired(book: GrantBook, clock: Clock) -> None:
    view = await book.create(grant(ttl_s=60), created_by="api:ops")  # an expiry alone bounds it
    assert await reserve(book, "ex-1") is not None
    clock.now += 60
    assert await reserve(book, "ex-2") is None
    assert (await book.get(view.id)).state == "expired"  # type: ignore[union-attr]
    assert [g.id for g in await book.list(None, "expired")] == [view.id]
    assert await book.list(None, "active") == []
    at = datetime.fromtimestamp(clock.now + 10, UTC)
    later = await book.create(grant(expires_at=at + timedelta(0)), created_by="api:ops")
    assert later.expires_at == at


# -- durability --------------------------------------------------------------------------------------
async def test_everything_survives_closing_and_reopening_the_store(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "service.db"
    book = await open_grant_book(path)
    book = GrantBook(book.store, clock=clock, owns_store=True)
    view = await book.create(grant(budgets={"executions": 3, "wall_seconds": 100}), created_by="api:ops")
    done = await reserve(book, "ex-1")
    assert done is not None
    charge = await book.settle(done, Usage(executions=1, wall_seconds=2))
    open_one = await reserve(book, "ex-2")
    assert open_one is not None
    before = await book.get(view.id)
    await book.aclose()

    again = GrantBook(StateStore(path), clock=clock, owns_store=True)
    try:
        assert await again.get(view.id) == before
        assert (await again.charges(view.id)).items == [charge]
        assert await again.reserve(tenant="team-a", facts=PYTEST, execution_id="ex-2", caps=CAPS) == open_one
        assert (await again.settle(open_one, Usage(executions=1, wall_seconds=1))).charged.wall_seconds == 1
    finally:
        await again.aclose()


async def test_recover_releases_orphaned_reservations(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "service.db"
    book = GrantBook(StateStore(path), clock=clock, owns_store=True)
    view = await book.create(grant(budgets={"executions": 3}), created_by="api:ops")
    held = [await reserve(book, f"ex-{i}") for i in range(3)]
    assert all(held) and await reserve(book, "ex-x") is None
    await book.aclose()  # the process "dies" with three runs reserved

    again = GrantBook(StateStore(path), clock=clock, owns_store=True)
    try:
        released = await again.recover(["ex-1"])  # ex-1 still runs (say, a resumed execution)
        assert sorted(c.execution_id for c in released) == ["ex-0", "ex-2"]
        assert all(c.kind == "released" and c.charged == Usage() for c in released)
        now = await again.get(view.id)
        assert now is not None and now.reserved.executions == 1 and now.used.executions == 0
        assert await again.recover(["ex-1"]) == []
        assert await reserve(again, "ex-new") is not None
    finally:
        await again.aclose()


def test_the_migration_is_appended_and_the_tables_exist(tmp_path: Path) -> None:
    from orchestrator.state.store import MIGRATIONS

    store_path = tmp_path / "s.db"
    asyncio.run(_open_close(store_path))
    db = sqlite3.connect(store_path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) >= 2
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"executions", "grants", "budget_grants", "budget_grant_reservations", "budget_grant_charges"} <= tables


async def _open_close(path: Path) -> None:
    await StateStore(path).close()


def test_reservation_output_caps_share_in_proportion() -> None:
    r = Reservation("grt_x", "ex-1", 1, 1.0, 10, 1.0)
    assert r.output_caps(4, 6) == (4, 6)
    assert r.output_caps(100, 100) == (5, 5)
    assert r.output_caps(1000, 1) == (9, 1)
    assert r.output_caps(1, 1000) == (1, 9)
    assert sum(r.output_caps(7, 13)) == 10
    assert r.most() == Usage(executions=1, cpu_seconds=1.0, output_bytes=10, wall_seconds=1.0)


def test_run_caps_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="wall_seconds"):
        RunCaps(wall_seconds=0, cpu_seconds=1, output_bytes=1)
    with pytest.raises(ValueError, match="output_bytes"):
        RunCaps(wall_seconds=1, cpu_seconds=1, output_bytes=0)
    caps = RunCaps.of(timeout_s=30, cpus=0.5, stdout_max_bytes=100, stderr_max_bytes=50)
    assert caps == RunCaps(wall_seconds=30, cpu_seconds=15, output_bytes=150) and caps.cpus == 0.5
