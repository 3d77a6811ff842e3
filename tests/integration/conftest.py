"""Shared by the integration tests: the engine must answer, and nothing this test run launched may be
left on it when the session ends (other runs may share the engine: only this run's sandboxes count)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from orchestrator.backends.base import ManagedSandbox
from orchestrator.pipeline.this_process import owner_label
from tests.support.engine import engine_or_skip, list_managed

if TYPE_CHECKING:
    from tests.support.controller import Controllers


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
    engine_or_skip()
    registry = RunSandboxes()
    yield registry
    left = registry.ours(list_managed())
    assert not left, f"sandboxes of this test run left on the engine: {[(s.name, s.state) for s in left]}"


@pytest.fixture(scope="session")
def controller_image() -> str:
    """The controller image of this checkout (sandbox-orchestrator/controller:<version>), built once a
    session by the script `make image` runs: nothing to do when the image already matches the checkout.
    Skips when no engine answers."""
    engine_or_skip()
    from tests.support.controller import build_image  # testcontainers is imported only by the tests that use it

    return build_image()


@pytest.fixture
def controllers(controller_image: str) -> Iterator[Controllers]:
    """Starts controller containers as deployed (``Controllers.start``: read-only, non-root, optionally
    the engine's socket and a port on 127.0.0.1); every one is removed when the test ends."""
    from tests.support.controller import Controllers

    started = Controllers(controller_image)
    try:
        yield started
    finally:
        started.remove_all()
