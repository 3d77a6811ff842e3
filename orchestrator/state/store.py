"""The service's durable state: one embedded SQLite database (WAL), shared with the approval queue.

Tables: ``executions`` (one row per accepted execution, its state and outcome, sanitized), the approval
queue's ``approvals`` (approvals.queue owns it), ``grants`` (approved_for_session, which outlive a
restart), ``ci_jobs`` (the CI jobs of ci/jobs.py: an open one outlives a restart) and the budget grants:
``budget_grants`` (terms, used and reserved amounts), their open ``budget_grant_reservations`` (one per run
under a grant) and ledger ``budget_grant_charges`` (one row per reservation that ended); ``run_usage`` (what
each run used and how it ended: usage_table.py). Every change of a
budget grant is one transaction on the store's thread, so a reservation cannot pass a budget however many runs
ask at once.

A request that waits for approval keeps its full form in ``executions.pending_request`` until the
approval settles: it is what runs once approved, after a restart too. That column holds the request's
secrets (env values, stdin) — the file is created 0600, and the column is cleared the moment the ask
is answered.

Every call runs on one thread of its own (one connection, serialized writes): the event loop never
waits for the disk. ``synchronous=NORMAL`` in WAL mode: a commit survives the process dying; the
evidence log, not this table, is the record that is fsynced before anything runs.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.approvals.queue import ApprovalStore
from orchestrator.budgets.ledger import (
    Amounts,
    Limits,
    NewBudgetGrant,
    StoredBound,
    StoredBudgetGrant,
    StoredCharge,
    StoredReservation,
    room,
)
from orchestrator.domain.usage import EndCause, RunUsage
from orchestrator.domain.usage_figures import Figures, Plan, Sample, Scope
from orchestrator.domain.wire import ExecutionView
from orchestrator.state import usage_distribution, usage_table

T = TypeVar("T")

# Each entry moves the schema from version i to i + 1 (PRAGMA user_version). Append, never edit.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE executions (
        id              TEXT PRIMARY KEY,
        seq             INTEGER NOT NULL,
        tenant          TEXT NOT NULL,
        subject         TEXT NOT NULL,
        tool            TEXT NOT NULL,
        session_id      TEXT,
        state           TEXT NOT NULL,
        created_at      REAL NOT NULL,
        updated_at      REAL NOT NULL,
        view            TEXT NOT NULL,
        pending_request TEXT,
        workspace       TEXT
    );
    CREATE INDEX executions_by_tenant ON executions(tenant, seq);
    CREATE INDEX executions_by_state ON executions(state, seq);
    CREATE TABLE grants (
        tenant       TEXT NOT NULL,
        subject      TEXT NOT NULL,
        session      TEXT NOT NULL,
        approval_key TEXT NOT NULL,
        policy_hash  TEXT NOT NULL,
        granted_at   REAL NOT NULL,
        PRIMARY KEY (tenant, subject, session, approval_key)
    );
    """,
    # budget grants: amounts in integers (CPU and wall time in microseconds), so sums are exact; the
    # max_* columns are NULL for a dimension without a bound; state 'expired' is never stored (read from
    # expires_at)
    """
    CREATE TABLE budget_grants (
        seq               INTEGER PRIMARY KEY AUTOINCREMENT,
        id                TEXT NOT NULL UNIQUE,
        tenant            TEXT NOT NULL,
        conditions        TEXT NOT NULL,
        reason            TEXT NOT NULL,
        created_by        TEXT NOT NULL,
        created_at        REAL NOT NULL,
        expires_at        REAL,
        state             TEXT NOT NULL,
        max_executions    INTEGER,
        max_cpu_us        INTEGER,
        max_output_bytes  INTEGER,
        max_wall_us       INTEGER,
        used_executions   INTEGER NOT NULL DEFAULT 0,
        used_cpu_us       INTEGER NOT NULL DEFAULT 0,
        used_output_bytes INTEGER NOT NULL DEFAULT 0,
        used_wall_us      INTEGER NOT NULL DEFAULT 0,
        res_executions    INTEGER NOT NULL DEFAULT 0,
        res_cpu_us        INTEGER NOT NULL DEFAULT 0,
        res_output_bytes  INTEGER NOT NULL DEFAULT 0,
        res_wall_us       INTEGER NOT NULL DEFAULT 0,
        revoked_by        TEXT,
        revoked_at        REAL,
        revoke_reason     TEXT
    );
    CREATE INDEX budget_grants_by_tenant ON budget_grants(tenant, state, seq);
    CREATE TABLE budget_grant_reservations (
        execution_id TEXT PRIMARY KEY,
        grant_id     TEXT NOT NULL,
        executions   INTEGER NOT NULL,
        cpu_us       INTEGER NOT NULL,
        output_bytes INTEGER NOT NULL,
        wall_us      INTEGER NOT NULL,
        reserved_at  REAL NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE budget_grant_charges (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        grant_id     TEXT NOT NULL,
        execution_id TEXT NOT NULL UNIQUE,
        kind         TEXT NOT NULL,
        executions   INTEGER NOT NULL,
        cpu_us       INTEGER NOT NULL,
        output_bytes INTEGER NOT NULL,
        wall_us      INTEGER NOT NULL,
        state_after  TEXT NOT NULL,
        at           REAL NOT NULL
    );
    CREATE INDEX budget_grant_charges_by_grant ON budget_grant_charges(grant_id, seq);
    """,
    # what a grant does with a request it matches once it has no room: 'ask' (as before) or 'refuse' (a bound)
    """
    ALTER TABLE budget_grants ADD COLUMN on_exhausted TEXT NOT NULL DEFAULT 'ask';
    """,
    # CI jobs (ci/jobs.py): an open job outlives a restart of the controller; view and request as JSON (no
    # secret: a job's CI context, image, profile and workspace), refused: the steps refused before they ran
    """
    CREATE TABLE ci_jobs (
        job_id     TEXT PRIMARY KEY,
        tenant     TEXT NOT NULL,
        state      TEXT NOT NULL,
        view       TEXT NOT NULL,
        request    TEXT NOT NULL,
        path       TEXT NOT NULL,
        refused    TEXT NOT NULL,
        updated_at REAL NOT NULL
    );
    CREATE INDEX ci_jobs_by_state ON ci_jobs(state, updated_at);
    """,
    # a run may hold a reservation of each grant that takes part in it (the grant that answered its ask, and every
    # bound it matches): reservations and ledger rows are per (execution, grant)
    """
    CREATE TABLE budget_grant_reservations_new (
        execution_id TEXT NOT NULL,
        grant_id     TEXT NOT NULL,
        executions   INTEGER NOT NULL,
        cpu_us       INTEGER NOT NULL,
        output_bytes INTEGER NOT NULL,
        wall_us      INTEGER NOT NULL,
        reserved_at  REAL NOT NULL,
        PRIMARY KEY (execution_id, grant_id)
    ) WITHOUT ROWID;
    INSERT INTO budget_grant_reservations_new SELECT * FROM budget_grant_reservations;
    DROP TABLE budget_grant_reservations;
    ALTER TABLE budget_grant_reservations_new RENAME TO budget_grant_reservations;
    CREATE TABLE budget_grant_charges_new (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        grant_id     TEXT NOT NULL,
        execution_id TEXT NOT NULL,
        kind         TEXT NOT NULL,
        executions   INTEGER NOT NULL,
        cpu_us       INTEGER NOT NULL,
        output_bytes INTEGER NOT NULL,
        wall_us      INTEGER NOT NULL,
        state_after  TEXT NOT NULL,
        at           REAL NOT NULL,
        UNIQUE (execution_id, grant_id)
    );
    INSERT INTO budget_grant_charges_new SELECT * FROM budget_grant_charges;
    DROP TABLE budget_grant_charges;
    ALTER TABLE budget_grant_charges_new RENAME TO budget_grant_charges;
    CREATE INDEX budget_grant_charges_by_grant ON budget_grant_charges(grant_id, seq);
    """,
    usage_table.MIGRATION,  # what each run used and how it ended (profiles usage | recommend | whatif)
    usage_table.FIGURES_INDEX,  # the profiles page's figures, from the index alone
    usage_distribution.MEASURE_INDEXES,  # ... and each measure in its value's order: walked, never sorted
)


