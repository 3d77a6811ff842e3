"""The tools over Streamable HTTP, served by the controller at ``/mcp`` beside ``/v1``: the SDK's session manager
(an ASGI app, mounted by ``orchestrator.api``). The API's middleware has already checked the bearer token, rate
limit and body size; it puts the token's principal in the ASGI scope's state (``PRINCIPAL_STATE``), and each
call acts for that principal exactly as the HTTP routes do: the token of the request, never of the MCP session."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST

from orchestrator.domain.principal import Principal
from orchestrator.mcp.controller import ServiceController
from orchestrator.mcp.server import Caller, build_server
from orchestrator.service.hosting import Service

PRINCIPAL_STATE = "sandbox_principal"
#: the API's bridge sets this event in the scope's state once the request's client left (api.asgi.CLIENT_GONE)
CLIENT_GONE_STATE = "client_gone"
SESSION_HEADER = "mcp-session-id"
#: an MCP session nobody used for this long is closed (its calls are executions: they stay on the record)
SESSION_IDLE_S = 30 * 60


class McpHttp:
    """One per controller: ``app`` is the ASGI application to mount, ``running()`` its lifetime."""

    def __init__(self, service: Service, *, max_body_bytes: int, max_sessions: int, version: str = "") -> None:
        self.service = service

        def resolve(ctx: ServerRequestContext[Any, Any]) -> Caller:
            request = ctx.request
            state = getattr(request, "scope", {}).get("state", {})
            principal = state.get(PRINCIPAL_STATE)
            if not isinstance(principal, Principal):  # the API checks every token first: never reached
                raise MCPError(INVALID_REQUEST, "unauthenticated")
            headers = getattr(request, "headers", {})
            gone = state.get(CLIENT_GONE_STATE)
            return Caller(
                ServiceController(service, principal),
                headers.get(SESSION_HEADER),
                gone if isinstance(gone, asyncio.Event) else None,
            )

        self.server = build_server("streamable-http", resolve, version=version)
        # DNS-rebinding protection is for servers without authentication; every request here carries a token
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            stateless=False,
            max_request_body_size=max_body_bytes,
            session_idle_timeout=SESSION_IDLE_S,
            max_sessions=max_sessions,
        )

    async def app(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        """The ASGI app: the SDK's, told who the caller is, so that an MCP session is only ever used with the
        identity that opened it (another token's request for it is answered as if it did not exist)."""
        principal = scope.get("state", {}).get(PRINCIPAL_STATE)
        if isinstance(principal, Principal):
            identity = f"{principal.role.value}:{principal.subject}"
            # no secret in it: the SDK compares these names, the token itself was checked by the API
            token = AccessToken(token=identity, client_id=identity, scopes=[], subject=principal.subject)
            scope = {**scope, "user": AuthenticatedUser(token)}
        await self.manager.handle_request(scope, receive, send)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The manager's task group (every MCP session's tasks) held by a task of its own: an anyio task group
        must be left in the task that entered it, and an aiohttp app's start and cleanup may run in two."""
        ready, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with self.manager.run():
                ready.set()
                await stop.wait()

        holder = asyncio.create_task(hold(), name="mcp-sessions")
        started = asyncio.ensure_future(ready.wait())
        await asyncio.wait({started, holder}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if holder.done():
            holder.result()  # it failed to start: raise why
        try:
            yield
        finally:
            stop.set()
            await holder
