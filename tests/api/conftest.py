"""The service, for real: a config with four tokens, the Docker engine, SQLite, the evidence file — started
in this process on a loopback port, driven through the project's own client."""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))

from engine_helpers import list_managed

from orchestrator.api.app import start_site
from orchestrator.api.connections import ConnectionGuard
from orchestrator.client import AsyncClient
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.pipeline.launch import owner_label
from orchestrator.service.hosting import Service

ROOT = Path(__file__).parents[2]
# screenshots of the browser tests (tests/api/test_ui_browser.py); git ignores the default place
ARTIFACTS = Path(os.environ.get("SANDBOX_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts").resolve()
_STARTED = time.time()

TOKENS = {
    "agent-a": ("agent", ["team-a"]),
    "agent-b": ("agent", ["team-b"]),
    "approver-a": ("approver", ["team-a"]),
    "approver-b": ("approver", ["team-b"]),
    "admin": ("admin", []),
}


def token_of(subject: str) -> str:
    return f"test-token-{subject}-0123456789"


def write_config(tmp_path: Path, **overrides: Any) -> Path:
    config: dict[str, Any] = {
        "safety": {
            "mode": "ask",
            "allowlist": ["echo", "true", "printf", "sleep", "cat", "ls"],
            "approval_timeout_s": overrides.pop("approval_timeout_s", 30),
        },
        "approvals": {
            "provider": "queue",
            "rules": [{"name": "auto-date", "argv_prefix": "date", "outcome": "approved"}],
        },
        "evidence": {"path": str(tmp_path / "evidence.jsonl")},
        "service": {
            "tokens": [
                {"subject": s, "role": role, "tenants": tenants, "token": token_of(s)}
                for s, (role, tenants) in TOKENS.items()
            ],
            "store": str(tmp_path / "state" / "service.db"),
            "workspaces": str(tmp_path / "workspaces"),
            **overrides.pop("service", {}),
        },
    }
    config.update(overrides)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@dataclass
class Harness:
    url: str
    service: Service
    runner: web.AppRunner
    config: Path
    clients: list[AsyncClient]
    guard: ConnectionGuard

    def client(self, subject: str) -> AsyncClient:
        client = AsyncClient(self.url, token_of(subject))
        self.clients.append(client)
        return client

    async def stop(self) -> None:
        for client in self.clients:
            await client.close()
        await self.guard.stop()
        await self.runner.cleanup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def start_service(config: Path, port: int | None = None) -> Harness:
    """As `sandboxctl serve` starts it (the same start_site), on a loopback port."""
    service = await Service.open(config)
    port = port or free_port()
    runner, guard = await start_site(service, "127.0.0.1", port)
    return Harness(f"http://127.0.0.1:{port}", service, runner, config, [], guard)


@pytest.fixture(scope="session")
def engine() -> Any:
    """Skips without an engine; at the end, no sandbox this process launched may remain."""
    try:
        list_managed(attempts=3)
    except SandboxUnavailable as exc:
        pytest.skip(f"no container engine ({exc.message}); run `make setup`")
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
