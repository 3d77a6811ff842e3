"""The ASGI bridge (orchestrator/api/asgi.py), served for real on a loopback port: a starlette app sees the
request as aiohttp got it; a stream reaches the client chunk by chunk; the body's bounds and an app's failure
answer in our error shape; a client that leaves is told, and its app ends. Then the MCP SDK's Streamable HTTP
transport through it, driven by the SDK's own client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import anyio
import mcp_types as types
import pytest
from aiohttp import web
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared._httpx_utils import create_mcp_http_client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from orchestrator.api import asgi
from orchestrator.api.asgi import ASGIApp, ASGIBridge, Message, Receive, Scope, Send

LIMIT = 1024
BODY_TIMEOUT_S = 0.5
WAIT_S = 5.0  # every wait on the server is bounded: a bridge that hangs fails its test, never the run

Serve = Callable[..., Awaitable[str]]


class Probe:
    """What the app saw, for the test to look at."""

    def __init__(self) -> None:
        self.proceed = asyncio.Event()  # the streaming app's next chunk waits on it
        self.received: list[str] = []  # the types of the messages receive() returned
        self.disconnected = asyncio.Event()
        self.ended = asyncio.Event()  # the never-ending stream's generator, or the app, was ended


def recorded(app: ASGIApp, probe: Probe) -> ASGIApp:
    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        async def recording() -> Message:
            message = await receive()
            probe.received.append(message["type"])
            if message["type"] == "http.disconnect":
                probe.disconnected.set()
            return message

        await app(scope, recording, send)

    return wrapped


def starlette_app(probe: Probe) -> ASGIApp:
    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "raw_path": request.scope["raw_path"].decode(),
                "query_string": request.scope["query_string"].decode(),
                "query": dict(request.query_params),
                "headers": [[name, value] for name, value in request.headers.items()],
                "body": body.decode(),
                "principal": request.state.principal,
                "http_version": request.scope["http_version"],
                "scheme": request.scope["scheme"],
                "root_path": request.scope["root_path"],
                "client": request.scope["client"][0],
                "server_port": request.scope["server"][1],
            }
        )

    async def stream(request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            yield "data: one\n\n"
            await probe.proceed.wait()  # set by the test once it has read the first event
            yield "data: two\n\n"
            yield "data: three\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def endless(request: Request) -> StreamingResponse:
        async def events() -> AsyncIterator[str]:
            try:
                yield "data: first\n\n"
                await asyncio.Event().wait()
            finally:
                probe.ended.set()

        return StreamingResponse(events(), media_type="text/event-stream")

    routes = [Route("/echo", echo, methods=["GET", "POST"]), Route("/stream", stream), Route("/endless", endless)]
    return recorded(Starlette(routes=routes), probe)


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Serves an ASGI app at every path of a loopback site, as ``start_site`` does (``AppRunner``: no handler
    cancellation, so the bridge must find a client that left by itself; aiohttp's TestServer would cancel)."""
    async with AsyncExitStack() as stack:

        async def start(app: ASGIApp, *, handler_cancellation: bool = False, **routes: Any) -> str:
            web_app = web.Application()
            bridge = ASGIBridge(
                app,
                max_body_bytes=LIMIT,
                body_timeout_s=BODY_TIMEOUT_S,
                state=lambda request: {"principal": request.headers.get("X-Principal", "nobody")},
            )
            web_app.router.add_route("*", "/{tail:.*}", bridge.handle)
            runner = web.AppRunner(web_app, handle_signals=False, handler_cancellation=handler_cancellation)
            await runner.setup()
            stack.push_async_callback(runner.cleanup)
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            host, port = runner.addresses[0][:2]
            return f"http://{host}:{port}"

        yield start


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as session:
        yield session


async def test_the_app_sees_the_request_as_sent(serve: Serve, http: aiohttp.ClientSession) -> None:
    base = await serve(starlette_app(Probe()))
    async with http.post(
        f"{base}/echo?a=1&b=x%20y",
        data=b'{"hello": "world"}',
        headers={"X-Principal": "agent-a", "X-Custom": "Value", "Content-Type": "application/json"},
    ) as resp:
        assert resp.status == 200
        assert resp.headers.getall("Content-Type") == ["application/json"]  # the app's own, and only it
        assert resp.headers["Content-Length"] == str(len(await resp.read()))  # as the app said: not chunked
        assert "Transfer-Encoding" not in resp.headers
        seen = await resp.json()
    assert seen["method"] == "POST"
    assert (seen["path"], seen["raw_path"], seen["root_path"]) == ("/echo", "/echo", "")
    assert seen["query_string"] == "a=1&b=x%20y"  # the raw bytes, still percent-encoded
    assert seen["query"] == {"a": "1", "b": "x y"}
    assert seen["body"] == '{"hello": "world"}'
    assert seen["principal"] == "agent-a"  # scope["state"], what starlette's request.state reads
    assert (seen["http_version"], seen["scheme"], seen["client"]) == ("1.1", "http", "127.0.0.1")
    assert seen["server_port"] == int(base.rsplit(":", 1)[1])
    headers = dict(seen["headers"])
    assert headers["x-custom"] == "Value"
    assert all(name == name.lower() for name in headers)


