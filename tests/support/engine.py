"""Engine helpers shared by the integration tests (a module, not a conftest: tests import it)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from orchestrator.backends.base import ManagedSandbox, SandboxBackend
from orchestrator.backends.docker import DockerBackend
from orchestrator.domain.errors import SandboxUnavailable


def run_async(coro: Any) -> Any:
    """Run ``coro`` to completion on a private loop in another thread: safe from sync fixtures, whatever
    loop pytest-asyncio has (or has not) set for the tests."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def managed_sandboxes() -> list[ManagedSandbox]:
    """The engine's sandboxes with our labels, asked once."""
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
            return run_async(managed_sandboxes())  # type: ignore[no-any-return]
        except SandboxUnavailable:
            if attempt == attempts - 1:
                raise
            time.sleep(1)
    raise AssertionError("unreachable")


def engine_or_skip() -> None:
    """Skips the test when no container engine answers (after a few tries: a shared engine may be restarting)."""
    try:
        list_managed(attempts=3)
    except SandboxUnavailable as exc:
        pytest.skip(f"no container engine ({exc.message}); run `make setup`")


async def answering_or_skip(backend: SandboxBackend, what: str) -> None:
    """Skips the test (closing ``backend``) when ``backend`` does not answer: its engine or cluster is not up."""
    try:
        await backend.info()
    except SandboxUnavailable as err:
        await backend.close()
        pytest.skip(f"no {what} ({err.message}); run `make setup`")


# The engine is shared by every test that runs on it at once (make test's workers, or two test sessions): a
# test that restarts it (test_faults) takes it for itself. Readers-writer locks on two files: a test on the
# engine passes the gate, then holds the engine shared; the restart holds the gate (no new test starts) and
# then the engine exclusively (once the running ones ended).
_ENGINE_LOCK = "/tmp/sandbox-orchestrator-tests-engine.lock"
_ENGINE_GATE = "/tmp/sandbox-orchestrator-tests-engine.gate"


@contextlib.contextmanager
def _locked(path: str, mode: int) -> Iterator[None]:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o666)
    try:
        fcntl.flock(fd, mode)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def engine_shared() -> Iterator[None]:
    """While a test runs on the engine: nobody restarts it."""
    with _locked(_ENGINE_GATE, fcntl.LOCK_EX):
        pass
    with _locked(_ENGINE_LOCK, fcntl.LOCK_SH):
        yield


@contextlib.contextmanager
def engine_exclusive() -> Iterator[None]:
    """While the engine is restarted: no other test runs on it."""
    with _locked(_ENGINE_GATE, fcntl.LOCK_EX), _locked(_ENGINE_LOCK, fcntl.LOCK_EX):
        yield
