"""The CI tier's fixtures: the engine (skips without one; no sandbox of this run left at the end), as the API
tier's, and a real service whose policy allows the CI steps of org/* on main (every other ask times out)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import engine
from tests.support.service import Harness, start_service, write_config

__all__ = ["CI_POLICY", "ci_service", "engine"]

CI_POLICY: dict[str, Any] = {
    "safety": {
        "mode": "ask",
        "allowlist": ["echo", "true"],
        "denylist": ["sudo"],
        "approval_timeout_s": 30,
        "rules": [
            {
                "name": "ci-main",
                "action": "allow",
                "complex": True,
                "risk_at_most": "high",
                "ci": {"repository": "org/*", "ref": "refs/heads/main"},
            },
            # a simple command (a container step's program): the same context, no complex: true needed
            {"name": "ci-main-simple", "action": "allow", "ci": {"repository": "org/*", "ref": "refs/heads/main"}},
        ],
    },
    "caps": {"allowed_images": ["sandbox-orchestrator/*"]},
}


@pytest.fixture
async def ci_service(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    h = await start_service(write_config(tmp_path, **json.loads(json.dumps(CI_POLICY))))
    try:
        yield h
    finally:
        await h.stop()
