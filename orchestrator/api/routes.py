"""The API, as data: every route with its method, path, handler, roles and documentation. The app
registers exactly these, and the OpenAPI document is generated from exactly these."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from pydantic import BaseModel

from orchestrator.api import grant_handlers, handlers, session_handlers
from orchestrator.domain.grants import GrantChargePage, GrantList, GrantRequest, GrantView
from orchestrator.domain.wire import (
    ApprovalAnswer,
    ApprovalDecisionBody,
    ApprovalList,
    EvidencePage,
    ExecutionPage,
    ExecutionView,
    Health,
    Identity,
    ResizeBody,
    SessionAnswer,
    StdinBody,
    SubmitAnswer,
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    where: str  # "query" | "path" | "header"
    description: str
    type: str = "string"
    required: bool = False


@dataclass(frozen=True, slots=True)
class Route:
    method: str
    path: str
    handler: Handler
    summary: str
    auth: bool = True
    body: type[BaseModel] | None = None
    body_is_request: bool = False  # the body is the library's request model (every tool alias)
    response: type[BaseModel] | None = None
    media: str = "application/json"
    success: int = 200
    params: tuple[Param, ...] = ()
    errors: tuple[int, ...] = (400, 401, 403, 429)


_ID = Param("id", "path", "The execution's id (also its approval's id).", required=True)
_SESSION = Param("id", "path", "The session's id (the session_id its opening answered with).", required=True)
_GRANT = Param("id", "path", "The grant's id (grt_...).", required=True)

ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/v1/executions",
        handlers.submit,
        "Submit a request: decided now, run in the background.",
        body_is_request=True,
        response=SubmitAnswer,
        success=202,
        params=(Param("wait", "query", "Seconds to wait for the result (200 when it finished in time).", "number"),),
        errors=(400, 401, 403, 404, 413, 429, 503),
    ),
    Route(
        "GET",
        "/v1/executions",
        handlers.list_executions,
        "List executions (newest first) of the caller's tenants.",
        response=ExecutionPage,
        params=(
            Param("state", "query", "Only executions in this state."),
            Param("tenant", "query", "Only this tenant's."),
            Param("limit", "query", "Page size.", "integer"),
            Param("cursor", "query", "From a previous page's next_cursor."),
        ),
    ),
    Route(
        "GET",
        "/v1/executions/{id}",
        handlers.get_execution,
        "One execution.",
        response=ExecutionView,
        params=(_ID, Param("wait", "query", "Seconds to wait for it to finish.", "number")),
        errors=(401, 404, 429),
    ),
    Route(
        "DELETE",
        "/v1/executions/{id}",
        handlers.cancel_execution,
        "Cancel: the sandbox is killed and removed; the evidence records who asked.",
        response=ExecutionView,
        params=(_ID,),
        errors=(401, 403, 404, 409, 429),
    ),
    Route(
        "GET",
        "/v1/executions/{id}/output",
        handlers.stream_output,
        "Server-Sent Events: `output` chunks (redacted, capped) as produced, then one `result` event."
        " Reconnect with Last-Event-ID to resume.",
        media="text/event-stream",
        params=(_ID, Param("Last-Event-ID", "header", "The id of the last event received.")),
        errors=(401, 404, 429),
    ),
    Route(
        "POST",
        "/v1/sessions",
        session_handlers.open_session,
        "Open an interactive session: an exec_command request, decided like any command, then a long-lived"
        " sandbox; answers with its session_id and the output of its yield_time_ms.",
        body_is_request=True,
        response=SessionAnswer,
        success=201,
        errors=(400, 401, 403, 404, 413, 429, 503),
    ),
    Route(
        "POST",
        "/v1/sessions/{id}/stdin",
        session_handlers.write_stdin,
        "Send characters to the session's stdin (gated and recorded as size and keyed digest; an empty string"
        " only polls); answers with the output produced within yield_time_ms.",
        body=StdinBody,
        response=SessionAnswer,
        params=(_SESSION,),
        errors=(400, 401, 403, 404, 413, 429, 503),
    ),
    Route(
        "POST",
        "/v1/sessions/{id}/resize",
        session_handlers.resize,
        "Set the session terminal's window size (a session opened with tty).",
        body=ResizeBody,
        success=204,
        params=(_SESSION,),
        errors=(400, 401, 404, 429, 503),
    ),
    Route(
        "GET",
        "/v1/sessions/{id}/output",
        session_handlers.follow_output,
        "Server-Sent Events: `output` chunks (redacted) as produced, then one `end` event (the last answer).",
        media="text/event-stream",
        params=(_SESSION,),
        errors=(401, 404, 429),
    ),
    Route(
        "DELETE",
        "/v1/sessions/{id}",
        session_handlers.close_session,
        "Close the session: its sandbox is stopped and removed; answers with its last output and exit.",
        response=SessionAnswer,
        params=(_SESSION,),
        errors=(401, 404, 429),
    ),
    Route(
        "GET",
        "/v1/approvals",
        handlers.list_approvals,
        "Pending approvals of the caller's tenants.",
        response=ApprovalList,
    ),
    Route(
        "POST",
        "/v1/approvals/{id}",
        handlers.decide_approval,
        "Approve, approve for the session, or deny; the approver is the token's subject.",
        body=ApprovalDecisionBody,
        response=ApprovalAnswer,
        params=(_ID,),
        errors=(400, 401, 403, 404, 409, 429),
    ),
    Route(
        "POST",
        "/v1/grants",
        grant_handlers.create_grant,
        "Issue a grant: the tenant's requests matching its conditions run without asking, until its expiry,"
        " within its budgets (admin; approver for its own tenants).",
        body=GrantRequest,
        response=GrantView,
        success=201,
        errors=(400, 401, 403, 413, 429),
    ),
    Route(
        "GET",
        "/v1/grants",
        grant_handlers.list_grants,
        "The grants of the caller's tenants, oldest first (admin; approver).",
        response=GrantList,
        params=(
            Param("state", "query", "Only grants in this state: active, revoked, exhausted, expired."),
            Param("tenant", "query", "Only this tenant's."),
        ),
        errors=(400, 401, 403, 429),
    ),
    Route(
        "GET",
        "/v1/grants/{id}",
        grant_handlers.get_grant,
        "One grant: its terms, state, what it used, what runs under it hold, what is left.",
        response=GrantView,
        params=(_GRANT,),
        errors=(401, 403, 404, 429),
    ),
    Route(
        "DELETE",
        "/v1/grants/{id}",
        grant_handlers.revoke_grant,
        'Revoke a grant: no new run is covered from now on (an optional JSON body {"reason": ...} is kept with'
        " it); revoking again keeps the first revocation.",
        response=GrantView,
        params=(_GRANT,),
        errors=(400, 401, 403, 404, 413, 429),
    ),
    Route(
        "GET",
        "/v1/grants/{id}/charges",
        grant_handlers.grant_charges,
        "A grant's ledger, oldest first: each run it covered, settled (usage charged) or released (nothing).",
        response=GrantChargePage,
        params=(
            _GRANT,
            Param("limit", "query", "Page size.", "integer"),
            Param("cursor", "query", "From a previous page's next_cursor."),
        ),
        errors=(400, 401, 403, 404, 429),
    ),
    Route(
        "GET",
        "/v1/events",
        handlers.stream_events,
        "Server-Sent Events: `execution` (a changed execution) for the caller's tenants.",
        media="text/event-stream",
    ),
    Route(
        "GET",
        "/v1/evidence",
        handlers.evidence_records,
        "The evidence records of one execution (sanitized).",
        response=EvidencePage,
        params=(Param("execution_id", "query", "The execution.", required=True),),
        errors=(400, 401, 404, 429),
    ),
    Route(
        "GET",
        "/v1/evidence/verify",
        handlers.verify_evidence,
        "Verify the whole evidence chain (admin).",
        errors=(401, 403, 429),
    ),
    Route(
        "GET",
        "/v1/whoami",
        handlers.whoami,
        "Who the token is: subject, role, tenants.",
        response=Identity,
        errors=(401, 429),
    ),
    Route("GET", "/v1/openapi.json", handlers.openapi, "This document.", auth=False, errors=()),
    Route("GET", "/healthz", handlers.healthz, "The process answers.", auth=False, response=Health, errors=()),
    Route(
        "GET",
        "/readyz",
        handlers.readyz,
        "Engine reachable, store writable, evidence writable (503 if not).",
        auth=False,
        response=Health,
        errors=(503,),
    ),
    Route("GET", "/metrics", handlers.metrics, "Prometheus metrics.", auth=False, media="text/plain", errors=()),
)
