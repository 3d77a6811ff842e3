"""The service's durable state: one embedded SQLite database (WAL), shared with the approval queue.

Tables: ``executions`` (one row per accepted execution, its state and outcome, sanitized), the approval
queue's ``approvals`` (approvals.queue owns it) and ``grants`` (approved_for_session, which outlive a
restart). A request that waits for approval keeps its full form in ``executions.pending_request``
until the approval settles: it is what runs once approved, after a restart too. That column holds the
request's secrets (env values, stdin) — the file is created 0600, and the column is cleared the moment
the ask is answered.

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
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from orchestrator.approvals.queue import ApprovalStore
from orchestrator.domain.wire import ExecutionView

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
class StoredGrant:
    tenant: str
    subject: str
    session: str
    approval_key: str
    policy_hash: str


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
    async def add_grant(self, grant: StoredGrant) -> None:
        def write() -> None:
            self._db.execute(
                "INSERT OR REPLACE INTO grants VALUES (?, ?, ?, ?, ?, ?)",
                (grant.tenant, grant.subject, grant.session, grant.approval_key, grant.policy_hash, time.time()),
            )

        await self._call(write)

    def grants_sync(self) -> list[StoredGrant]:
        rows = self._db.execute(
            "SELECT tenant, subject, session, approval_key, policy_hash FROM grants ORDER BY granted_at"
        ).fetchall()
        return [StoredGrant(*r) for r in rows]

    # -- health ------------------------------------------------------------------------------------
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
