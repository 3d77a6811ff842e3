"""An ASGI 3 application (HTTP only) served from an aiohttp handler: the MCP SDK's Streamable HTTP transport is
one, and it is mounted beside the /v1 routes, behind the same middlewares (the token, the rate limit, errors in
our shape).

    manager = StreamableHTTPSessionManager(app=server, ...)

    async def mcp_sessions(app: web.Application) -> AsyncIterator[None]:
        async with manager.run():  # the task group every MCP session lives in
            yield

    app.cleanup_ctx.append(mcp_sessions)
    bridge = ASGIBridge(manager.handle_request, max_body_bytes=..., body_timeout_s=...,
                        state=lambda request: {"principal": request[PRINCIPAL]})
    app.router.add_route("*", "/mcp", bridge.handle)
    app.on_shutdown.append(bridge.on_shutdown)  # the streams still open end before aiohttp waits on them

No ASGI lifespan is run: an app that needs one for its lifetime (the SDK's ``run()``) is entered by the caller in
the aiohttp app's ``cleanup_ctx``, as above. ``run()`` is an anyio task group, to be left in the task that entered
it: where the app's start and cleanup may run in two tasks (a test's fixtures), a task of its own holds it.
``asgi_handler()`` is ``ASGIBridge(...).handle`` alone, for an app that never holds a response open.

A client that leaves before its response is complete: aiohttp, unless the site runs with ``handler_cancellation``
(ours does not; aiohttp's TestServer does), never tells a handler its client left, so the bridge looks at the
connection every ``DISCONNECT_POLL_S``. Either way (or when the handler is cancelled: shutdown) the app's
``receive()`` answers ``http.disconnect`` — the SDK cancels a 2026-07-28 request's tool call on it — the app has
``DISCONNECT_GRACE_S`` to end by itself, then its task is cancelled. Once the response is complete, ``receive()``
answers ``http.disconnect`` too (as uvicorn does), and the app may finish what it does after its response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import BadHttpMessage
from aiohttp.typedefs import Handler

from orchestrator.api.errors import error_response
from orchestrator.api.sse import WRITE_TIMEOUT_S
from orchestrator.domain.errors import InputInvalid, InternalError, OrchestratorError, RequestTooLarge

log = logging.getLogger(__name__)

# ASGI 3, as starlette.types spells it (declared here: the API does not import starlette or the SDK)
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DISCONNECT_POLL_S = 0.5
#: ``scope["state"][CLIENT_GONE]``: an asyncio.Event set once the client left (or the server shuts down)
CLIENT_GONE = "client_gone"
DISCONNECT_GRACE_S = 1.0  # after http.disconnect, before the app's task is cancelled
CANCEL_WAIT_S = 5.0  # a cancelled app that is still running after this is logged and left
CHUNK_BYTES = 64 * 1024
# Nobody reads it (the client left); the access log says why the request ended. nginx's "client closed request".
CLIENT_CLOSED = 499
# the connection's framing (chunked or not, kept alive or not) is aiohttp's to decide, never the app's
_HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
)


class ASGIBridge:
    """Serves ``app``: ``handle`` is the aiohttp handler. The body is bounded as body.py bounds every body (413
    REQUEST.TOO_LARGE past ``max_body_bytes``, 400 INPUT.INVALID when it takes longer than ``body_timeout_s``);
    what ``state`` returns for a request is the app's ``scope["state"]`` (starlette's ``request.state``).

    ``on_shutdown`` is for ``app.on_shutdown``: aiohttp waits up to twice its shutdown timeout for a handler still
    running before it cancels it, and an event stream (the SDK's GET stream of a session) never ends by itself;
    told that their clients left, the requests still running end now."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_body_bytes: int,
        body_timeout_s: float,
        state: Callable[[web.Request], Mapping[str, Any]] | None = None,
    ) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        self.state = state
        self._running: set[_Exchange] = set()

    # a method, not __call__: aiohttp takes an object that is not a coroutine function as a deprecated bare one
    async def handle(self, request: web.Request) -> web.StreamResponse:
        declared = request.content_length
        if declared is not None and declared > self.max_body_bytes:  # refused before a byte is read
            return error_response(_too_large(self.max_body_bytes))
        scope = _scope(request, self.state(request) if self.state is not None else {})
        exchange = _Exchange(request, self.max_body_bytes, self.body_timeout_s)
        # beyond ASGI: work the app started for this request elsewhere (a stateful MCP session's tool call runs
        # in the session's task, not the request's) can learn that the client left
        scope["state"][CLIENT_GONE] = exchange.gone
        self._running.add(exchange)
        try:
            return await exchange.run(self.app, scope)
        finally:
            self._running.discard(exchange)

    async def on_shutdown(self, app: web.Application) -> None:
        for exchange in list(self._running):
            exchange.client_gone()


