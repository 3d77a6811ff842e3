"""The tools over Streamable HTTP, served by the controller at ``/mcp`` beside ``/v1``: the SDK's session manager
(an ASGI app, mounted by ``orchestrator.api``). The API's middleware has already checked the bearer token, rate
limit and body size; it puts the token's principal in the ASGI scope's state (``PRINCIPAL_STATE``), and each
call acts for that principal exactly as the HTTP routes do: the token of the request, never of the MCP session."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import Counter
from collections.abc import AsyncIterator, MutableMapping
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, AuthorizationContext, authorization_context
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.requests import ClientDisconnect

from orchestrator.domain.errors import OrchestratorError, SessionLimit
from orchestrator.domain.principal import Principal
from orchestrator.domain.wire import ErrorBody, ErrorResponse
from orchestrator.mcp.controller import ServiceController
from orchestrator.mcp.server import Caller, build_server
from orchestrator.service.hosting import Service

PRINCIPAL_STATE = "sandbox_principal"
#: the API's bridge sets this event in the scope's state once the request's client left (api.asgi.CLIENT_GONE)
CLIENT_GONE_STATE = "client_gone"
SESSION_HEADER = "mcp-session-id"
_VERSION_HEADER = b"mcp-protocol-version"
#: an MCP session nobody used for this long is closed (its calls are executions: they stay on the record)
SESSION_IDLE_S = 30 * 60


class _ClientLeft(logging.Filter):
    """The SDK logs a session's POST whose client left before its body was in as an error, with its traceback:
    any token could fill the log with them (200 a second). A client that leaves is no error of ours."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ClientDisconnect))


_SDK_TRANSPORT_LOG = logging.getLogger("mcp.server.streamable_http")
if not any(isinstance(f, _ClientLeft) for f in _SDK_TRANSPORT_LOG.filters):
    _SDK_TRANSPORT_LOG.addFilter(_ClientLeft())


class McpHttp:
    """One per controller: ``app`` is the ASGI application to mount, ``running()`` its lifetime."""

    def __init__(
        self,
        service: Service,
        *,
        max_body_bytes: int,
        max_sessions: int,
        max_sessions_per_caller: int,
        version: str = "",
    ) -> None:
        self.service = service
        self.max_sessions_per_caller = max_sessions_per_caller
        self._opening: Counter[str] = Counter()  # per identity: requests that may open a session, in flight

        def resolve(ctx: ServerRequestContext[Any, Any]) -> Caller:
            request = ctx.request
            state = getattr(request, "scope", {}).get("state", {})
            principal = state.get(PRINCIPAL_STATE)
            if not isinstance(principal, Principal):  # the API checks every token first: never reached
                raise MCPError(INVALID_REQUEST, "unauthenticated")
            headers = getattr(request, "headers", {})
            gone = state.get(CLIENT_GONE_STATE)
            # An Mcp-Session-Id is the MCP session only where the SDK checked it (a handshake era's session, owned
            # by this caller); the 2026-07-28 envelope has none, and any header there is the client's word
            session = None if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS else headers.get(SESSION_HEADER)
            return Caller(
                ServiceController(service, principal),
                session,
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
        identity that opened it (another token's request for it is answered as if it did not exist), and one
        caller holds at most ``max_sessions_per_caller`` of the manager's sessions (the rest stay for others)."""
        principal = scope.get("state", {}).get(PRINCIPAL_STATE)
        if not isinstance(principal, Principal):  # the API checks every token first: never reached
            await self.manager.handle_request(scope, receive, send)
            return
        # the whole principal (its tenants too: two tokens of one subject name in two tenants are two callers); no
        # secret in it: the SDK compares these names, the token itself was checked by the API
        identity = json.dumps([principal.role.value, sorted(principal.tenants), principal.subject])
        user = AuthenticatedUser(AccessToken(token=identity, client_id=identity, scopes=[], subject=principal.subject))
        scope = {**scope, "user": user}
        if not _may_open_session(scope):
            await self.manager.handle_request(scope, receive, send)
            return
        if self._sessions_of(authorization_context(user)) + self._opening[identity] >= self.max_sessions_per_caller:
            limit = self.max_sessions_per_caller
            await _refuse(
                send,
                SessionLimit(
                    f"this token has {limit} MCP sessions open: end one (DELETE /mcp), or use the 2026-07-28 envelope,"
                    " which holds none",
                    details={"limit": limit},
                ),
            )
            return
        self._opening[identity] += 1  # counted until the SDK has it among its sessions (or refused it)
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            self._opening[identity] -= 1
            if self._opening[identity] <= 0:
                del self._opening[identity]

    def _sessions_of(self, owner: AuthorizationContext) -> int:
        # the SDK keeps each session's owner (its own check of every request against it); 2.x names it so
        owners: dict[str, AuthorizationContext] = self.manager._session_owners
        return sum(1 for held in owners.values() if held == owner)

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


def _may_open_session(scope: MutableMapping[str, Any]) -> bool:
    """Whether the SDK would open a session for this request: a handshake era's request (no version header, or
    one of theirs) without an Mcp-Session-Id."""
    headers = scope.get("headers", ())
    version = next((value for name, value in headers if name == _VERSION_HEADER), None)
    if version is not None and version.decode("latin-1") not in HANDSHAKE_PROTOCOL_VERSIONS:
        return False  # the 2026-07-28 envelope: no session
    return not any(name == SESSION_HEADER.encode() for name, _ in headers)


async def _refuse(send: Any, err: OrchestratorError) -> None:
    body = ErrorResponse(error=ErrorBody.of(err)).model_dump_json(exclude_none=True).encode()
    headers = [(b"content-type", b"application/json; charset=utf-8"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": err.http_status or 500, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
