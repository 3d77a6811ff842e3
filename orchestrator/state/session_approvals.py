"""Session approvals (approved_for_session) that outlive a restart: the in-memory ones, written through to the
state store."""

from __future__ import annotations

import asyncio
import logging

from orchestrator.approvals.session import Scope, SessionApprovals
from orchestrator.state.store import StateStore, StoredSessionApproval

log = logging.getLogger(__name__)


class StoredSessionApprovals(SessionApprovals):
    def __init__(self, store: StateStore, max_entries: int = 10_000) -> None:
        super().__init__(max_entries)
        self._store = store
        for grant in store.session_approvals_sync():
            super().approve_key(
                Scope(grant.tenant, grant.subject, grant.session), grant.approval_key, grant.policy_hash
            )

    def approve_key(self, scope: Scope, key: str, policy_version_hash: str) -> None:
        super().approve_key(scope, key, policy_version_hash)
        # written behind: a grant lost to a crash only means asking again (fails closed)
        grant = StoredSessionApproval(scope.tenant, scope.subject, scope.session, key, policy_version_hash)
        task = asyncio.ensure_future(self._store.add_session_approval(grant))
        task.add_done_callback(_warn_on_failure)

    def end_session(self, scope: Scope) -> None:
        super().end_session(scope)
        # written behind too, after any approval written before it (the store's one thread, in order)
        task = asyncio.ensure_future(self._store.forget_session_approvals(scope.tenant, scope.subject, scope.session))
        task.add_done_callback(_warn_on_failure)


def _warn_on_failure(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("a session approval was not stored: %s", type(task.exception()).__name__)