def asgi_handler(
    app: ASGIApp,
    *,
    max_body_bytes: int,
    body_timeout_s: float,
    state: Callable[[web.Request], Mapping[str, Any]] | None = None,
) -> Handler:
    """``ASGIBridge(...).handle``, without its shutdown hook: for an app that never holds a response open."""
    return ASGIBridge(app, max_body_bytes=max_body_bytes, body_timeout_s=body_timeout_s, state=state).handle


def _too_large(limit: int) -> RequestTooLarge:
    return RequestTooLarge(f"the body is larger than {limit} bytes", details={"limit": limit})


def _address(info: object) -> tuple[str, int] | None:
    # (host, port) for TCP; a Unix socket's name is a string, which ASGI cannot say
    if isinstance(info, tuple) and len(info) >= 2:
        return str(info[0]), int(info[1])
    return None


def _scope(request: web.Request, state: Mapping[str, Any]) -> Scope:
    transport = request.transport
    return {
        "type": "http",
        # 2.3: a send after the client left is a no-op (2.4 would raise OSError into the app: the SDK logs each
        # one as an error); the app learns it from receive()
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.partition("?")[0].encode("utf-8", "surrogateescape"),
        "query_string": request.rel_url.raw_query_string.encode("utf-8", "surrogateescape"),
        "root_path": "",
        "headers": [(name.lower(), value) for name, value in request.raw_headers],
        "client": _address(transport.get_extra_info("peername")) if transport is not None else None,
        "server": _address(transport.get_extra_info("sockname")) if transport is not None else None,
        "state": dict(state),
    }


