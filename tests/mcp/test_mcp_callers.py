"""Who an MCP call is for, as an attacker with a token would try it over raw HTTP on /mcp: what the client
claims (an Mcp-Session-Id in the 2026-07-28 envelope, which holds none; a JSON-RPC id with a lone surrogate) is
never recorded as checked, and never fails the call; an MCP session belongs to its token's whole principal (the
same subject name in another tenant is another caller); one token cannot hold every MCP session of the
controller. On the real engine."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from orchestrator.api import app as api_app
from tests.support.engine import engine_or_skip
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
BOT_A, BOT_B = "bot-token-of-team-a-0123456789", "bot-token-of-team-b-0123456789"


@pytest.fixture
def engine() -> None:
    engine_or_skip()


@contextlib.asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[Harness]:
    path = write_config(tmp_path)
    config = yaml.safe_load(path.read_text())
    # one subject name in two tenants (a "bot" per team): two callers
    config["service"]["tokens"] += [
        {"subject": "bot", "role": "agent", "tenants": ["team-a"], "token": BOT_A},
        {"subject": "bot", "role": "agent", "tenants": ["team-b"], "token": BOT_B},
    ]
    path.write_text(yaml.safe_dump(config))
    harness = await start_service(path)
    try:
        yield harness
    finally:
        await harness.stop()


async def answer_of(response: aiohttp.ClientResponse) -> tuple[int, Any]:
    """The JSON-RPC answer of a POST: its JSON, or the last event of its SSE stream."""
    text = await response.text()
    if response.headers.get("Content-Type", "").startswith("text/event-stream"):
        events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
        return response.status, events[-1]
    return response.status, json.loads(text) if text else None


async def modern_run(http: aiohttp.ClientSession, url: str, token: str, *, rid: str = "1", **headers: str) -> Any:
    """tools/call run `true` in the 2026-07-28 envelope, as raw JSON text (``rid``: the id as written)."""
    meta = {"io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {}}
    params = {"name": "run", "arguments": {"argv": ["true"]}, "_meta": meta}
    text = json.dumps({"jsonrpc": "2.0", "id": "@ID@", "method": "tools/call", "params": params})
    text = text.replace('"@ID@"', rid)  # as written: a JSON escape a client may send that json.dumps never would
    sent = {
        "Authorization": f"Bearer {token}",
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "run",
        **headers,
    }
    async with http.post(f"{url}/mcp", data=text.encode(), headers=sent) as response:
        status, body = await answer_of(response)
    assert status == 200 and "result" in body, body
    return body["result"]


async def open_session(http: aiohttp.ClientSession, url: str, token: str) -> tuple[int, str | None, Any]:
    """An initialize of the 2025-11-25 handshake: the status, the session it opened, the answer."""
    body = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
    }
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
    async with http.post(f"{url}/mcp", json=body, headers=headers) as response:
        status, answer = await answer_of(response)
        return status, response.headers.get("Mcp-Session-Id"), answer


async def in_session(
    http: aiohttp.ClientSession, url: str, token: str, session: str, method: str = "POST"
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT, "Mcp-Session-Id": session}
    headers["MCP-Protocol-Version"] = LEGACY
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"} if method == "POST" else None
    async with http.request(method, f"{url}/mcp", json=body, headers=headers) as response:
        return await answer_of(response)


async def test_what_a_client_claims_is_never_recorded_as_checked_nor_fails_its_call(
    tmp_path: Path, engine: None
) -> None:
    async with serving(tmp_path) as harness, aiohttp.ClientSession() as http:
        admin = harness.client("admin")
        agent = token_of("agent-a")
        # the 2026-07-28 envelope holds no MCP session: an Mcp-Session-Id sent with it (another caller's, one the
        # evidence showed) is the client's word, never recorded as the call's session, nor in its call id
        for claimed in ("0123456789abcdef0123456789abcdef", "x" * 300, "caf\xe9"):
            result = await modern_run(http, harness.url, agent, **{"Mcp-Session-Id": claimed})
            assert result["isError"] is False, result  # a header it cannot record does not fail the call (-32602)
            context = (await admin.get(result["structuredContent"]["execution_id"])).request["context"]
            assert "session" not in context["mcp"], context
            assert context["call_id"].startswith("mcp-") and claimed[:8] not in context["call_id"], context
        # a JSON-RPC id with a lone surrogate and a control character: the call runs, its id recorded sanitized
        # (it was refused as INPUT.INVALID: the request model takes no lone surrogate)
        result = await modern_run(http, harness.url, agent, rid='"\\ud800\\u001b[2J"')
        assert result["isError"] is False, result
        context = (await admin.get(result["structuredContent"]["execution_id"])).request["context"]
        assert context["call_id"].endswith(":??[2J") and context["call_id"].isprintable(), context


async def test_one_subject_name_in_two_tenants_is_two_callers(tmp_path: Path, engine: None) -> None:
    async with serving(tmp_path) as harness, aiohttp.ClientSession() as http:
        status, session, _ = await open_session(http, harness.url, BOT_A)
        assert status == 200 and session is not None
        # team-b's "bot" may neither use nor end team-a's "bot"'s session: answered as one that does not exist
        assert (await in_session(http, harness.url, BOT_B, session))[0] == 404
        assert (await in_session(http, harness.url, BOT_B, session, "DELETE"))[0] == 404
        assert (await in_session(http, harness.url, BOT_B, session))[0] == 404
        status, listed = await in_session(http, harness.url, BOT_A, session)  # still whole, for its own token
        assert status == 200 and {t["name"] for t in listed["result"]["tools"]} >= {"run", "write_file"}


async def test_one_token_cannot_hold_every_mcp_session(
    tmp_path: Path, engine: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(api_app, "MCP_MAX_SESSIONS_PER_CALLER", 3)
    async with serving(tmp_path) as harness, aiohttp.ClientSession() as http:
        hog = token_of("agent-b")
        held = [await open_session(http, harness.url, hog) for _ in range(3)]
        assert all(status == 200 and session for status, session, _ in held), held
        status, session, answer = await open_session(http, harness.url, hog)
        assert (status, session) == (429, None), answer
        assert answer["error"]["code"] == "SESSION.LIMIT" and answer["error"]["details"] == {"limit": 3}
        # the other tenants still open theirs; the hog still runs in the envelope that holds no session
        status, session, _ = await open_session(http, harness.url, token_of("agent-a"))
        assert status == 200 and session is not None
        assert (await modern_run(http, harness.url, hog))["isError"] is False
        # one ended (DELETE), one may open again
        first = held[0][1]
        assert first is not None
        assert (await in_session(http, harness.url, hog, first, "DELETE"))[0] == 200
        assert (await open_session(http, harness.url, hog))[0] == 200
        assert (await open_session(http, harness.url, hog))[0] == 429


async def test_a_client_that_leaves_mid_body_is_no_error_in_the_log(
    tmp_path: Path, engine: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A session's POST whose client leaves before its body is in: the SDK logged each as an ERROR with its
    traceback, which any token could repeat 200 times a second."""
    async with serving(tmp_path) as harness, aiohttp.ClientSession() as http:
        status, session, _ = await open_session(http, harness.url, token_of("agent-a"))
        assert status == 200 and session is not None
        port = int(harness.url.rsplit(":", 1)[1])
        caplog.set_level(logging.WARNING)
        for _ in range(3):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            head = (
                f"POST /mcp HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token_of('agent-a')}\r\n"
                f"Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: {LEGACY}\r\nContent-Type: application/json\r\n"
                f"Accept: {ACCEPT}\r\nContent-Length: 1000\r\n\r\n"
            )
            writer.write(head.encode() + b'{"jsonrpc":')  # and never the rest
            await writer.drain()
            await asyncio.sleep(0.2)
            writer.close()
        await asyncio.sleep(1.5)  # the bridge sees each leave (polled) and tells the SDK
        assert (await in_session(http, harness.url, token_of("agent-a"), session))[0] == 200  # the session goes on
    assert [r.getMessage() for r in caplog.records if r.name.startswith("mcp.") and r.levelno >= logging.ERROR] == []
