"""Bad callers get clear errors with stable codes and the right statuses — never a traceback — and the
service stays responsive for everyone else."""

from __future__ import annotations

import asyncio
import json
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator.domain.errors import PolicyDenied
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration


async def call(
    harness: Harness,
    method: str,
    path: str,
    *,
    token: str | None = "agent-a",
    body: Any = None,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token_of(token)}"
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    async with aiohttp.ClientSession() as http, http.request(method, harness.url + path, data=data, headers=sent) as r:
        text = await r.text()
        return r.status, json.loads(text) if text.startswith("{") else {"text": text}


async def test_no_token_or_an_unknown_one_is_401(harness: Harness) -> None:
    status, body = await call(harness, "GET", "/v1/executions", token=None)
    assert status == 401 and body["error"]["code"] == "AUTH.UNAUTHORIZED"
    status, body = await call(harness, "GET", "/v1/executions", token=None, headers={"Authorization": "Bearer nope"})
    assert status == 401 and "nope" not in json.dumps(body)


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b"", "empty"),
        (b"[1, 2]", "JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deep"),
    ],
)
async def test_malformed_bodies_are_400_naming_the_problem(harness: Harness, raw: bytes, problem: str) -> None:
    status, body = await call(harness, "POST", "/v1/executions", raw=raw)
    assert status == 400 and body["error"]["code"] == "INPUT.INVALID" and problem in body["error"]["message"]


async def test_an_invalid_request_names_its_fields_never_its_values(harness: Harness) -> None:
    status, body = await call(
        harness, "POST", "/v1/executions", body={"tool": "shell", "command": [], "env": {"K": "s3cret\ud800"}}
    )
    assert status == 400 and body["error"]["code"] == "INPUT.INVALID"
    assert "command" in body["error"]["details"]["fields"] and "s3cret" not in json.dumps(body)
    status, body = await call(harness, "POST", "/v1/executions", body={"tool": "nope"})
    assert status == 400


async def test_a_body_past_the_limit_is_413_before_it_is_read(harness: Harness) -> None:
    big = b'{"tool": "shell_command", "command": "' + b"x" * (9 * 1024 * 1024) + b'"}'
    status, body = await call(harness, "POST", "/v1/executions", raw=big)
    assert status == 413 and body["error"]["code"] == "REQUEST.TOO_LARGE"


async def test_roles_are_enforced(harness: Harness) -> None:
    me = await harness.client("approver-a").whoami()
    assert (me.subject, me.role, me.tenants) == ("approver-a", "approver", ["team-a"])
    status, body = await call(
        harness, "POST", "/v1/executions", token="approver-a", body={"tool": "shell", "command": ["true"]}
    )
    assert status == 403 and body["error"]["code"] == "AUTH.FORBIDDEN"
    status, _ = await call(harness, "GET", "/v1/approvals", token="agent-a")
    assert status == 403
    status, _ = await call(harness, "GET", "/v1/evidence/verify", token="agent-a")
    assert status == 403
    status, body = await call(harness, "GET", "/v1/evidence/verify", token="admin")
    assert status == 200 and body["ok"] is True
    status, _ = await call(
        harness, "POST", "/v1/executions", body={"tool": "shell", "command": ["true"], "tenant": "team-b"}
    )
    assert status == 403


async def test_an_admin_cannot_approve_what_it_submitted_itself(harness: Harness) -> None:
    status, body = await call(
        harness,
        "POST",
        "/v1/executions",
        token="admin",
        body={"tool": "shell_command", "command": "uname -n", "tenant": "team-a"},
    )
    assert status == 202
    ident = body["execution"]["execution_id"]
    status, body = await call(harness, "POST", f"/v1/approvals/{ident}", token="admin", body={"decision": "approve"})
    assert status == 403 and "submitted itself" in body["error"]["message"]
    status, _ = await call(harness, "POST", f"/v1/approvals/{ident}", token="approver-a", body={"decision": "maybe"})
    assert status == 400
    status, _ = await call(harness, "POST", f"/v1/approvals/{ident}", token="approver-a", body={"decision": "deny"})
    assert status == 200


async def test_unknown_routes_and_methods_get_our_error_shape(harness: Harness) -> None:
    status, body = await call(harness, "GET", "/v1/nothing")
    assert status == 404 and body["error"]["code"] == "RESOURCE.NOT_FOUND"
    status, body = await call(harness, "PUT", "/v1/executions")
    assert status == 405 and body["error"]["code"] == "INPUT.INVALID"
    status, body = await call(harness, "GET", "/v1/executions?limit=0")
    assert status == 400 and body["error"]["details"]["fields"] == ["limit"]
    status, body = await call(harness, "GET", "/v1/executions?cursor=abc")
    assert status == 400


async def test_past_the_rate_limit_a_token_gets_429_and_others_do_not(tmp_path: Path, engine: Any) -> None:
    h = await start_service(write_config(tmp_path, service={"limits": {"rate_per_s": 1, "burst": 5}}))
    try:
        statuses = [(await call(h, "GET", "/v1/executions"))[0] for _ in range(8)]
        assert statuses[:5] == [200] * 5 and 429 in statuses[5:]
        assert (await call(h, "GET", "/v1/executions", token="agent-b"))[0] == 200
    finally:
        await h.stop()


