"""Shared by the integration tests: the engine must answer, and nothing this test run launched may be
left on it when the session ends (other runs may share the engine: only this run's sandboxes count)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from orchestrator.backends.base import ManagedSandbox
from orchestrator.backends.docker import DockerBackend
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.service.launch import owner_label


def run_async(coro: Any) -> Any:
    """Run ``coro`` to completion on a private loop in another thread: safe from sync fixtures, whatever
    loop pytest-asyncio has (or has not) set for the tests."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def _list_managed() -> list[ManagedSandbox]:
    backend = DockerBackend()
    try:
        return await backend.list_managed()
    finally:
        await backend.close()


def list_managed(attempts: int = 10) -> list[ManagedSandbox]:
    """The engine's sandboxes with our labels; retried while the engine is briefly unavailable (another
    run's fault tests may restart a shared engine)."""
    for attempt in range(attempts):
        try:
            return run_async(_list_managed())  # type: ignore[no-any-return]
        except SandboxUnavailable:
            if attempt == attempts - 1:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


class RunSandboxes:
    """What identifies this test run's sandboxes on a shared engine: the owner label the orchestrator
    puts on everything this process launches, and every execution id the tests started."""

    def __init__(self) -> None:
        self.owner = owner_label()
        self.backend_test_owner_prefix = f"pytest:{os.getpid()}:"  # test_docker_backend's own owners
        self.execution_ids: set[str] = set()

    def add(self, execution_id: str) -> None:
        self.execution_ids.add(execution_id)

    def ours(self, sandboxes: list[ManagedSandbox]) -> list[ManagedSandbox]:
        return [
            s
            for s in sandboxes
            if s.execution_id in self.execution_ids
            or s.owner == self.owner
            or (s.owner or "").startswith(self.backend_test_owner_prefix)
        ]


@pytest.fixture(scope="session")
def run_sandboxes() -> Iterator[RunSandboxes]:
    """Skips when no engine answers; at the end of the session, asserts that no container with our
    labels launched by this run remains on the engine."""
    try:
        list_managed(attempts=3)
    except SandboxUnavailable as exc:
        pytest.skip(f"no container engine ({exc.message}); run `make setup`")
    registry = RunSandboxes()
    yield registry
    left = registry.ours(list_managed())
    assert not left, f"sandboxes of this test run left on the engine: {[(s.name, s.state) for s in left]}"
