"""The interactive sessions' routes: open, write, resize, follow, close. No decision is made here: the
tenant and subject are the token's (as for executions), the session is the service's ``Sessions``."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, TypeVar

from aiohttp import web
from pydantic import BaseModel, ValidationError

from orchestrator.api.body import read_json
from orchestrator.api.keys import SERVICE, principal_of
from orchestrator.api.sse import HEARTBEAT_S, EventStream
from orchestrator.domain.errors import Forbidden, InputInvalid, SessionNotFound
from orchestrator.domain.principal import Role
from orchestrator.domain.requests import describe_validation_error
from orchestrator.domain.wire import OutputChunk, ResizeBody, StdinBody
from orchestrator.service.hosting import Service, open_session_for, session_owner, write_stdin_for

M = TypeVar("M", bound=BaseModel)
#: the most one SSE event carries
SSE_CHUNK_BYTES = 64 * 1024


def _answer(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(status=status, text=model.model_dump_json(), content_type="application/json")


async def _body(request: web.Request, service: Service, model: type[M]) -> M:
    raw = await read_json(request, service.limits.max_body_bytes, service.limits.body_timeout_s)
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        fields = [".".join(map(str, e["loc"])) for e in err.errors(include_input=False)]
        raise InputInvalid(describe_validation_error(err), details={"fields": fields}) from None


async def open_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    principal = principal_of(request)
    if principal.role is Role.APPROVER:
        raise Forbidden("an approver token cannot open sessions")
    raw: Any = await read_json(request, service.limits.max_body_bytes, service.limits.body_timeout_s)
    if not isinstance(raw, dict):
        raise InputInvalid("the body must be a JSON object (an exec_command request)", details={"fields": ["(root)"]})
    if raw.get("tool", "exec_command") != "exec_command":
        raise InputInvalid("a session opens with tool exec_command", details={"fields": ["tool"]})
    reply = await open_session_for(service, raw, principal)
    return _answer(reply.to_wire(), 201)


async def write_stdin(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    session_id = request.match_info["id"]
    principal = principal_of(request)
    session_owner(service, session_id, principal)  # before the body is read
    body = await _body(request, service, StdinBody)
    reply = await write_stdin_for(
        service,
        session_id,
        principal,
        chars=body.chars,
        yield_ms=body.yield_time_ms,
        max_bytes=body.max_output_bytes,
    )
    return _answer(reply.to_wire())


async def resize(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    session_id = request.match_info["id"]
    tenant, subject = session_owner(service, session_id, principal_of(request))
    body = await _body(request, service, ResizeBody)
    await service.sessions.resize(session_id, tenant=tenant, subject=subject, rows=body.rows, cols=body.cols)
    return web.Response(status=204)


async def close_session(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    session_id = request.match_info["id"]
    tenant, subject = session_owner(service, session_id, principal_of(request))
    reply = await service.sessions.close(session_id, tenant=tenant, subject=subject)
    return _answer(reply.to_wire())


async def follow_output(request: web.Request) -> web.StreamResponse:
    """SSE: ``output`` events (stdout / stderr chunks, redacted) as the command produces them, then one
    ``end`` event (the session's last answer). The output is taken from the session's buffer: what this
    stream sent, a write_stdin answer does not repeat."""
    service = request.app[SERVICE]
    session_id = request.match_info["id"]
    tenant, subject = session_owner(service, session_id, principal_of(request))
    stream = await EventStream.open(request)
    with contextlib.suppress(ConnectionResetError, TimeoutError, asyncio.CancelledError, SessionNotFound):
        while True:
            reply = await service.sessions.poll(
                session_id, tenant=tenant, subject=subject, yield_ms=int(HEARTBEAT_S * 1000), max_bytes=SSE_CHUNK_BYTES
            )
            for name, data in (("stdout", reply.stdout), ("stderr", reply.stderr)):
                if data:
                    chunk = OutputChunk(stream=name, data=data.decode("utf-8", "replace"))
                    await stream.send("output", chunk.model_dump_json())
            if not reply.running and not reply.pending_bytes:
                await stream.send("end", reply.to_wire().model_dump_json())
                break
            if not (reply.stdout or reply.stderr):
                await stream.comment()
    return stream.response
