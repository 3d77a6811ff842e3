"""Interactive sessions through the HTTP API and the client, on the real engine."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from orchestrator.domain.errors import SessionNotFound
from orchestrator.domain.wire import SessionAnswer
from tests.support.service import Harness, token_of

pytestmark = pytest.mark.integration


async def until(agent: object, answer: SessionAnswer, text: str) -> str:
    seen = answer.stdout
    for _ in range(50):
        if text in seen:
            return seen
        answer = await agent.write_stdin(answer.session_id, yield_time_ms=200)  # type: ignore[attr-defined]
        seen += answer.stdout
    raise AssertionError(f"{text!r} never came: {seen!r}")


async def test_a_session_echoes_its_input_and_is_followed_and_closed(harness: Harness) -> None:
    agent = harness.client("agent-a")
    opened = await agent.open_session({"cmd": "cat", "yield_time_ms": 0})
    assert opened.running and opened.stdout == ""
    sid = opened.session_id
    answer = await agent.write_stdin(sid, "hello\n", yield_time_ms=5000)
    assert await until(agent, answer, "hello\n") == "hello\n"
    # the SSE stream carries what the command prints next, then its end once the session is closed
    events: list[tuple[str, dict[str, object]]] = []

    async def follow() -> None:
        async with (
            aiohttp.ClientSession() as http,
            http.get(
                f"{harness.url}/v1/sessions/{sid}/output",
                headers={"Authorization": f"Bearer {token_of('agent-a')}", "Accept": "text/event-stream"},
            ) as response,
        ):
            assert response.status == 200
            name = ""
            async for raw in response.content:
                line = raw.decode().rstrip("\n")
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[6:])))
                    if name == "end":
                        return

    follower = asyncio.create_task(follow())
    await asyncio.sleep(0.5)
    await agent.write_stdin(sid, "world\n", yield_time_ms=0)
    for _ in range(100):
        if any(e == ("output", {"stream": "stdout", "data": "world\n"}) for e in events):
            break
        await asyncio.sleep(0.05)
    closed = await agent.close_session(sid)
    assert not closed.running and closed.closed_reason == "closed"
    await asyncio.wait_for(follower, 30)
    assert ("output", {"stream": "stdout", "data": "world\n"}) in events
    assert events[-1][0] == "end" and events[-1][1]["closed_reason"] == "closed"
    records = [r["event"] for r in (await agent.evidence(sid)).records]
    for kind in ("execution_started", "session_opened", "session_input", "session_output", "session_closed"):
        assert kind in records, records
    with pytest.raises(SessionNotFound):
        await agent.write_stdin(sid, "late\n")


async def test_an_approved_shell_takes_input_without_asking_again(harness: Harness) -> None:
    agent, approver = harness.client("agent-a"), harness.client("approver-a")
    opening = asyncio.create_task(agent.open_session({"cmd": "bash --norc", "yield_time_ms": 500}))
    for _ in range(100):
        pending = (await approver.approvals()).items
        if pending:
            break
        await asyncio.sleep(0.05)
    assert [p.request["command"] for p in pending] == ["bash --norc"]
    await approver.approve(pending[0].execution_id, "a shell for the agent")
    opened = await asyncio.wait_for(opening, 60)
    answer = await agent.write_stdin(opened.session_id, "echo $((6*7))\n", yield_time_ms=5000)
    assert "42" in await until(agent, answer, "42\n")
    assert (await approver.approvals()).items == []  # the input was not asked about
    # another tenant's token never finds it; nor does a different agent of the same tenant
    with pytest.raises(SessionNotFound):
        await harness.client("agent-b").write_stdin(opened.session_id, "id\n")
    closed = await agent.close_session(opened.session_id)
    assert closed.closed_reason == "closed"
