"""The service, for real, as the API tests run it: a config with tokens, the Docker engine, SQLite, the evidence
file — started in this process on a loopback port (the same ``start_site`` as ``sandboxctl serve``), driven
through the project's own client."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from orchestrator.api.app import start_site
from orchestrator.api.connections import ConnectionGuard
from orchestrator.client import AsyncClient
from orchestrator.service.hosting import Service
from tests.support.paths import ROOT

# screenshots of the browser tests (tests/api/test_ui_browser.py); git ignores the default place
ARTIFACTS = Path(os.environ.get("SANDBOX_TEST_ARTIFACTS") or ROOT / "tests" / "artifacts").resolve()

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
