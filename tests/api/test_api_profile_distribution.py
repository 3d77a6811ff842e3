"""The profiles page's data through the real service (issue 25, item 6): three runs of a small profile — one
fine, one killed at its memory limit, one at its wall timeout, on the real engine — then GET /v1/profiles and
GET /v1/profiles/{name}/distribution as an admin (every tenant's runs), an approver (its tenants' only) and an
agent (403)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.profile_runs import (
    TINY,
    TINY_MEMORY,
    TINY_WALL_S,
    AtLimits,
    run_to_the_limits,
    start_profiles_service,
)
from tests.support.service import Harness, token_of

pytestmark = pytest.mark.integration
DISTRIBUTION = f"/v1/profiles/{TINY}/distribution"


@pytest.fixture
async def profiles_harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: Any) -> AsyncIterator[Harness]:
    h = await start_profiles_service(tmp_path, monkeypatch)
    try:
        yield h
    finally:
        await h.stop()


async def get(harness: Harness, path: str, *, token: str) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token_of(token)}"}
    async with aiohttp.ClientSession() as http, http.get(harness.url + path, headers=headers) as r:
        return r.status, await r.json()


async def test_the_distribution_of_a_profiles_runs_and_who_sees_it(profiles_harness: Harness) -> None:
    runs: AtLimits = await run_to_the_limits(profiles_harness)
    assert runs.ok.result is not None and runs.ok.result.ok
    assert runs.oom.error is not None and runs.oom.error.code == "SANDBOX.OOM"
    assert runs.timeout.error is not None and runs.timeout.error.code == "SANDBOX.TIMEOUT"

    status, listed = await get(profiles_harness, "/v1/profiles", token="approver-a")
    assert status == 200
    tiny = next(p for p in listed["profiles"] if p["name"] == TINY)
    assert tiny["limits"]["memory"] == TINY_MEMORY and tiny["limits"]["wall_timeout_s"] == TINY_WALL_S
    assert [p["name"] for p in listed["profiles"] if p["default"]] == ["workspace-write"]

    status, answer = await get(profiles_harness, DISTRIBUTION, token="admin")
    assert status == 200 and answer["profile"] == TINY and answer["runs"] == 3
    by = {h["measure"]: h for h in answer["histograms"]}
    assert list(by) == ["memory_peak_bytes", "cores", "cpu_seconds", "wall_seconds"]
    memory, wall = by["memory_peak_bytes"], by["wall_seconds"]
    assert memory["limit"] == TINY_MEMORY and wall["limit"] == TINY_WALL_S and by["cores"]["limit"] == 1
    for h in answer["histograms"]:
        assert h["known"] + h["unknown"] == 3 and sum(h["counts"]) == h["known"]
        assert len(h["edges"]) == len(h["counts"]) + 1 <= 41 and h["edges"][0] == 0
        assert h["edges"][-1] >= max(h["limit"], h["max"] or 0)
        assert h["recommended"] is None  # 3 runs: fewer than min_runs (20)
    # the OOM-killed run reached its limit (the kernel's peak: at it, or a page past it): the last buckets
    assert memory["max"] >= TINY_MEMORY * 0.95 and memory["counts"][-1] >= 1
    assert wall["max"] >= TINY_WALL_S and wall["counts"][-1] == 1  # the timed-out run, past its deadline

    ended = answer["ended_at_limit"]
    assert ended["total"] == 2 and ended["by_cause"]["oom"] == 1 and ended["by_cause"]["wall_timeout"] == 1
    newest, older = ended["runs"]
    assert (newest["execution_id"], newest["cause"], newest["tenant"]) == (
        runs.timeout.execution_id,
        "wall_timeout",
        "team-b",
    )
    assert newest["measure"] == "wall_seconds" and newest["value"] >= TINY_WALL_S and newest["limit"] == TINY_WALL_S
    assert (older["execution_id"], older["cause"], older["measure"], older["limit"]) == (
        runs.oom.execution_id,
        "oom",
        "memory_peak_bytes",
        TINY_MEMORY,
    )

    # an approver: its own tenant's two runs only, team-b's timeout nowhere
    status, mine = await get(profiles_harness, DISTRIBUTION + "?since=1h&min_runs=1", token="approver-a")
    assert status == 200 and mine["runs"] == 2
    assert [r["execution_id"] for r in mine["ended_at_limit"]["runs"]] == [runs.oom.execution_id]
    assert mine["ended_at_limit"]["by_cause"]["wall_timeout"] == 0
    assert max(h["known"] for h in mine["histograms"]) == 2
    # min_runs=1: now each line has a value, and it is the recommendation's
    rec_status, advice = await get(
        profiles_harness, f"/v1/profiles/{TINY}/recommendation?since=1h&min_runs=1", token="approver-a"
    )
    assert rec_status == 200
    memory_advice = next(r for r in advice["resources"] if r["key"] == "memory")
    mine_memory = next(h for h in mine["histograms"] if h["measure"] == "memory_peak_bytes")
    assert mine_memory["recommended"] == memory_advice["recommended"] is not None
    assert mine_memory["recommended_rule"] == memory_advice["rule"] == "memory.vpa_oom_bump"

    status, body = await get(profiles_harness, DISTRIBUTION, token="agent-a")
    assert status == 403 and body["error"]["code"] == "AUTH.FORBIDDEN"
    status, body = await get(profiles_harness, "/v1/profiles", token="agent-b")
    assert status == 403 and body["error"]["code"] == "AUTH.FORBIDDEN"
    status, body = await get(profiles_harness, DISTRIBUTION + "?since=soon", token="admin")
    assert status == 400 and body["error"]["details"]["fields"] == ["since"]
    status, gone = await get(profiles_harness, "/v1/profiles/never-was/distribution", token="admin")
    assert status == 200 and gone["runs"] == 0 and all(h["limit"] is None for h in gone["histograms"])

    # the client's fronts say the same
    client = profiles_harness.client("admin")
    model = await client.profile_distribution(TINY)
    assert model.runs == 3 and model.ended_at_limit.total == 2
    assert TINY in {p.name for p in (await client.list_profiles()).profiles}
