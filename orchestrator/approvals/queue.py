"""A store-backed approval queue (SQLite): asks wait in a table until someone decides them.

The HTTP service and `sandboxctl approvals` decide from other processes; WAL mode lets them
read and write while waiters poll.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.errors import InputInvalid

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    id            TEXT PRIMARY KEY,
    approval_key  TEXT NOT NULL,
    tenant        TEXT NOT NULL,
    subject       TEXT NOT NULL,
    sanitized     TEXT NOT NULL,
    policy_reason TEXT NOT NULL,
    created_at    REAL NOT NULL,
    deadline      REAL NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending',
    outcome       TEXT,
    approver      TEXT,
    reason        TEXT,
    decided_at    REAL
);
CREATE INDEX IF NOT EXISTS approvals_pending ON approvals(status, created_at);
"""

_DECIDABLE = {
    ApprovalOutcome.APPROVED,
    ApprovalOutcome.APPROVED_FOR_SESSION,
    ApprovalOutcome.DENIED,
    ApprovalOutcome.ABORT,
}


@dataclass(frozen=True, slots=True)
class PendingApproval:
    id: str
    approval_key: str
    tenant: str
    subject: str
    sanitized: dict[str, object]
    policy_reason: str
    created_at: float
    deadline: float


class ApprovalStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            yield db
        finally:
            db.close()

    def submit(self, request: ApprovalRequest) -> None:
        now = time.time()
        s = request.sanitized
        with self._connect() as db:
            db.execute(
                "INSERT INTO approvals (id, approval_key, tenant, subject, sanitized, policy_reason,"
                " created_at, deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    request.execution_id,
                    request.approval_key,
                    s.context.tenant,
                    s.context.subject,
                    json.dumps(s.public(), sort_keys=True),
                    request.policy_reason,
                    now,
                    now + request.timeout_s,
                ),
            )

    def pending(self) -> list[PendingApproval]:
        with self._connect() as db:
            rows = db.execute(
                "SELECT id, approval_key, tenant, subject, sanitized, policy_reason, created_at, deadline"
                " FROM approvals WHERE status = 'pending' AND deadline > ? ORDER BY created_at",
                (time.time(),),
            ).fetchall()
        return [PendingApproval(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6], r[7]) for r in rows]

    def decide(self, approval_id: str, outcome: ApprovalOutcome, approver: str, reason: str = "") -> bool:
        """Decide a pending ask. False when it is unknown, already decided or expired."""
        if outcome not in _DECIDABLE:
            raise InputInvalid(f"outcome must be one of {sorted(o.value for o in _DECIDABLE)}")
        with self._connect() as db:
            cur = db.execute(
                "UPDATE approvals SET status = 'decided', outcome = ?, approver = ?, reason = ?,"
                " decided_at = ? WHERE id = ? AND status = 'pending' AND deadline > ?",
                (outcome.value, approver, reason, time.time(), approval_id, time.time()),
            )
            return cur.rowcount == 1

    def result(self, approval_id: str) -> ApprovalResult | None:
        with self._connect() as db:
            row = db.execute(
                "SELECT status, outcome, approver, reason, decided_at FROM approvals WHERE id = ?",
                (approval_id,),
            ).fetchone()
        if row is None or row[0] == "pending":
            return None
        return ApprovalResult(
            outcome=ApprovalOutcome(row[1]),
            approver=row[2],
            reason=row[3] or "",
            decided_at=datetime.fromtimestamp(row[4], UTC),
        )

    def expire(self, approval_id: str) -> bool:
        """Close a pending ask as timed out; False if someone decided it first."""
        with self._connect() as db:
            cur = db.execute(
                "UPDATE approvals SET status = 'decided', outcome = 'timeout', approver = 'timeout',"
                " reason = 'no answer before the deadline', decided_at = ? WHERE id = ? AND status = 'pending'",
                (time.time(), approval_id),
            )
            return cur.rowcount == 1


class QueueApprover:
    """Puts each ask in the store and waits for a decision made elsewhere."""

    def __init__(self, store: ApprovalStore, poll_s: float = 0.05, max_poll_s: float = 0.5) -> None:
        self.store = store
        self._poll = poll_s
        self._max_poll = max_poll_s

    @property
    def name(self) -> str:
        return "queue"

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        await asyncio.to_thread(self.store.submit, request)
        delay = self._poll
        try:
            while True:
                result = await asyncio.to_thread(self.store.result, request.execution_id)
                if result is not None:
                    return result
                await asyncio.sleep(delay)
                delay = min(delay * 1.5, self._max_poll)
        except asyncio.CancelledError:
            # the caller's timeout: close the ask so nobody approves a request nobody waits for
            await asyncio.shield(asyncio.to_thread(self.store.expire, request.execution_id))
            raise
