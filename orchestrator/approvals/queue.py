"""A store-backed approval queue (SQLite): asks wait in a table until someone decides them.

The HTTP service and `sandboxctl approvals` decide from other processes; WAL mode lets them
read and write while waiters poll.

Every ask leaves ``pending`` exactly once, by one compare-and-set on its status inside one write
transaction: an approver's answer (only before the deadline), the waiter's timeout, or the waiter
withdrawing it (its run was cancelled). Whoever comes second learns what the store kept, and the
waiter acts on (and records) what the store kept — so a late approval racing the timeout can never
leave the store saying "approved" and the evidence saying "timed out", or the other way round.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from orchestrator.approvals.rules import RuleApprover
from orchestrator.domain.ci import CiRecord
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.wire import PendingApprovalView

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
# status: 'pending' → 'decided' (outcome set: an answer or a timeout) or 'withdrawn' (nobody waits any more)
PENDING, DECIDED, WITHDRAWN = "pending", "decided", "withdrawn"
TIMEOUT_APPROVER = "timeout"
# INSERT OR IGNORE: whoever writes the row first (the submit, or a waiter closing an ask it never got
# to submit) keeps it
_INSERT = (
    "INSERT OR IGNORE INTO approvals (id, approval_key, tenant, subject, sanitized, policy_reason, created_at,"
    " deadline) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_SELECT_PENDING = (
    "SELECT id, approval_key, tenant, subject, sanitized, policy_reason, created_at, deadline"
    " FROM approvals WHERE status = 'pending' AND deadline > ? ORDER BY created_at"
)
_CLOSE = (
    "UPDATE approvals SET status = ?, outcome = ?, approver = ?, reason = ?, decided_at = ?"
    " WHERE id = ? AND status = 'pending'"
)


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

    def view(self, execution: Mapping[str, Any] | None = None, *, now: float | None = None) -> PendingApprovalView:
        """The wire shape of this ask (the API's and ``sandboxctl approvals list --json``'s), with what the
        service's execution view adds when there is one (the rule that asked, the profile)."""
        execution = execution or {}
        risk = self.sanitized.get("risk")
        context = self.sanitized.get("context")
        ci = context.get("ci") if isinstance(context, dict) else None
        now = time.time() if now is None else now
        return PendingApprovalView(
            approval_id=self.id,
            execution_id=self.id,
            tenant=self.tenant,
            subject=self.subject,
            request=self.sanitized,
            policy_reason=self.policy_reason,
            risk_level=risk.get("risk_level") if isinstance(risk, dict) else None,
            risk_reasons=risk.get("reason") if isinstance(risk, dict) else None,
            matched_rule=execution.get("matched_rule"),
            profile=execution.get("profile"),
            ci=CiRecord.model_validate(ci) if isinstance(ci, dict) else None,
            created_at=datetime.fromtimestamp(self.created_at, UTC),
            deadline=datetime.fromtimestamp(self.deadline, UTC),
            seconds_left=max(0.0, round(self.deadline - now, 3)),
        )


@dataclass(frozen=True, slots=True)
class Resolution:
    """The answer to one attempt at closing an ask.

    ``won``: this call made the one transition out of ``pending``. ``state``: what the store holds
    now — ``decided`` (``result`` says how and by whom), ``withdrawn``, ``pending`` (only when read,
    never after a close) or ``unknown`` (no such ask)."""

    won: bool
    state: Literal["pending", "decided", "withdrawn", "unknown"]
    result: ApprovalResult | None = None


