"""The API tests' fixtures: the engine (skips without one; no sandbox of this run left at the end) and a
running service per test (tests/support/service.py starts it)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.pipeline.this_process import owner_label
from tests.support.engine import engine_or_skip, list_managed
from tests.support.service import ARTIFACTS, Harness, start_service, write_config

_STARTED = time.time()


@pytest.fixture(scope="session")
def engine() -> Any:
    """Skips without an engine; at the end, no sandbox this process launched may remain."""
    engine_or_skip()
    yield
    left = [s for s in list_managed() if s.owner == owner_label()]
    assert not left, f"sandboxes of this test run left on the engine: {[s.name for s in left]}"


@pytest.fixture
async def harness(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    h = await start_service(write_config(tmp_path))
    try:
        yield h
    finally:
        await h.stop()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Names the screenshots this run wrote (make demo shows them too)."""
    shots = sorted(p for p in ARTIFACTS.glob("*.png") if p.stat().st_mtime >= _STARTED) if ARTIFACTS.is_dir() else []
    if shots:
        terminalreporter.write_sep("-", "browser screenshots")
        for shot in shots:
            terminalreporter.write_line(str(shot))
