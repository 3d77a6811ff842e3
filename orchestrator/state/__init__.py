"""The controller's durable state: one SQLite database (``store``) shared by the execution table, the
approval queue, session approvals that outlive a restart (``session_approvals``) and the budget grants'
ledger (``orchestrator.budgets.ledger`` says what the book asks of it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from orchestrator.budgets.book import MIN_RUN_S, GrantBook
from orchestrator.state.store import StateStore

__all__ = ["StateStore", "open_grant_book"]


async def open_grant_book(path: Path, *, min_run_s: float = MIN_RUN_S) -> GrantBook:
    """A GrantBook over a store file of its own at ``path`` (created if missing), closed with ``aclose``:
    what the in-process library uses where there is no service."""
    store = await asyncio.to_thread(StateStore, path)
    return GrantBook(store, min_run_s=min_run_s, owns_store=True)