async def test_a_body_sent_in_chunks_arrives_whole(serve: Serve, http: aiohttp.ClientSession) -> None:
    base = await serve(starlette_app(Probe()))

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: chunked, read as it arrives
        for part in (b"a" * 300, b"b" * 300, b"c" * 300):
            yield part

    async with http.post(f"{base}/echo", data=chunks()) as resp:
        assert resp.status == 200
        assert (await resp.json())["body"] == "a" * 300 + "b" * 300 + "c" * 300


async def test_a_stream_reaches_the_client_chunk_by_chunk(serve: Serve, http: aiohttp.ClientSession) -> None:
    probe = Probe()
    base = await serve(starlette_app(probe))
    async with http.get(f"{base}/stream") as resp:
        assert resp.status == 200
        assert resp.headers.getall("Content-Type") == ["text/event-stream; charset=utf-8"]
        assert resp.headers["Transfer-Encoding"] == "chunked"
        # the app produces its second event only once this one is read: were anything buffered, this would wait
        async with asyncio.timeout(WAIT_S):
            first = await resp.content.readuntil(b"\n\n")
        assert first == b"data: one\n\n"
        assert not probe.proceed.is_set()
        probe.proceed.set()
        async with asyncio.timeout(WAIT_S):
            rest = await resp.read()
    assert rest == b"data: two\n\ndata: three\n\n"


async def test_a_body_past_the_limit_is_refused_in_our_shape(serve: Serve, http: aiohttp.ClientSession) -> None:
    probe = Probe()
    base = await serve(starlette_app(probe))
    # declared: refused before the app runs
    async with http.post(f"{base}/echo", data=b"x" * (LIMIT + 1)) as resp:
        assert resp.status == 413
        assert resp.headers.getall("Content-Type") == ["application/json; charset=utf-8"]
        error = (await resp.json())["error"]
    assert error["code"] == "REQUEST.TOO_LARGE"
    assert error["details"] == {"limit": LIMIT}
    assert probe.received == []

    async def chunks() -> AsyncIterator[bytes]:  # undeclared: refused once it passes the limit
        for _ in range(4):
            yield b"y" * 400

    async with http.post(f"{base}/echo", data=chunks()) as resp:
        assert resp.status == 413
        assert (await resp.json())["error"]["code"] == "REQUEST.TOO_LARGE"


async def test_a_body_too_slow_is_refused_in_our_shape(serve: Serve, http: aiohttp.ClientSession) -> None:
    base = await serve(starlette_app(Probe()))

    async def trickle() -> AsyncIterator[bytes]:
        yield b"{"
        await asyncio.sleep(BODY_TIMEOUT_S * 3)
        yield b"}"

    async with http.post(f"{base}/echo", data=trickle()) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert error["code"] == "INPUT.INVALID"
    assert error["message"] == f"the body did not arrive within {BODY_TIMEOUT_S:g}s"


@pytest.mark.parametrize("handler_cancellation", [False, True], ids=["polled", "handler-cancelled"])
async def test_a_client_that_leaves_mid_stream_is_told_and_its_stream_ends(
    serve: Serve, http: aiohttp.ClientSession, handler_cancellation: bool
) -> None:
    probe = Probe()
    base = await serve(starlette_app(probe), handler_cancellation=handler_cancellation)
    resp = await http.get(f"{base}/endless")
    async with asyncio.timeout(WAIT_S):
        assert await resp.content.readuntil(b"\n\n") == b"data: first\n\n"
    left = time.monotonic()
    resp.close()  # the connection with it
    async with asyncio.timeout(WAIT_S):
        await probe.disconnected.wait()
        await probe.ended.wait()
    assert time.monotonic() - left < asgi.DISCONNECT_POLL_S + 1.0
    assert probe.received == ["http.request", "http.disconnect"]