@dataclass(frozen=True, slots=True)
class _Put:
    view: ExecutionView
    view_json: str
    request_json: str | None
    workspace: str | None
    keep_request: bool


def _settle(futures: list[asyncio.Future[None]], error: BaseException | None) -> None:
    for future in futures:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)


_UPSERT = (
    "INSERT INTO executions (id, seq, tenant, subject, tool, session_id, state, created_at, updated_at,"
    " view, pending_request, workspace) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT(id) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at,"
    " view = excluded.view, pending_request = excluded.pending_request,"
    " workspace = COALESCE(excluded.workspace, workspace)"
)
# the same, leaving a stored pending request as it is
_UPSERT_KEEPING_REQUEST = _UPSERT.replace(
    "pending_request = excluded.pending_request", "pending_request = executions.pending_request"
)
_SELECT = "SELECT id, seq, state, view, pending_request, workspace FROM executions"


@dataclass(frozen=True, slots=True)
class StoredExecution:
    id: str
    seq: int
    state: str
    view: dict[str, Any]
    pending_request: dict[str, Any] | None
    workspace: str | None


@dataclass(frozen=True, slots=True)
class StoredCiJob:
    """A CI job as the store keeps it (ci.jobs reads the JSON back into its models)."""

    job_id: str
    tenant: str
    state: str  # open | closed
    view: str  # CiJobView as JSON
    request: str  # CiJobRequest as JSON
    path: str  # the workspace on this host
    refused: str  # JSON list of {execution_id, error_code}


