"""Every error response has one shape (``ErrorResponse``) and the status its code carries; nothing else —
no traceback, no aiohttp page — ever reaches a client."""

from __future__ import annotations

import logging

from aiohttp import web

from orchestrator.domain.errors import InternalError, OrchestratorError
from orchestrator.domain.wire import ErrorBody, ErrorResponse

log = logging.getLogger(__name__)

# aiohttp's own HTTP errors (routing, methods) in our shape
_HTTP_CODES = {404: "RESOURCE.NOT_FOUND", 405: "INPUT.INVALID", 413: "REQUEST.TOO_LARGE", 400: "INPUT.INVALID"}


def error_response(err: OrchestratorError, *, headers: dict[str, str] | None = None) -> web.Response:
    status = err.http_status or 500
    body = ErrorResponse(error=ErrorBody.of(err)).model_dump_json(exclude_none=True)
    return web.Response(status=status, text=body, content_type="application/json", headers=headers)


def http_error_response(exc: web.HTTPException) -> web.Response:
    code = _HTTP_CODES.get(exc.status, "INPUT.INVALID" if exc.status < 500 else "INTERNAL")
    body = ErrorResponse(error=ErrorBody(code=code, message=exc.reason or "error")).model_dump_json(exclude_none=True)
    return web.Response(status=exc.status, text=body, content_type="application/json")


def answer(exc: Exception, request: web.Request) -> web.StreamResponse:
    """The response for what a handler (or the auth check) raised."""
    if isinstance(exc, OrchestratorError):
        return error_response(exc)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            raise exc
        return http_error_response(exc)
    # a bug: logged (type only, never the request), answered as INTERNAL
    log.error("unhandled %s in %s %s", type(exc).__name__, request.method, request.path)
    return error_response(InternalError(f"unexpected {type(exc).__name__}"))
