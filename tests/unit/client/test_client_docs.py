"""Every public call of both client fronts says what it sends, returns and raises (help() is its reference)."""

from __future__ import annotations

import inspect

import pytest

from orchestrator.client import AsyncClient, Client


@pytest.mark.parametrize("front", [Client, AsyncClient])
def test_every_public_call_has_a_docstring(front: type) -> None:
    assert inspect.getdoc(front)
    missing = [name for name, member in vars(front).items() if callable(member) and not name.startswith("_")]
    missing = [name for name in missing if not inspect.getdoc(getattr(front, name))]
    assert not missing, f"{front.__name__}: no docstring: {missing}"


@pytest.mark.parametrize("name", ["submit", "approvals", "approve", "deny", "evidence"])
def test_the_calls_of_issue_21_name_what_they_send_and_raise(name: str) -> None:
    sync, aio = inspect.getdoc(getattr(Client, name)), inspect.getdoc(getattr(AsyncClient, name))
    assert sync is not None and sync == aio  # one contract, two fronts
    assert "/v1/" in sync and ("Raises" in sync or "raises" in sync)  # the route it calls, what it raises