@dataclass(frozen=True, slots=True)
class StoredSessionApproval:
    tenant: str
    subject: str
    session: str
    approval_key: str
    policy_hash: str


_SELECT_GRANT = (
    "SELECT seq, id, tenant, conditions, reason, created_by, created_at, expires_at, state,"
    " max_executions, max_cpu_us, max_output_bytes, max_wall_us,"
    " used_executions, used_cpu_us, used_output_bytes, used_wall_us,"
    " res_executions, res_cpu_us, res_output_bytes, res_wall_us, revoked_by, revoked_at, revoke_reason,"
    " on_exhausted FROM budget_grants"
)
_SELECT_CHARGE = (
    "SELECT seq, grant_id, execution_id, kind, executions, cpu_us, output_bytes, wall_us, state_after, at"
    " FROM budget_grant_charges"
)
# the reservation's guard: still active and unexpired, and every bounded budget still has room for it
_RESERVE = (
    "UPDATE budget_grants SET res_executions = res_executions + ?, res_cpu_us = res_cpu_us + ?,"
    " res_output_bytes = res_output_bytes + ?, res_wall_us = res_wall_us + ?"
    " WHERE id = ? AND state = 'active' AND (expires_at IS NULL OR expires_at > ?)"
    " AND (max_executions IS NULL OR used_executions + res_executions + ? <= max_executions)"
    " AND (max_cpu_us IS NULL OR used_cpu_us + res_cpu_us + ? <= max_cpu_us)"
    " AND (max_output_bytes IS NULL OR used_output_bytes + res_output_bytes + ? <= max_output_bytes)"
    " AND (max_wall_us IS NULL OR used_wall_us + res_wall_us + ? <= max_wall_us)"
)


# an execution's open reservations of the grants of one kind (on_exhausted: 'ask', the grant that answered its ask;
# 'refuse', its bounds) — grant id set —, or a mark that one of them already ended (grant id NULL)
_HELD = (
    "SELECT r.grant_id, r.executions, r.cpu_us, r.output_bytes, r.wall_us, r.reserved_at"
    " FROM budget_grant_reservations r JOIN budget_grants g ON g.id = r.grant_id"
    " WHERE r.execution_id = ?1 AND g.on_exhausted = ?2"
    " UNION ALL SELECT NULL, 0, 0, 0, 0, 0 FROM budget_grant_charges c JOIN budget_grants g ON g.id = c.grant_id"
    " WHERE c.execution_id = ?1 AND g.on_exhausted = ?2"
)
_FIGURES = (
    "SELECT id, conditions, state, max_executions, max_cpu_us, max_output_bytes, max_wall_us,"
    " used_executions, used_cpu_us, used_output_bytes, used_wall_us,"
    " res_executions, res_cpu_us, res_output_bytes, res_wall_us FROM budget_grants"
)
# the grants that may answer an ask: the tenant's active, unexpired ones that are not bounds, oldest first
_COVERING_GRANTS = (
    f"{_FIGURES} WHERE tenant = ? AND state = 'active' AND on_exhausted = 'ask'"
    " AND (expires_at IS NULL OR expires_at > ?) ORDER BY seq"
)
# the bounds of a tenant's runs: its unexpired grants with on_exhausted 'refuse', active or exhausted (a bound still)
_BOUNDS = (
    f"{_FIGURES} WHERE tenant = ? AND on_exhausted = 'refuse' AND state IN ('active', 'exhausted')"
    " AND (expires_at IS NULL OR expires_at > ?) ORDER BY seq"
)
# a settlement: charged added, reserved freed, and exhausted once a bounded budget is fully spent (SET reads the
# row as it was: used + charged is the new total)
_SETTLE = (
    "UPDATE budget_grants SET used_executions = used_executions + ?1, used_cpu_us = used_cpu_us + ?2,"
    " used_output_bytes = used_output_bytes + ?3, used_wall_us = used_wall_us + ?4,"
    " res_executions = res_executions - ?5, res_cpu_us = res_cpu_us - ?6,"
    " res_output_bytes = res_output_bytes - ?7, res_wall_us = res_wall_us - ?8,"
    " state = CASE WHEN state = 'active' AND ("
    "(max_executions IS NOT NULL AND used_executions + ?9 >= max_executions)"
    " OR (max_cpu_us IS NOT NULL AND used_cpu_us + ?10 >= max_cpu_us)"
    " OR (max_output_bytes IS NOT NULL AND used_output_bytes + ?11 >= max_output_bytes)"
    " OR (max_wall_us IS NOT NULL AND used_wall_us + ?12 >= max_wall_us)) THEN 'exhausted' ELSE state END"
    " WHERE id = ?13 RETURNING state, expires_at"
)