async def test_an_app_that_ignores_the_disconnect_is_cancelled(
    serve: Serve, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asgi, "DISCONNECT_GRACE_S", 0.2)
    probe = Probe()

    async def deaf(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"working\n", "more_body": True})
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            probe.ended.set()
            raise

    base = await serve(deaf)
    resp = await http.get(f"{base}/")
    async with asyncio.timeout(WAIT_S):
        assert await resp.content.readuntil(b"\n") == b"working\n"
    resp.close()
    async with asyncio.timeout(WAIT_S):
        await probe.ended.wait()


async def test_a_stream_still_open_at_shutdown_ends_at_once(http: aiohttp.ClientSession) -> None:
    probe = Probe()
    bridge = ASGIBridge(starlette_app(probe), max_body_bytes=LIMIT, body_timeout_s=BODY_TIMEOUT_S)
    web_app = web.Application()
    web_app.router.add_route("*", "/{tail:.*}", bridge.handle)
    web_app.on_shutdown.append(bridge.on_shutdown)
    runner = web.AppRunner(web_app, handle_signals=False, shutdown_timeout=10)  # as start_site's
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        host, port = runner.addresses[0][:2]
        async with http.get(f"http://{host}:{port}/endless") as resp:
            async with asyncio.timeout(WAIT_S):
                assert await resp.content.readuntil(b"\n\n") == b"data: first\n\n"
            started = time.monotonic()
            await runner.cleanup()  # without the hook: twice the shutdown timeout, then a cancellation
            assert time.monotonic() - started < asgi.DISCONNECT_GRACE_S + 1.0
            assert probe.disconnected.is_set()
            assert probe.ended.is_set()
    finally:
        await runner.cleanup()


async def test_an_app_that_fails_answers_internal_in_our_shape(
    serve: Serve, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    async def fails(scope: Scope, receive: Receive, send: Send) -> None:
        await receive()
        raise RuntimeError("the token is hunter2")

    base = await serve(fails)
    async with http.post(f"{base}/", data=b"{}") as resp:
        assert resp.status == 500
        text = await resp.text()
    error = (await resp.json())["error"]
    assert error["code"] == "INTERNAL"
    assert error["message"] == "unexpected RuntimeError"
    assert "hunter2" not in text
    assert "Traceback" not in text
    assert "RuntimeError in POST /" in caplog.text  # logged, type only
    assert "hunter2" not in caplog.text


async def test_an_app_that_fails_mid_stream_cuts_it_short(serve: Serve, http: aiohttp.ClientSession) -> None:
    async def fails_midway(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        raise RuntimeError("midway")

    base = await serve(fails_midway)
    async with http.get(f"{base}/") as resp:
        assert resp.status == 200
        # never a clean end: a client cannot take a truncated stream for a whole one
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()


async def test_the_mcp_sdk_end_to_end(serve: Serve) -> None:
    """The SDK's Streamable HTTP session manager behind the bridge, stateful as it will be mounted, the SDK's own
    client listing and calling a tool over it. ``mode="legacy"``: the handshake (2025-11-25) a stateful session
    serves, with its event streams and session id; the client's default probes 2026-07-28 first, which the manager
    answers statelessly whatever ``stateless`` says."""
    seen: dict[str, Any] = {}

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> Any:
        schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
        return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema=schema)])

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
        request = ctx.request
        assert isinstance(request, Request)
        seen["principal"] = request.state.principal
        seen["authorization"] = request.headers.get("authorization")
        return types.CallToolResult(content=[types.TextContent(text=(params.arguments or {})["text"])])

    server = Server("bridge-test", on_list_tools=list_tools, on_call_tool=call_tool)
    # security_settings None: no Host or Origin check (the SDK's default; its own localhost apps turn it on)
    manager = StreamableHTTPSessionManager(app=server, stateless=False)
    async with manager.run():  # entered and left in this task: an anyio task group
        base = await serve(manager.handle_request)
        headers = {"Authorization": "Bearer test-token", "X-Principal": "agent-a"}
        with anyio.fail_after(WAIT_S * 2):
            async with (
                create_mcp_http_client(headers=headers) as http,
                Client(streamable_http_client(f"{base}/mcp", http_client=http), mode="legacy") as client,
            ):
                assert client.protocol_version == "2025-11-25"
                tools = await client.list_tools()
                result = await client.call_tool("echo", {"text": "over the bridge"})
    assert [tool.name for tool in tools.tools] == ["echo"]
    assert result.is_error is not True
    assert [block.text for block in result.content if isinstance(block, types.TextContent)] == ["over the bridge"]
    assert seen == {"principal": "agent-a", "authorization": "Bearer test-token"}
