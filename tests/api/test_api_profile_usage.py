"""Profiles' usage through the real service (issue 25): runs through the service land in its store's usage
table; an admin reads every tenant's, an approver its own tenants', an agent nothing; the recommendation and
the what-if answer from the same runs; `sandboxctl profiles usage` against the service prints the API's model."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator.cli.main import main
from tests.support.service import Harness, token_of

pytestmark = pytest.mark.integration
USAGE = "/v1/profiles/workspace-write/usage"


async def call(harness: Harness, method: str, path: str, *, token: str, body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token_of(token)}"}
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, harness.url + path, json=body, headers=headers) as r,
    ):
        return r.status, await r.json()


async def test_usage_recommendation_and_whatif_from_the_services_runs(
    harness: Harness, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for agent in ("agent-a", "agent-a", "agent-b"):
        view = await harness.client(agent).run({"tool": "shell", "command": ["true"]})
        assert view.result is not None and view.result.ok
    status, report = await call(harness, "GET", USAGE, token="admin")
    assert status == 200 and report["runs"] == 3 and report["profile"] == "workspace-write"
    (group,) = report["groups"]
    assert group["ended"]["ok"] == 3
    wall = next(m for m in group["measures"] if m["measure"] == "wall_seconds")
    assert wall["known"] == 3 and wall["limit"] == 300  # the profile's wall timeout now

    status, report = await call(harness, "GET", USAGE + "?by=tenant", token="approver-a")
    assert status == 200 and [g["group"] for g in report["groups"]] == ["team-a"]  # never team-b's runs
    assert report["runs"] == 2
    status, body = await call(harness, "GET", USAGE, token="agent-a")
    assert status == 403 and body["error"]["code"] == "AUTH.FORBIDDEN"
    status, body = await call(harness, "GET", USAGE + "?since=soon", token="admin")
    assert status == 400 and body["error"]["details"]["fields"] == ["since"]

    status, advice = await call(harness, "GET", "/v1/profiles/workspace-write/recommendation?min_runs=2", token="admin")
    assert status == 200 and advice["runs"] == 3
    memory = next(r for r in advice["resources"] if r["key"] == "memory")
    assert memory["confidence"] == "low" and memory["recommended"] is not None and memory["change"] == "lower"

    proposal = {"set": {"memory": 64 * 2**20, "wall_timeout_s": 30}, "node": {"cpus": 2, "memory_bytes": 8 * 2**30}}
    status, replay = await call(harness, "POST", "/v1/profiles/workspace-write/whatif", token="admin", body=proposal)
    assert status == 200 and replay["runs"] == 3
    assert [(r["key"], r["would_meet"]["total"], r["within"]) for r in replay["limits"]] == [
        ("memory", 0, 3),
        ("wall_timeout_s", 0, 3),
    ]
    assert replay["node"]["current"] == 2  # 1 cpu each on 2 cores
    status, body = await call(
        harness, "POST", "/v1/profiles/workspace-write/whatif", token="admin", body={"set": {"memory": 2**20}}
    )
    assert status == 400 and body["error"]["code"] == "INPUT.INVALID"
    status, body = await call(harness, "GET", "/v1/profiles/nope/recommendation", token="admin")
    assert status == 400 and body["error"]["code"] == "PROFILE.NOT_FOUND"

    token_file = tmp_path / "token"
    token_file.write_text(token_of("admin") + "\n")

    def cli(*argv: str) -> tuple[int, str]:
        code = main(["profiles", *argv, "--url", harness.url, "--token-file", str(token_file)])
        return code, capsys.readouterr().out

    code, out = await asyncio.to_thread(cli, "usage", "workspace-write", "--json")
    assert code == 0 and json.loads(out)["runs"] == 3
    code, out = await asyncio.to_thread(cli, "whatif", "workspace-write", "--set", "memory=64m")
    assert code == 0 and "memory: 512.0Mi -> 64.0Mi: 0 would end as oom" in out

    async with aiohttp.ClientSession() as http, http.get(harness.url + "/metrics") as r:
        metrics = await r.text()
    assert 'sandbox_runs_ended_total{cause="ok",profile="workspace-write"} 3.0' in metrics
