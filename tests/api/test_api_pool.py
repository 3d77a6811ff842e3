"""The service's pool per profile: hits and misses in /metrics, and ``sandboxctl doctor --url`` showing what the
running service's pool holds now."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator.api.metrics import read_pool
from tests.support.service import start_service, write_config

pytestmark = pytest.mark.integration
SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]


async def test_the_service_shows_its_pool_per_profile(tmp_path: Path, engine: Any) -> None:
    pool = {"enabled": True, "min_ready": 1, "max_ready": 2, "profiles": {"read-only": {"max_ready": 1}}}
    h = await start_service(write_config(tmp_path, pool=pool))
    try:
        agent = h.client("agent-a")
        held = h.service.orchestrator.pool
        assert held is not None
        await agent.run({"tool": "shell", "command": ["true"]})  # cold: its key fills from here
        await agent.run({"tool": "shell", "command": ["true"], "profile": "read-only"})
        for _ in range(200):  # each key's floor
            if (held.describe()["ready"], held.describe()["filling"]) == (2, 0):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"the keys' floors were not filled: {held.describe()}")
        await agent.run({"tool": "shell", "command": ["true"]})  # from the pool
        async with aiohttp.ClientSession() as http, http.get(h.url + "/metrics") as answer:
            text = await answer.text()
        assert 'sandbox_pool_claims_total{profile="workspace-write",result="hit"} 1.0' in text
        assert 'sandbox_pool_claims_total{profile="workspace-write",result="miss"} 1.0' in text
        assert 'sandbox_pool_claims_total{profile="read-only",result="miss"} 1.0' in text
        assert 'sandbox_pool_ready{profile="read-only"} 1.0' in text
        parts = {p.profile: p for p in read_pool(text) or []}
        assert (parts["read-only"].counts.hits, parts["read-only"].target) == (0, 1)

        # the doctor asked about this service: its pool now, per profile (no probe: the pool is what is checked)
        args = ["doctor", "--config", str(h.config), "--no-probe", "--url", h.url, "--json"]
        proc = await asyncio.create_subprocess_exec(
            *SANDBOXCTL, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=tmp_path
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert b"Traceback" not in err, err
        checks = {c["name"]: c for c in json.loads(out)["checks"]}
        assert checks["pool"]["ok"], checks["pool"]
        assert "between min_ready and max_ready 1-2 (read-only 1-1)" in checks["pool"]["detail"]
        now = checks["pool now: workspace-write"]
        assert now["ok"] and "claims: 1 hits, 1 misses (50% hits)" in now["detail"], now
        only = checks["pool now: read-only"]["detail"]
        assert only.startswith("ready 1, filling 0, target 1 (1 key(s)); claims: 0 hits, 1 misses (0% hits)"), only
    finally:
        await h.stop()