def _timeout_reason(timeout_s: float) -> str:
    return f"no answer within {timeout_s:g}s"


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

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: the write lock is taken at BEGIN, so a read and the
        compare-and-set after it see the same row."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    @staticmethod
    def _row(request: ApprovalRequest, now: float) -> tuple[object, ...]:
        s = request.sanitized
        return (
            request.execution_id,
            request.approval_key,
            s.context.tenant,
            s.context.subject,
            json.dumps(s.public(), sort_keys=True),
            request.policy_reason,
            now,
            now + request.timeout_s,
        )

    def submit(self, request: ApprovalRequest) -> None:
        """Queue an ask. A no-op when the waiter already closed it (its timeout or cancellation came
        first and wrote the closed row): the ask never reappears as pending."""
        with self._connect() as db:
            db.execute(_INSERT, self._row(request, time.time()))

    def pending(self) -> list[PendingApproval]:
        with self._connect() as db:
            rows = db.execute(_SELECT_PENDING, (time.time(),)).fetchall()
        return [PendingApproval(r[0], r[1], r[2], r[3], json.loads(r[4]), r[5], r[6], r[7]) for r in rows]

    def decide(self, approval_id: str, outcome: ApprovalOutcome, approver: str, reason: str = "") -> Resolution:
        """An approver's answer. Taken only while the ask is pending and before its deadline; an ask
        found past its deadline is closed as timed out there and then (its waiter reads that)."""
        if outcome not in _DECIDABLE:
            raise InputInvalid(f"outcome must be one of {sorted(o.value for o in _DECIDABLE)}")
        with self._transaction() as db:
            now = time.time()
            row = db.execute("SELECT created_at, deadline FROM approvals WHERE id = ?", (approval_id,)).fetchone()
            if row is None:
                return Resolution(won=False, state="unknown")
            created_at, deadline = row
            in_time = now < deadline
            closing = (
                (outcome.value, approver, reason)
                if in_time
                else (ApprovalOutcome.TIMEOUT.value, TIMEOUT_APPROVER, _timeout_reason(deadline - created_at))
            )
            changed = db.execute(_CLOSE, (DECIDED, *closing, now, approval_id)).rowcount == 1
            return self._read(db, approval_id, won=changed and in_time)

    def expire(self, request: ApprovalRequest) -> Resolution:
        """The waiter's timeout: close the ask as timed out unless an answer was stored first.
        ``result`` is what the store kept — the one outcome the waiter may act on."""
        timeout = (ApprovalOutcome.TIMEOUT.value, TIMEOUT_APPROVER, _timeout_reason(request.timeout_s))
        return self._close_for_waiter(request, DECIDED, *timeout)

    def withdraw(self, request: ApprovalRequest) -> Resolution:
        """The waiter went away (its run was cancelled): nobody may approve what nobody waits for."""
        return self._close_for_waiter(request, WITHDRAWN, None, None, "the request was cancelled before an answer")

    def _close_for_waiter(
        self, request: ApprovalRequest, status: str, outcome: str | None, approver: str | None, reason: str
    ) -> Resolution:
        with self._transaction() as db:
            now = time.time()
            # the ask may not be in the store yet (the waiter gave up while submitting): write it
            # closed, so that the late submit finds it and leaves it alone
            db.execute(_INSERT, self._row(request, now))
            changed = db.execute(_CLOSE, (status, outcome, approver, reason, now, request.execution_id)).rowcount
            return self._read(db, request.execution_id, won=changed == 1)

    @staticmethod
    def _read(db: sqlite3.Connection, approval_id: str, *, won: bool = False) -> Resolution:
        row = db.execute(
            "SELECT status, outcome, approver, reason, decided_at FROM approvals WHERE id = ?", (approval_id,)
        ).fetchone()
        if row is None:
            return Resolution(won=won, state="unknown")
        status, outcome, approver, reason, decided_at = row
        if status != DECIDED:
            return Resolution(won=won, state="withdrawn" if status == WITHDRAWN else "pending")
        result = ApprovalResult(
            outcome=ApprovalOutcome(outcome),
            approver=approver,
            reason=reason or "",
            decided_at=datetime.fromtimestamp(decided_at, UTC),
        )
        return Resolution(won=won, state="decided", result=result)

    def resolution(self, approval_id: str) -> Resolution:
        """What the store holds for the ask now."""
        with self._connect() as db:
            return self._read(db, approval_id)

    def known(self, approval_id: str) -> bool:
        """The ask is in the store (in any state)."""
        with self._connect() as db:
            return db.execute("SELECT 1 FROM approvals WHERE id = ?", (approval_id,)).fetchone() is not None

    def pending_one(self, approval_id: str) -> PendingApproval | None:
        with self._connect() as db:
            row = db.execute(
                _SELECT_PENDING.replace("ORDER BY created_at", "AND id = ?"), (time.time(), approval_id)
            ).fetchone()
        return (
            PendingApproval(row[0], row[1], row[2], row[3], json.loads(row[4]), row[5], row[6], row[7]) if row else None
        )

    def result(self, approval_id: str) -> ApprovalResult | None:
        """The stored outcome of a decided ask; None while it is pending (or withdrawn, or unknown)."""
        with self._connect() as db:
            return self._read(db, approval_id).result


class QueueApprover:
    """Puts each ask in the store and waits for a decision made elsewhere. Its timeout and its
    cancellation are settled in the store (see ``approvals.base.decide``), never only in memory."""

    def __init__(
        self, store: ApprovalStore, poll_s: float = 0.05, max_poll_s: float = 0.5, rules: RuleApprover | None = None
    ) -> None:
        self.store = store
        self._poll = poll_s
        self._max_poll = max_poll_s
        self._rules = rules
        self._wakeups: dict[str, asyncio.Event] = {}

    @property
    def name(self) -> str:
        return "queue"

    @property
    def rules(self) -> RuleApprover | None:
        """The rules tried before an ask waits in the queue."""
        return self._rules

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        # rules answer what they match at once; the rest waits in the queue for a person
        matched = self._rules.match(request) if self._rules is not None else None
        if matched is not None:
            return matched
        await asyncio.to_thread(self.store.submit, request)
        wakeup = self._wakeups.setdefault(request.execution_id, asyncio.Event())
        delay = self._poll
        try:
            while True:
                result = await asyncio.to_thread(self.store.result, request.execution_id)
                if result is not None:
                    return result
                # polled, because other processes answer too; woken at once by an answer given here
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await wakeup.wait()
                wakeup.clear()
                delay = min(delay * 1.5, self._max_poll)
        finally:
            self._wakeups.pop(request.execution_id, None)

    def wake(self, approval_id: str) -> None:
        """An answer was stored by this process: its waiter reads it now rather than at its next poll."""
        wakeup = self._wakeups.get(approval_id)
        if wakeup is not None:
            wakeup.set()

    async def settle_timeout(self, request: ApprovalRequest) -> ApprovalResult:
        """What the store kept once the timeout closed the ask: TIMEOUT, or the answer that won."""
        resolution = await asyncio.to_thread(self.store.expire, request)
        if resolution.result is None:  # only this waiter withdraws its ask: cannot happen (fails closed)
            raise RuntimeError(f"approval {request.execution_id} is {resolution.state} after its timeout")
        return resolution.result

    async def withdraw(self, request: ApprovalRequest) -> None:
        await asyncio.to_thread(self.store.withdraw, request)

    async def kept(self, request: ApprovalRequest) -> ApprovalResult | None:
        """The answer the store holds for ``request`` (an approver's that came before the withdrawal)."""
        return await asyncio.to_thread(self.store.result, request.execution_id)
