"""Executions through the HTTP API, end to end on the real engine: the same gate, approvals, backend
and evidence as the CLI."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator.client import core
from orchestrator.domain.errors import ApprovalNotPending, ExecutionNotRunning, NotFound, PolicyDenied
from orchestrator.domain.wire import ExecutionState, ExecutionView, OutputChunk
from orchestrator.evidence import verify
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration


async def test_an_allowed_command_runs_and_its_evidence_verifies(harness: Harness) -> None:
    agent = harness.client("agent-a")
    view = await agent.run({"tool": "shell", "command": ["echo", "hello"]})
    assert view.state is ExecutionState.SUCCEEDED and view.decision == "allow"
    assert view.result is not None and view.result.exit_code == 0 and view.result.stdout == "hello\n"
    assert (view.tenant, view.subject) == ("team-a", "agent-a")
    events = [r["event"] for r in (await agent.evidence(view.execution_id)).records]
    assert events[0] == "request_received" and events[-1] == "execution_finished"
    assert "container_started" in events
    await harness.service.orchestrator.evidence.flush()
    report = verify(harness.service.orchestrator.evidence.path)
    assert report.ok and report.complete


async def test_a_denial_answers_at_once_with_its_code_and_is_listed(harness: Harness) -> None:
    agent = harness.client("agent-a")
    with pytest.raises(PolicyDenied) as denied:
        await agent.submit({"tool": "shell_command", "command": "sudo id"})
    assert denied.value.details["http_status"] == 403
    ident = denied.value.details["execution_id"]
    view = await agent.get(ident)
    assert view.state is ExecutionState.REFUSED and view.error is not None and view.error.code == "POLICY.DENIED"
    page = await agent.list(state="refused")
    assert [v.execution_id for v in page.items] == [ident]


async def test_an_ask_waits_for_an_approver_in_the_page_and_then_runs(harness: Harness) -> None:
    agent, approver = harness.client("agent-a"), harness.client("approver-a")
    view = await agent.submit({"tool": "shell_command", "command": "uname -s"})
    assert view.state is ExecutionState.PENDING_APPROVAL and view.approval is not None
    pending = (await approver.approvals()).items
    assert [p.execution_id for p in pending] == [view.execution_id]
    assert pending[0].request["command"] == "uname -s" and pending[0].seconds_left > 0
    answer = await approver.approve(view.execution_id, "looks fine")
    assert (answer.outcome, answer.approver) == ("approved", "api:approver-a")
    done = await agent.get(view.execution_id, wait=30)
    assert done.state is ExecutionState.SUCCEEDED and done.result is not None and done.result.stdout == "Linux\n"
    assert done.approval is not None and done.approval.approver == "api:approver-a"
    decided = [r for r in (await agent.evidence(view.execution_id)).records if r["event"] == "approval_decided"]
    assert decided[0]["approver"] == "api:approver-a" and decided[0]["reason"] == "looks fine"


async def test_a_denied_ask_ends_refused_and_a_second_answer_gets_409(harness: Harness) -> None:
    agent, approver = harness.client("agent-a"), harness.client("approver-a")
    view = await agent.submit({"tool": "shell_command", "command": "uname -r"})
    await approver.deny(view.execution_id, "not today")
    done = await agent.get(view.execution_id, wait=30)
    assert done.state is ExecutionState.REFUSED and done.error is not None and done.error.code == "APPROVAL.DENIED"
    with pytest.raises(ApprovalNotPending) as late:
        await approver.approve(view.execution_id)
    assert late.value.details["http_status"] == 409 and "denied by api:approver-a" in late.value.message
    with pytest.raises(ApprovalNotPending):
        await approver.deny(view.execution_id)


async def test_a_rule_answers_an_ask_without_anyone(harness: Harness) -> None:
    view = await harness.client("agent-a").run({"tool": "shell", "command": ["date", "+%Y"]})
    assert view.state is ExecutionState.SUCCEEDED
    assert view.approval is not None and view.approval.approver == "rule:auto-date"


async def test_tenants_cannot_see_cancel_or_approve_each_others(harness: Harness) -> None:
    a, b, approver_b = harness.client("agent-a"), harness.client("agent-b"), harness.client("approver-b")
    view = await a.submit({"tool": "shell_command", "command": "uname -m"})
    for call in (b.get(view.execution_id), b.cancel(view.execution_id), b.evidence(view.execution_id)):
        with pytest.raises(NotFound):
            await call
    with pytest.raises(NotFound):
        await approver_b.approve(view.execution_id)
    assert (await approver_b.approvals()).items == []
    assert (await b.list()).items == []
    assert (await b.list(tenant="team-a")).items == []
    await harness.client("approver-a").deny(view.execution_id)


async def test_cancel_kills_the_sandbox_and_records_who_asked(harness: Harness) -> None:
    agent = harness.client("agent-a")
    view = await agent.submit({"tool": "shell", "command": ["sleep", "30"]})
    for _ in range(100):
        if (await agent.get(view.execution_id)).state is ExecutionState.RUNNING:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    cancelled = await agent.cancel(view.execution_id)
    assert cancelled.state is ExecutionState.CANCELLED and cancelled.cancelled_by == "api:agent-a"
    records = (await agent.evidence(view.execution_id)).records
    asked = [r for r in records if r["event"] == "cancel_requested"]
    assert asked and "api:agent-a" in asked[0]["reason"]
    assert records[-1]["event"] == "run_failed" and records[-1]["status"] == "cancelled"
    with pytest.raises(ExecutionNotRunning):
        await agent.cancel(view.execution_id)


async def test_output_streams_as_events_then_the_result(harness: Harness) -> None:
    agent = harness.client("agent-a")
    view = await agent.run({"tool": "shell", "command": ["printf", "one\\ntwo\\n"]})
    items = [item async for item in agent.stream(view.execution_id)]
    assert isinstance(items[-1], ExecutionView) and items[-1].state is ExecutionState.SUCCEEDED
    text = "".join(i.data for i in items if isinstance(i, OutputChunk) and i.stream == "stdout")
    assert text == "one\ntwo\n"


async def test_openapi_lists_every_route(harness: Harness) -> None:
    from openapi_spec_validator import validate

    from orchestrator.api.routes import ROUTES

    agent = harness.client("agent-a")
    status, body = await agent._send(core.Call("GET", "/v1/openapi.json"))
    assert status == 200
    doc = json.loads(body)
    validate(doc)
    for route in ROUTES:
        assert route.method.lower() in doc["paths"][route.path], route.path


async def test_two_answers_at_once_resolve_exactly_once(harness: Harness) -> None:
    agent = harness.client("agent-a")
    approver, admin = harness.client("approver-a"), harness.client("admin")
    for _ in range(5):
        view = await agent.submit({"tool": "shell_command", "command": "uname -s"})
        results = await asyncio.gather(
            approver.approve(view.execution_id), admin.deny(view.execution_id), return_exceptions=True
        )
        won = [r for r in results if not isinstance(r, BaseException)]
        lost = [r for r in results if isinstance(r, ApprovalNotPending)]
        assert len(won) == 1 and len(lost) == 1, results
        done = await agent.get(view.execution_id, wait=30)
        expected = ExecutionState.SUCCEEDED if won[0].outcome == "approved" else ExecutionState.REFUSED
        assert done.state is expected
        decided = [r for r in (await agent.evidence(view.execution_id)).records if r["event"] == "approval_decided"]
        assert len(decided) == 1 and decided[0]["decision"] == won[0].outcome


async def test_readiness_and_metrics(harness: Harness) -> None:
    agent = harness.client("agent-a")
    await agent.run({"tool": "shell", "command": ["true"]})
    with pytest.raises(PolicyDenied):
        await agent.submit({"tool": "shell_command", "command": "sudo id"})
    async with aiohttp.ClientSession() as http:
        async with http.get(harness.url + "/readyz") as r:
            assert r.status == 200 and (await r.json())["checks"] == {"engine": "ok", "store": "ok", "evidence": "ok"}
        async with http.get(harness.url + "/metrics") as r:
            text = await r.text()
    assert 'sandbox_decisions_total{outcome="allow"} 1.0' in text
    assert 'sandbox_decisions_total{outcome="deny"} 1.0' in text
    assert 'sandbox_executions_total{profile="workspace-write",status="succeeded"} 1.0' in text
    assert "sandbox_start_latency_seconds_count 1.0" in text and "sandbox_active_sandboxes 0.0" in text
    assert "sandbox_evidence_write_seconds_count" in text


async def test_output_arrives_while_the_command_runs_and_resumes_after_a_reconnect(harness: Harness) -> None:
    agent = harness.client("agent-a")
    view = await agent.submit({"tool": "shell_command", "command": "printf a; sleep 1.5; printf b"})
    if view.state is ExecutionState.PENDING_APPROVAL:
        await harness.client("approver-a").approve(view.execution_id)
    loop = asyncio.get_running_loop()
    seen: list[tuple[float, object]] = []
    async for item in agent.stream(view.execution_id):
        seen.append((loop.time(), item))
    chunks = [(t, i) for t, i in seen if isinstance(i, OutputChunk)]
    assert "".join(i.data for _, i in chunks) == "ab"
    first_at, end_at = chunks[0][0], seen[-1][0]
    assert isinstance(seen[-1][1], ExecutionView) and end_at - first_at > 1.0  # "a" came while it ran

    # a reconnect with the id of the first event gets only what followed it
    async with aiohttp.ClientSession() as http:
        headers = core.headers(token_of("agent-a"), sse=True, last_event_id="0")
        async with http.get(harness.url + core.output_path(view.execution_id), headers=headers) as r:
            text = await r.text()
    assert '"data":"a"' not in text and '"data":"b"' in text and "event: result" in text


async def test_an_open_event_stream_does_not_hold_the_shutdown(tmp_path: Path, engine: Any) -> None:
    """An approvals page left open keeps `/v1/events` open: stopping the service ends that stream at once
    (not at its next keep-alive, 15 s later)."""
    harness = await start_service(write_config(tmp_path))
    stopped = False
    try:
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {token_of('approver-a')}"}
            async with session.get(f"{harness.url}/v1/events", headers=headers) as response:
                assert await asyncio.wait_for(response.content.readline(), 5) == b": connected\n"
                started = time.monotonic()
                await asyncio.wait_for(harness.stop(), 10)
                stopped = True
                assert time.monotonic() - started < 3
                assert await asyncio.wait_for(response.content.read(), 5) == b"\n"  # the end of the stream
    finally:
        if not stopped:
            await harness.stop()


async def test_approve_for_session_is_remembered_across_a_restart(tmp_path: Path, engine: Any) -> None:
    config = write_config(tmp_path)
    request = {"tool": "shell_command", "command": "uname -s", "session_id": "agent-7"}
    h = await start_service(config)
    try:
        agent = h.client("agent-a")
        first = await agent.submit(request)
        await h.client("approver-a").approve(first.execution_id, for_session=True)
        assert (await agent.get(first.execution_id, wait=30)).state is ExecutionState.SUCCEEDED
        again = await agent.run(request)
        assert again.approval is not None and again.approval.approver == "session-cache"
    finally:
        await h.stop()
    h = await start_service(config)
    try:
        after = await h.client("agent-a").run(request)
        assert after.state is ExecutionState.SUCCEEDED
        assert after.approval is not None and after.approval.approver == "session-cache"
        other_session = await h.client("agent-a").submit({**request, "session_id": "agent-8"})
        assert other_session.state is ExecutionState.PENDING_APPROVAL  # a grant is its session's only
        await h.client("approver-a").deny(other_session.execution_id)
    finally:
        await h.stop()


@pytest.mark.parametrize("how", ["cancel", "approve", "deny"])
async def test_an_asks_stored_request_is_gone_however_it_ends(harness: Harness, how: str) -> None:
    """The full request (its env values) stays in the store only while the ask waits."""
    import sqlite3

    agent, approver = harness.client("agent-a"), harness.client("approver-a")
    view = await agent.submit({"tool": "shell_command", "command": "uname -s", "env": {"TOKEN": "s3cret-v4lue"}})
    db = harness.service.store.path

    def stored() -> str | None:
        with sqlite3.connect(db) as conn:
            row = conn.execute("SELECT pending_request FROM executions WHERE id = ?", (view.execution_id,)).fetchone()
        return row[0] if row else None

    assert "s3cret-v4lue" in (stored() or "")
    if how == "cancel":
        await agent.cancel(view.execution_id)
    elif how == "approve":
        await approver.approve(view.execution_id)
    else:
        await approver.deny(view.execution_id)
    await agent.get(view.execution_id, wait=30)
    for _ in range(50):  # the row is written behind the answer
        if stored() is None:
            break
        await asyncio.sleep(0.05)
    assert stored() is None


async def test_with_the_pool_on_the_service_runs_a_command_in_a_pre_started_sandbox(
    tmp_path: Path, engine: Any
) -> None:
    h = await start_service(write_config(tmp_path, pool={"enabled": True, "per_key": 1, "ttl_s": 60}))
    try:
        agent = h.client("agent-a")

        async def begin_of(view: ExecutionView) -> dict[str, Any]:
            records = (await agent.evidence(view.execution_id)).records
            return dict(next(r for r in records if r["event"] == "execution_started")["data"])

        first = await agent.run({"tool": "shell", "command": ["echo", "one"]})  # cold: the key fills from here
        pool = h.service.orchestrator.pool
        assert pool is not None
        for _ in range(200):
            if pool.describe()["ready"]:
                break
            await asyncio.sleep(0.05)
        second = await agent.run({"tool": "shell", "command": ["echo", "two"]})
        for view, text in ((first, "one\n"), (second, "two\n")):
            assert view.state is ExecutionState.SUCCEEDED and view.result is not None and view.result.stdout == text
        assert "pooled" not in await begin_of(first)
        assert (await begin_of(second))["pooled"]["pool_id"]  # its sandbox was pre-started
    finally:
        await h.stop()  # the pool's sandboxes go with the service (the engine fixture checks none is left)
