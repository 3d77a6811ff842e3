"""Session approvals that outlive a restart (``StoredSessionApprovals``, over a real SQLite state store): a session
that ends (a CI job opened or closed on its workspace) forgets its approvals in the store too, so a restarted
controller does not bring them back; the other sessions keep theirs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.approvals.session import Scope
from orchestrator.state.session_approvals import StoredSessionApprovals
from orchestrator.state.store import StateStore

RUNNER = Scope("team-a", "runner", "runner-1")
OTHER = Scope("team-a", "runner", "runner-2")


async def _written(store: StateStore) -> None:
    """Until the writes behind are in the store (one thread, in order: a read after them sees them)."""
    for _ in range(3):
        await asyncio.sleep(0)
    await store.forget_session_approvals("nobody", "nobody", "nothing")  # queued after them


async def test_an_ended_session_is_forgotten_in_the_store_too(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "service.db")
    try:
        approvals = StoredSessionApprovals(store)
        approvals.approve_key(RUNNER, "key-deploy", "policy-1")
        approvals.approve_key(OTHER, "key-deploy", "policy-1")
        await _written(store)
        assert StoredSessionApprovals(store).has_key(RUNNER, "key-deploy", "policy-1")  # as a restart reads them

        approvals.end_session(RUNNER)
        assert not approvals.has_key(RUNNER, "key-deploy", "policy-1")
        await _written(store)
        restarted = StoredSessionApprovals(store)
        assert not restarted.has_key(RUNNER, "key-deploy", "policy-1")
        assert restarted.has_key(OTHER, "key-deploy", "policy-1")
    finally:
        await store.close()