async def test_a_trickled_body_does_not_stall_other_callers(harness: Harness) -> None:
    _reader, writer = await asyncio.open_connection("127.0.0.1", int(harness.url.rsplit(":", 1)[1]))
    writer.write(
        b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
        + f"Authorization: Bearer {token_of('agent-a')}\r\n\r\n{{".encode()
    )
    await writer.drain()
    started = asyncio.get_running_loop().time()
    status, _ = await call(harness, "GET", "/v1/executions")
    assert status == 200 and asyncio.get_running_loop().time() - started < 2
    writer.close()


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


async def test_a_100_mb_chunked_body_is_refused_without_holding_it(harness: Harness) -> None:
    """No Content-Length to refuse it early: the body is read up to the limit, then refused."""

    async def chunks() -> Any:
        block = b"x" * (1024 * 1024)
        for _ in range(100):
            yield block

    before = rss_kib()
    started = asyncio.get_running_loop().time()
    headers = {"Authorization": f"Bearer {token_of('agent-a')}", "Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession() as http,
        http.post(harness.url + "/v1/executions", data=chunks(), headers=headers) as r,
    ):
        status, body = r.status, await r.json()
    assert status == 413 and body["error"]["code"] == "REQUEST.TOO_LARGE"
    assert asyncio.get_running_loop().time() - started < 30
    assert rss_kib() - before < 64 * 1024  # KiB: the 8 MiB limit and buffers, never the 100 MB
    assert (await call(harness, "GET", "/v1/executions"))[0] == 200


async def test_an_event_stream_reader_that_never_reads_costs_others_nothing(harness: Harness) -> None:
    port = int(harness.url.rsplit(":", 1)[1])
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # a tiny receive buffer, never read: the server's writes back up
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    writer.write(f"GET /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token_of('agent-a')}\r\n\r\n".encode())
    await writer.drain()
    await asyncio.sleep(0.2)
    before = rss_kib()
    agent = harness.client("agent-a")
    started = asyncio.get_running_loop().time()
    for _ in range(300):  # each refusal is an event for the stalled reader
        with pytest.raises(PolicyDenied):
            await agent.submit({"tool": "shell_command", "command": "sudo id " + "x" * 2000})
    elapsed = asyncio.get_running_loop().time() - started
    assert elapsed < 30
    assert (await call(harness, "GET", "/v1/executions?limit=1"))[0] == 200
    assert rss_kib() - before < 32 * 1024  # KiB: the stalled listener's queue is bounded
    writer.close()


async def test_a_body_trickled_byte_by_byte_is_cut_off_at_the_body_timeout(tmp_path: Path, engine: Any) -> None:
    h = await start_service(write_config(tmp_path, service={"limits": {"body_timeout_s": 1}}))
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", int(h.url.rsplit(":", 1)[1]))
        body = b'{"tool": "shell", "command": ["true"]}'
        writer.write(
            b"POST /v1/executions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nAuthorization: Bearer {token_of('agent-a')}\r\n\r\n".encode()
        )
        started = asyncio.get_running_loop().time()
        for byte in body[:8]:  # a byte every 0.3 s: the whole body would take 12 s
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.3)
        answer = await asyncio.wait_for(reader.read(4096), 10)
        assert answer.startswith(b"HTTP/1.1 400") and b"did not arrive within 1s" in answer
        assert asyncio.get_running_loop().time() - started < 5
        writer.close()
    finally:
        await h.stop()


async def test_connections_that_never_send_their_headers_are_closed(tmp_path: Path, engine: Any) -> None:
    limits = {"header_timeout_s": 1, "max_pending_connections": 10}
    h = await start_service(write_config(tmp_path, service={"limits": limits}))
    port = int(h.url.rsplit(":", 1)[1])
    try:
        opened = []
        for i in range(30):  # silent, half a request line, headers trickling: none ever completes
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write([b"", b"GET /v1/execu", b"GET /v1/executions HTTP/1.1\r\nHost: x\r\n"][i % 3])
            await writer.drain()
            opened.append((reader, writer))
        await asyncio.sleep(0.8)  # past the cap: the newest are closed at once
        early = sum([await _closed(r) for r, _ in opened])
        assert early >= 20, early
        assert (await call(h, "GET", "/v1/executions"))[0] == 200  # others are served meanwhile
        await asyncio.sleep(1.5)  # past the header timeout: all of them
        assert all([await _closed(r) for r, _ in opened])
        for _, writer in opened:
            writer.close()
    finally:
        await h.stop()


async def _closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 0.05) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def test_event_streams_are_capped_per_token(harness: Harness) -> None:
    headers = {"Authorization": f"Bearer {token_of('approver-a')}"}
    async with aiohttp.ClientSession() as http:
        streams = [await http.get(harness.url + "/v1/events", headers=headers) for _ in range(8)]
        assert all(r.status == 200 for r in streams)
        async with http.get(harness.url + "/v1/events", headers=headers) as ninth:
            assert ninth.status == 429 and (await ninth.json())["error"]["code"] == "REQUEST.RATE_LIMITED"
        other = {"Authorization": f"Bearer {token_of('admin')}"}
        async with http.get(harness.url + "/v1/events", headers=other) as r:
            assert r.status == 200  # another token's stream is its own
        for r in streams:
            r.close()