def _grant_row(row: tuple[Any, ...]) -> StoredBudgetGrant:
    seq, ident, tenant, conditions, reason, created_by, created_at, expires_at, state = row[:9]
    revoked_by, revoked_at, revoke_reason, on_exhausted = row[21:25]
    return StoredBudgetGrant(
        seq=seq,
        id=ident,
        tenant=tenant,
        conditions=conditions,
        reason=reason,
        created_by=created_by,
        created_at=created_at,
        expires_at=expires_at,
        state=state,
        limits=Limits(*row[9:13]),
        used=Amounts(*row[13:17]),
        reserved=Amounts(*row[17:21]),
        revoked_by=revoked_by,
        revoked_at=revoked_at,
        revoke_reason=revoke_reason,
        on_exhausted=on_exhausted,
    )


class _Refused(Exception):
    """A bound's guard refused a reservation its room allowed: the transaction is rolled back."""

    def __init__(self, grant_id: str) -> None:
        super().__init__(grant_id)
        self.grant_id = grant_id


def _charge_row(row: tuple[Any, ...]) -> StoredCharge:
    return StoredCharge(row[0], row[1], row[2], row[3], Amounts(*row[4:8]), row[8], row[9])


def _open(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    # 0600 from the first byte: pending requests hold secrets
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
    db = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    return db


def migrate(db: sqlite3.Connection) -> int:
    """Bring the schema to the newest version, one migration per transaction; returns the version."""
    version: int = db.execute("PRAGMA user_version").fetchone()[0]
    if version > len(MIGRATIONS):
        raise RuntimeError(f"the state database is at schema {version}, newer than this version knows")
    for number in range(version, len(MIGRATIONS)):
        db.execute("BEGIN IMMEDIATE")
        try:
            for statement in MIGRATIONS[number].split(";"):
                if statement.strip():
                    db.execute(statement)
            db.execute(f"PRAGMA user_version = {number + 1}")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
    return len(MIGRATIONS)


class StateStore:
    """Async front over one SQLite connection used by one worker thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="state-store")
        self._db = _open(path)
        migrate(self._db)
        # the approval queue keeps its table in the same file
        self.approvals = ApprovalStore(path)
        self._seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM executions").fetchone()[0]
        self._queued: list[tuple[_Put, asyncio.Future[None]]] = []
        self._queue_lock = threading.Lock()  # the loop appends, the store's thread takes

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    # -- executions --------------------------------------------------------------------------------
    async def put(
        self,
        view: ExecutionView,
        *,
        pending_request: dict[str, Any] | None = None,
        workspace: str | None = None,
        keep_request: bool = True,
    ) -> None:
        """Insert or update an execution's row. ``keep_request``: leave a stored pending request as it
        is (False clears it). Writes queued meanwhile are committed together (one transaction): under
        load, one commit serves many executions."""
        request_json = json.dumps(pending_request) if pending_request is not None else None
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._queue_lock:
            self._queued.append((_Put(view, view.model_dump_json(), request_json, workspace, keep_request), done))
            first = len(self._queued) == 1
        if first:  # no flush is waiting to take the queue: schedule one
            self._pool.submit(self._flush, asyncio.get_running_loop())
        await done

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the store's thread: everything queued so far, in order, in one transaction."""
        with self._queue_lock:
            batch, self._queued = self._queued, []
        error: BaseException | None = None
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for put, _ in batch:
                    self._write(put)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except Exception as exc:
            error = exc
        loop.call_soon_threadsafe(_settle, [done for _, done in batch], error)

    def _write(self, put: _Put) -> None:
        view, now = put.view, time.time()
        self._seq += 1
        keep = put.keep_request and put.request_json is None
        # one statement: a new row gets the next seq, an existing one keeps its own
        self._db.execute(
            _UPSERT_KEEPING_REQUEST if keep else _UPSERT,
            (
                view.execution_id,
                self._seq,
                view.tenant,
                view.subject,
                view.tool,
                view.session_id,
                view.state.value,
                now,
                now,
                put.view_json,
                put.request_json,
                put.workspace,
            ),
        )

    async def get(self, execution_id: str) -> StoredExecution | None:
        def read() -> StoredExecution | None:
            row = self._db.execute(f"{_SELECT} WHERE id = ?", (execution_id,)).fetchone()
            return _stored(row) if row else None

        return await self._call(read)

    async def page(
        self, *, tenants: Sequence[str] | None, state: str | None, before_seq: int | None, limit: int
    ) -> list[StoredExecution]:
        """Newest first. ``tenants`` None: every tenant."""

        def read() -> list[StoredExecution]:
            where: list[str] = []
            args: list[object] = []
            if tenants is not None:
                where.append(f"tenant IN ({','.join('?' * len(tenants))})")
                args.extend(tenants)
            if state is not None:
                where.append("state = ?")
                args.append(state)
            if before_seq is not None:
                where.append("seq < ?")
                args.append(before_seq)
            sql = _SELECT
            if where:
                sql += " WHERE " + " AND ".join(where)
            sql += " ORDER BY seq DESC LIMIT ?"
            return [_stored(r) for r in self._db.execute(sql, (*args, limit)).fetchall()]

        return await self._call(read)

    async def in_states(self, states: Sequence[str]) -> list[StoredExecution]:
        def read() -> list[StoredExecution]:
            marks = ",".join("?" * len(states))  # placeholders only: the values are bound
            sql = f"{_SELECT} WHERE state IN ({marks}) ORDER BY seq"
            rows = self._db.execute(sql, tuple(states)).fetchall()
            return [_stored(r) for r in rows]

        return await self._call(read)

    async def forget_ended_requests(self) -> int:
        """Clear the stored request of every execution that ended (it is kept only while an ask waits)."""

        def write() -> int:
            cursor = self._db.execute(
                "UPDATE executions SET pending_request = NULL WHERE pending_request IS NOT NULL"
                " AND state NOT IN ('received', 'pending_approval', 'running')"
            )
            return int(cursor.rowcount)

        return await self._call(write)

    # -- grants ------------------------------------------------------------------------------------
    async def add_session_approval(self, grant: StoredSessionApproval) -> None:
        def write() -> None:
            self._db.execute(
                "INSERT OR REPLACE INTO grants VALUES (?, ?, ?, ?, ?, ?)",
                (grant.tenant, grant.subject, grant.session, grant.approval_key, grant.policy_hash, time.time()),
            )

        await self._call(write)

    async def forget_session_approvals(self, tenant: str, subject: str, session: str) -> None:
        """Every approval of one session scope, gone (its session is over: a CI job closed, or a new one opened)."""

        def write() -> None:
            self._db.execute(
                "DELETE FROM grants WHERE tenant = ? AND subject = ? AND session = ?", (tenant, subject, session)
            )

        await self._call(write)

    def session_approvals_sync(self) -> list[StoredSessionApproval]:
        rows = self._db.execute(
            "SELECT tenant, subject, session, approval_key, policy_hash FROM grants ORDER BY granted_at"
        ).fetchall()
        return [StoredSessionApproval(*r) for r in rows]

    # -- budget grants -----------------------------------------------------------------------------
    def _transaction(self, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn`` in one write transaction (on the store's thread): all of it, or none of it."""

        def run() -> T:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                result = fn()
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return result

        return run

    def _read(self, fn: Callable[[], T]) -> Callable[[], T]:
        """``fn`` in one read transaction (on the store's thread): every statement sees the same rows."""

        def run() -> T:
            self._db.execute("BEGIN")
            try:
                return fn()
            finally:
                self._db.execute("COMMIT")

        return run

    def _grant(self, grant_id: str) -> StoredBudgetGrant | None:
        row = self._db.execute(f"{_SELECT_GRANT} WHERE id = ?", (grant_id,)).fetchone()
        return _grant_row(row) if row else None

    async def add_budget_grant(self, grant: NewBudgetGrant) -> StoredBudgetGrant:
        def write() -> StoredBudgetGrant:
            self._db.execute(
                "INSERT INTO budget_grants (id, tenant, conditions, reason, created_by, created_at, expires_at,"
                " state, max_executions, max_cpu_us, max_output_bytes, max_wall_us, on_exhausted)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?)",
                (
                    grant.id,
                    grant.tenant,
                    grant.conditions,
                    grant.reason,
                    grant.created_by,
                    grant.created_at,
                    grant.expires_at,
                    *grant.limits,
                    grant.on_exhausted,
                ),
            )
            stored = self._grant(grant.id)
            assert stored is not None
            return stored

        return await self._call(self._transaction(write))

    async def budget_grant(self, grant_id: str) -> StoredBudgetGrant | None:
        return await self._call(lambda: self._grant(grant_id))

    async def budget_grants(
        self, *, tenants: Sequence[str] | None, state: str | None, now: float
    ) -> list[StoredBudgetGrant]:
        """Oldest first. ``tenants`` None: every tenant; ``state``: as read at ``now`` (expired included)."""

        def read() -> list[StoredBudgetGrant]:
            where: list[str] = []
            args: list[object] = []
            if tenants is not None:
                where.append(f"tenant IN ({','.join('?' * len(tenants))})")
                args.extend(tenants)
            if state == "active":
                where.append("state = 'active' AND (expires_at IS NULL OR expires_at > ?)")
                args.append(now)
            elif state == "expired":
                where.append("state = 'active' AND expires_at IS NOT NULL AND expires_at <= ?")
                args.append(now)
            elif state is not None:
                where.append("state = ?")
                args.append(state)
            sql = _SELECT_GRANT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq"
            return [_grant_row(r) for r in self._db.execute(sql, args).fetchall()]

        return await self._call(read)

    async def revoke_budget_grant(self, grant_id: str, *, by: str, reason: str, at: float) -> StoredBudgetGrant | None:
        """Revoked from now on; a second revocation keeps the first (who, when, why). None: no such grant."""

        def write() -> StoredBudgetGrant | None:
            self._db.execute(
                "UPDATE budget_grants SET state = 'revoked', revoked_by = ?, revoked_at = ?, revoke_reason = ?"
                " WHERE id = ? AND revoked_at IS NULL",
                (by, at, reason, grant_id),
            )
            return self._grant(grant_id)

        return await self._call(self._transaction(write))

    async def reserve_budget_grant(
        self,
        *,
        tenant: str,
        execution_id: str,
        now: float,
        covers: Callable[[str, str], bool],
        fit: Callable[[Limits], Amounts | None],
    ) -> StoredReservation | None:
        """Reserve for ``execution_id`` on the oldest live grant of ``tenant`` (not a bound: on_exhausted 'ask') that
        ``covers`` it (given the grant's id and conditions) and has room: ``fit`` says what to take given what is
        left (None: it does not fit). Both are called on the store's thread, inside the transaction. The
        execution's open reservation of such a grant again if it has one; None when no grant covers it, or when it
        already ended under one (a reservation is never taken twice)."""

        def write() -> StoredReservation | None:
            held = self._db.execute(_HELD, (execution_id, "ask")).fetchone()
            if held is not None:  # reserved already (the same again), or ended (never again)
                return (
                    None if held[0] is None else StoredReservation(execution_id, held[0], Amounts(*held[1:5]), held[5])
                )
            for grant_id, conditions, _state, *figures in self._db.execute(_COVERING_GRANTS, (tenant, now)).fetchall():
                take = fit(room(figures[0:4], figures[4:8], figures[8:12]))
                if take is None or not covers(grant_id, conditions):
                    continue
                # the guard holds whatever fit said: no budget is ever passed
                if self._reserve(execution_id, grant_id, take, now):
                    return StoredReservation(execution_id, grant_id, take, now)
            return None

        return await self._call(self._transaction(write))

    async def reserve_budget_bounds(
        self,
        *,
        tenant: str,
        execution_id: str,
        now: float,
        covers: Callable[[str, str], bool],
        fit: Callable[[Limits], Amounts | None],
        dry: bool = False,
    ) -> list[StoredReservation] | StoredBound:
        """Reserve for ``execution_id`` on every bound of ``tenant`` (on_exhausted 'refuse', unexpired) that
        ``covers`` it, each within what it has left (``fit``), all or none: StoredBound (nothing reserved) when one
        of them has no room for it (or is exhausted). ``dry``: only that answer, nothing reserved (an empty list
        when every bound has room). The execution's open reservations of bounds again if it has any; an empty list
        when no bound covers it, or when it already ended under one (a reservation is never taken twice)."""

        def write() -> list[StoredReservation] | StoredBound:
            held = self._db.execute(_HELD, (execution_id, "refuse")).fetchall()
            if held:
                if any(row[0] is None for row in held):
                    return []
                return [StoredReservation(execution_id, r[0], Amounts(*r[1:5]), r[5], bounding=True) for r in held]
            takes: list[tuple[str, Amounts]] = []
            for grant_id, conditions, state, *figures in self._db.execute(_BOUNDS, (tenant, now)).fetchall():
                if not covers(grant_id, conditions):
                    continue
                take = fit(room(figures[0:4], figures[4:8], figures[8:12])) if state == "active" else None
                if take is None:  # it matches and has no room: refused, whatever the other bounds have
                    return StoredBound(grant_id)
                takes.append((grant_id, take))
            if dry:
                return []
            for grant_id, take in takes:
                if not self._reserve(execution_id, grant_id, take, now):  # pragma: no cover - fit read this row
                    raise _Refused(grant_id)
            return [StoredReservation(execution_id, g, take, now, bounding=True) for g, take in takes]

        try:
            return await self._call(self._transaction(write))
        except _Refused as refused:  # (rolled back: nothing reserved)
            return StoredBound(refused.grant_id)

    def _reserve(self, execution_id: str, grant_id: str, take: Amounts, now: float) -> bool:
        """Reserve ``take`` of ``grant_id`` for ``execution_id``, guarded in SQL: False when it has no room."""
        if self._db.execute(_RESERVE, (*take, grant_id, now, *take)).rowcount != 1:
            return False
        self._db.execute(
            "INSERT INTO budget_grant_reservations VALUES (?, ?, ?, ?, ?, ?, ?)", (execution_id, grant_id, *take, now)
        )
        return True

    async def settle_budget_grant(
        self, execution_id: str, grant_id: str, used: Amounts | None, *, at: float
    ) -> StoredCharge | None:
        """End ``execution_id``'s reservation of ``grant_id``: ``used`` charged (each dimension within what was
        reserved; None: released, nothing charged), the reservation freed, a ledger row written, and the grant
        exhausted when a bounded budget is fully spent. Once only: a reservation that already ended answers with
        its ledger row again; None when it never held one."""
        return await self._call(self._transaction(lambda: self._settle(execution_id, grant_id, used, at)))

    def _settle(self, execution_id: str, grant_id: str, used: Amounts | None, at: float) -> StoredCharge | None:
        held = self._db.execute(
            "DELETE FROM budget_grant_reservations WHERE execution_id = ? AND grant_id = ?"
            " RETURNING executions, cpu_us, output_bytes, wall_us",
            (execution_id, grant_id),
        ).fetchone()
        if held is None:
            row = self._db.execute(
                f"{_SELECT_CHARGE} WHERE execution_id = ? AND grant_id = ?", (execution_id, grant_id)
            ).fetchone()
            return _charge_row(row) if row else None
        reserved = Amounts(*held)
        charged = Amounts(*(min(u, r) for u, r in zip(used, reserved, strict=True))) if used else Amounts()
        state, expires_at = self._db.execute(_SETTLE, (*charged, *reserved, *charged, grant_id)).fetchone()
        after = "expired" if state == "active" and expires_at is not None and expires_at <= at else state
        kind = "settled" if used is not None else "released"
        cursor = self._db.execute(
            "INSERT INTO budget_grant_charges (grant_id, execution_id, kind, executions, cpu_us, output_bytes,"
            " wall_us, state_after, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (grant_id, execution_id, kind, *charged, after, at),
        )
        return StoredCharge(int(cursor.lastrowid or 0), grant_id, execution_id, kind, charged, after, at)

    async def release_budget_reservations(self, live: Collection[str], *, at: float) -> list[StoredCharge]:
        """Release (charging nothing) every open reservation whose execution is not in ``live``: what a
        process that died left behind."""

        def write() -> list[StoredCharge]:
            held = self._db.execute("SELECT execution_id, grant_id FROM budget_grant_reservations").fetchall()
            out = []
            for execution_id, grant_id in held:
                if execution_id not in live:
                    charge = self._settle(execution_id, grant_id, None, at)
                    if charge is not None:
                        out.append(charge)
            return out

        return await self._call(self._transaction(write))

    async def budget_grant_charges(self, grant_id: str, *, after_seq: int, limit: int) -> list[StoredCharge]:
        """The grant's ledger, oldest first, after row ``after_seq``."""

        def read() -> list[StoredCharge]:
            rows = self._db.execute(
                f"{_SELECT_CHARGE} WHERE grant_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (grant_id, after_seq, limit),
            ).fetchall()
            return [_charge_row(r) for r in rows]

        return await self._call(read)

    # -- CI jobs -----------------------------------------------------------------------------------
    async def put_ci_job(self, job: StoredCiJob) -> None:
        """Insert or replace a job's row (opened, a step taken, closed)."""

        def write() -> None:
            self._db.execute(
                "INSERT OR REPLACE INTO ci_jobs VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (job.job_id, job.tenant, job.state, job.view, job.request, job.path, job.refused, time.time()),
            )

        await self._call(write)

    async def open_ci_jobs(self, *, forget_closed_before: float) -> list[StoredCiJob]:
        """The jobs still open, oldest first; closed jobs last changed before ``forget_closed_before`` are
        deleted (their records are the evidence's)."""

        def read() -> list[StoredCiJob]:
            self._db.execute("DELETE FROM ci_jobs WHERE state = 'closed' AND updated_at < ?", (forget_closed_before,))
            rows = self._db.execute(
                "SELECT job_id, tenant, state, view, request, path, refused FROM ci_jobs WHERE state = 'open'"
                " ORDER BY updated_at"
            ).fetchall()
            return [StoredCiJob(*row) for row in rows]

        return await self._call(self._transaction(read))

    # -- health ------------------------------------------------------------------------------------
    # -- run usage (state/usage_table.py) -------------------------------------------------------------
    async def put_usage(self, usage: RunUsage) -> None:
        row = usage_table.row_of(usage)
        await self._call(lambda: self._db.execute(usage_table.INSERT, row))

    async def usage(
        self, *, profile: str | None = None, since: float | None = None, until: float | None = None
    ) -> list[RunUsage]:
        """What the runs of ``profile`` (every profile: None) that ended in [since, until] used, oldest first."""
        return await self._call(lambda: usage_table.select(self._db, profile=profile, since=since, until=until))

    async def usage_figures(
        self,
        scope: Scope,
        *,
        measures: Sequence[str],
        samples: Mapping[str, Sample],
        causes: Sequence[EndCause],
        plan: Plan,
        newest: int,
    ) -> Figures:
        """The profiles page's figures of ``scope``'s runs, computed in SQL (``usage_distribution.figures``), in
        one read: ``plan`` runs on the store's thread between its two passes."""

        def read() -> Figures:
            return usage_distribution.figures(
                self._db, scope, measures=measures, samples=samples, causes=causes, plan=plan, newest=newest
            )

        return await self._call(self._read(read))

    async def usage_profiles(self, *, since: float | None = None) -> list[str]:
        return await self._call(lambda: usage_table.profiles(self._db, since=since))

    async def forget_usage(self, *, before: float) -> int:
        return await self._call(lambda: usage_table.forget_before(self._db, before))

    async def writable(self) -> None:
        """Raises when the database cannot take a write (for /readyz)."""

        def probe() -> None:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("ROLLBACK")

        await self._call(probe)

    async def close(self) -> None:
        await self._call(self._db.close)
        self._pool.shutdown(wait=True)


def _stored(row: tuple[Any, ...]) -> StoredExecution:
    ident, seq, state, view, pending, workspace = row
    return StoredExecution(ident, seq, state, json.loads(view), json.loads(pending) if pending else None, workspace)