class _Exchange:
    """One request through the app: the body ``receive()`` hands out, the response ``send()`` writes, and
    whether the client is still there."""

    def __init__(self, request: web.Request, max_body_bytes: int, body_timeout_s: float) -> None:
        self.request = request
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s
        # read ahead of the app as the body arrives (at most max_body_bytes, as body.py holds): the time bound is
        # then the client's alone, never the app's pace
        self.body: asyncio.Queue[Message] = asyncio.Queue()
        self.body_done = False  # receive() has handed out the last of the body
        self.gone = asyncio.Event()  # the client left, or stopped reading
        # the client left or the response is complete: after the body, receive() says http.disconnect (as uvicorn
        # does: an app waiting on it, the SDK's event streams, ends once its response is out)
        self.over = asyncio.Event()
        self.halt = asyncio.Event()  # gone, or the body refused: the app is stopped
        self.refused: OrchestratorError | None = None
        self.response: web.StreamResponse | None = None
        self.writer: AbstractStreamWriter | None = None
        self.empty_body = False  # HEAD, 1xx, 204, 304: no body on the wire, whatever the app sends
        self.declared_length: int | None = None
        self.written = 0
        self.ended = False  # the app sent its last body message
        self.writing_since: float | None = None

    async def run(self, app: ASGIApp, scope: Scope) -> web.StreamResponse:
        async def call() -> None:  # ASGI promises an awaitable, create_task takes a coroutine
            await app(scope, self.receive, self.send)

        app_task = asyncio.create_task(call(), name=f"asgi {scope['path']}")
        helpers = [asyncio.create_task(self._pump_body()), asyncio.create_task(self._watch())]
        try:
            halted = asyncio.create_task(self.halt.wait())
            try:
                await asyncio.wait({app_task, halted}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                halted.cancel()
            if not app_task.done():
                if self.refused is None:  # the client left: the app may end by itself on http.disconnect
                    await asyncio.wait({app_task}, timeout=DISCONNECT_GRACE_S)
                await _stop(app_task)
        except asyncio.CancelledError:
            # the handler itself cancelled (shutdown, or handler_cancellation): to the app, its client left
            self.client_gone()
            await asyncio.wait({app_task}, timeout=DISCONNECT_GRACE_S)
            await _stop(app_task)
            raise
        finally:
            for helper in helpers:
                helper.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
        return self._outcome(app_task)

    def _outcome(self, app_task: asyncio.Task[None]) -> web.StreamResponse:
        request = self.request
        # read whatever the outcome (asyncio warns of a task's exception nobody retrieved)
        failure = app_task.exception() if app_task.done() and not app_task.cancelled() else None
        if self.refused is not None:
            if self.response is None:
                return error_response(self.refused)
            self._abort()
            return self.response
        if self.gone.is_set():
            return self.response or web.Response(status=CLIENT_CLOSED)
        if failure is not None:
            # a bug: logged as errors.answer does (type only: the message may hold the request's data); the
            # traceback only at DEBUG. The client sees INTERNAL, never a traceback
            log.error("ASGI app failed: %s in %s %s", type(failure).__name__, request.method, request.path)
            log.debug("the ASGI app's traceback", exc_info=failure)
            if self.response is None:
                return error_response(InternalError(f"unexpected {type(failure).__name__}"))
        elif self.response is None:
            log.error("ASGI app sent no response to %s %s", request.method, request.path)
            return error_response(InternalError("the handler sent no response"))
        if not self.ended:
            # failed or returned mid-stream: a response cut short must not look complete (a last empty chunk
            # would say it is), so the connection is dropped under it
            self._abort()
        return self.response

    # --- the app's side

    async def receive(self) -> Message:
        if not self.body_done:
            message = await self.body.get()
            self.body_done = message["type"] == "http.disconnect" or not message["more_body"]
            return message
        # after the body, receive() waits for the client to leave (that is how an ASGI app learns it), or for the
        # response to be complete
        await self.over.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.gone.is_set() or self.refused is not None:
            return  # nobody to write to, or our error answers instead
        kind = message["type"]
        if kind == "http.response.start":
            if self.response is not None:
                raise RuntimeError("ASGI: http.response.start sent twice")
            await self._start(int(message["status"]), message.get("headers", ()))
        elif kind == "http.response.body":
            if self.response is None or self.ended:
                raise RuntimeError("ASGI: http.response.body outside a response")
            await self._write(bytes(message.get("body", b"")), more=bool(message.get("more_body", False)))
        else:
            raise RuntimeError(f"ASGI: unexpected message {kind!r}")

    async def _start(self, status: int, headers: Any) -> None:
        response = web.StreamResponse(status=status)
        for raw_name, raw_value in headers:
            name = bytes(raw_name).lower()
            if name in _HOP_BY_HOP:
                continue
            value = bytes(raw_value).decode("latin-1")
            if name == b"content-length":
                # set as aiohttp's own: the body is then sent as is (not chunked), and no byte past it
                self.declared_length = response.content_length = int(value)
                continue
            # added as given (Content-Type included): aiohttp adds one of its own only when the app sent none
            response.headers.add(bytes(raw_name).decode("latin-1"), value)
        self.empty_body = self.request.method == "HEAD" or status < 200 or status in (204, 304)
        try:
            # the headers leave at once (StreamResponse does not hold them for the first chunk)
            self.writer = await response.prepare(self.request)
        except ConnectionError:
            self.client_gone()
            return
        self.response = response

    async def _write(self, body: bytes, *, more: bool) -> None:
        assert self.response is not None
        assert self.writer is not None
        self.writing_since = asyncio.get_running_loop().time()  # _watch drops a client that stops reading
        try:
            if body and not self.empty_body:
                await self.response.write(body)
                # nothing waits in a buffer: an event reaches the client now, and a slow reader slows the app
                await self.writer.drain()
                self.written += len(body)
            if not more:
                self.ended = True
                self.over.set()
                if self.declared_length is not None and self.written < self.declared_length and not self.empty_body:
                    self._abort()  # fewer bytes than it declared: the client would wait for the rest for ever
                    return
                await self.response.write_eof()
        except ConnectionError:
            self.client_gone()
        finally:
            self.writing_since = None

    # --- the client's side

    async def _pump_body(self) -> None:
        content = self.request.content
        size = 0
        try:
            async with asyncio.timeout(self.body_timeout_s):
                while not self.gone.is_set():
                    chunk = await content.read(CHUNK_BYTES)  # what has arrived, up to a chunk; b"" at the end
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        self._refuse(_too_large(self.max_body_bytes))
                        return
                    more = not content.at_eof()
                    self.body.put_nowait({"type": "http.request", "body": chunk, "more_body": more})
                    if not more:
                        return
        except TimeoutError:
            self._refuse(InputInvalid(f"the body did not arrive within {self.body_timeout_s:g}s"))
        except ConnectionError:
            self.client_gone()
        except BadHttpMessage:  # a malformed chunked body, or one shorter than its length as the client left
            if self.request.transport is None:
                self.client_gone()
            else:
                self._refuse(InputInvalid("the body is malformed", details={"fields": ["(body)"]}))

    async def _watch(self) -> None:
        """The connection, looked at every DISCONNECT_POLL_S: aiohttp does not tell a handler its client left. A
        write stalled past WRITE_TIMEOUT_S (a client that never reads) drops the connection, as sse.py does."""
        loop = asyncio.get_running_loop()
        while not self.gone.is_set() and not self.ended:  # once the response is out, the app may finish its work
            transport = self.request.transport
            if transport is None or transport.is_closing():
                self.client_gone()
                return
            if self.writing_since is not None and loop.time() - self.writing_since > WRITE_TIMEOUT_S:
                transport.abort()  # close() would wait for the unread buffer to drain: for ever
                self.client_gone()
                return
            await asyncio.sleep(DISCONNECT_POLL_S)

    def client_gone(self) -> None:
        if self.gone.is_set():
            return
        self.gone.set()
        self.over.set()
        self.halt.set()
        self.body.put_nowait({"type": "http.disconnect"})  # for an app still waiting on the body

    def _refuse(self, err: OrchestratorError) -> None:
        # the app is cancelled, never handed a body past the bound: its own answer could not be ours
        self.refused = err
        self.halt.set()

    def _abort(self) -> None:
        transport = self.request.transport
        if transport is not None:
            transport.abort()


async def _stop(task: asyncio.Task[None]) -> None:
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=CANCEL_WAIT_S)
    if not task.done():
        log.warning("ASGI app still running %gs after its cancellation: left behind", CANCEL_WAIT_S)
