"""The route handlers: parse, call the service, answer with a wire model. No decision is made here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from aiohttp import web
from pydantic import BaseModel, ValidationError

from orchestrator.api.body import read_json
from orchestrator.api.keys import EVENTS, METRICS, OPENAPI, SERVICE, principal_of
from orchestrator.api.sse import HEARTBEAT_S, EventStream
from orchestrator.domain.decisions import ApprovalOutcome
from orchestrator.domain.errors import Forbidden, InputInvalid, NotFound
from orchestrator.domain.principal import Role
from orchestrator.domain.requests import describe_validation_error
from orchestrator.domain.routes import (
    EVIDENCE_EXECUTION,
    EXECUTION_CURSOR,
    EXECUTION_STATE,
    EXECUTION_TENANT,
    LAST_EVENT_ID,
    PAGE_LIMIT,
    WAIT,
)
from orchestrator.domain.wire import (
    ApprovalAnswer,
    ApprovalDecisionBody,
    ApprovalList,
    EvidencePage,
    Health,
    Identity,
    SubmitAnswer,
)
from orchestrator.service import hosting

_OUTCOMES = {
    "approve": ApprovalOutcome.APPROVED,
    "approve_for_session": ApprovalOutcome.APPROVED_FOR_SESSION,
    "deny": ApprovalOutcome.DENIED,
}

#: Last-Event-ID "end": everything was received, only the result again
_AFTER_END = 1 << 62


def _json(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(status=status, text=model.model_dump_json(), content_type="application/json")


# -- executions ------------------------------------------------------------------------------------
async def submit(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    wait = WAIT.read(request.query, service.limits)
    raw = await read_json(request, service.limits.max_body_bytes, service.limits.body_timeout_s)
    view = await service.manager.submit(raw, principal_of(request), wait_s=wait)
    return _json(SubmitAnswer(execution=view), 200 if view.state.final else 202)


async def get_execution(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    wait = WAIT.read(request.query, service.limits)
    ident, principal = request.match_info["id"], principal_of(request)
    if wait:
        return _json(await service.manager.wait(ident, principal, wait))
    return _json(await service.manager.get(ident, principal))


async def list_executions(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    query = request.query
    limit = PAGE_LIMIT.read(query, service.limits)
    state, tenant, cursor = EXECUTION_STATE.read(query), EXECUTION_TENANT.read(query), EXECUTION_CURSOR.read(query)
    page = await service.manager.page(principal_of(request), state=state, tenant=tenant, limit=limit, cursor=cursor)
    return _json(page)


async def cancel_execution(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    return _json(await service.manager.cancel(request.match_info["id"], principal_of(request)))


async def stream_output(request: web.Request) -> web.StreamResponse:
    service = request.app[SERVICE]
    ident, principal = request.match_info["id"], principal_of(request)
    last = LAST_EVENT_ID.read(request.headers)
    after = -1 if last is None else _AFTER_END if last == "end" else int(last)
    await service.manager.get(ident, principal)  # 404 before the stream opens
    stream = await EventStream.open(request)
    with contextlib.suppress(ConnectionResetError, TimeoutError, asyncio.CancelledError):
        async for index, item in service.manager.output(ident, principal, after):
            if item is None:  # the ids a reconnecting reader holds no longer apply: the whole output again
                await stream.send("reload", "{}")
            elif index < 0:
                await stream.send("result", item.model_dump_json(), "end")
            else:
                await stream.send("output", item.model_dump_json(), str(index))
    return stream.response


async def stream_events(request: web.Request) -> web.StreamResponse:
    hub = request.app[EVENTS]
    listener = hub.join(principal_of(request))
    try:
        stream = await EventStream.open(request)
        with contextlib.suppress(ConnectionResetError, TimeoutError, asyncio.CancelledError):
            await stream.comment("connected")
            while True:
                try:
                    async with asyncio.timeout(HEARTBEAT_S):
                        encoded = await listener.queue.get()
                except TimeoutError:
                    await stream.comment()
                    continue
                if listener.overflowed:  # it fell behind: reload rather than trust a gap
                    listener.overflowed = False
                    await stream.send("reload", "{}")
                if encoded is None:  # the service is shutting down (EventHub.close)
                    break
                await stream.send("execution", encoded)
        return stream.response
    finally:
        hub.listeners.discard(listener)


# -- approvals -------------------------------------------------------------------------------------
async def list_approvals(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    principal = principal_of(request)
    if principal.role is Role.AGENT:
        raise Forbidden("an agent token cannot list approvals")
    pending = await asyncio.to_thread(service.store.approvals.pending)
    items = []
    now = time.time()
    for ask in pending:
        if not principal.sees(ask.tenant):
            continue
        stored = await service.store.get(ask.id)
        items.append(ask.view(stored.view if stored is not None else None, now=now))
    return _json(ApprovalList(items=items))


async def decide_approval(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    principal = principal_of(request)
    ident = request.match_info["id"]
    raw = await read_json(request, 64 * 1024, service.limits.body_timeout_s)
    try:
        body = ApprovalDecisionBody.model_validate(raw)
    except ValidationError as err:
        fields = [".".join(map(str, e["loc"])) for e in err.errors(include_input=False)]
        raise InputInvalid(describe_validation_error(err), details={"fields": fields}) from None
    if principal.role is Role.AGENT:
        raise Forbidden("an agent token cannot decide approvals")
    ask = await asyncio.to_thread(service.store.approvals.pending_one, ident)
    if ask is None:
        stored = await service.store.get(ident)
        if stored is None or not principal.sees(stored.view.get("tenant", "")):
            raise NotFound("no such pending approval")  # the same words as for another tenant's
        resolution = await asyncio.to_thread(service.store.approvals.resolution, ident)
        raise service.manager.not_pending(ident, resolution.state, resolution.result)
    service.manager.check_may_decide(principal, ask.tenant, ask.subject)
    resolution = await asyncio.to_thread(
        service.store.approvals.decide, ident, _OUTCOMES[body.decision], principal.label, body.reason
    )
    provider = service.orchestrator.approvals
    wake = getattr(provider, "wake", None)
    if callable(wake):
        wake(ident)
    if not resolution.won or resolution.result is None:
        raise service.manager.not_pending(ident, resolution.state, resolution.result)
    kept = resolution.result
    return _json(
        ApprovalAnswer(approval_id=ident, outcome=kept.outcome.value, approver=kept.approver, reason=kept.reason)
    )


# -- evidence --------------------------------------------------------------------------------------
async def evidence_records(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    ident = EVIDENCE_EXECUTION.need(request.query)
    records = await hosting.evidence_of(service, ident, principal_of(request))
    return _json(EvidencePage(records=records))


async def verify_evidence(request: web.Request) -> web.Response:
    if principal_of(request).role is not Role.ADMIN:
        raise Forbidden("verifying the whole evidence chain takes an admin token")
    report = await hosting.verify_evidence(request.app[SERVICE])
    return web.json_response(report)


async def whoami(request: web.Request) -> web.Response:
    principal = principal_of(request)
    return _json(Identity(subject=principal.subject, role=principal.role.value, tenants=sorted(principal.tenants)))


# -- operations ------------------------------------------------------------------------------------
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPENAPI], dumps=lambda d: json.dumps(d, indent=1))


async def healthz(request: web.Request) -> web.Response:
    return _json(Health(status="ok"))


async def readyz(request: web.Request) -> web.Response:
    checks = await request.app[SERVICE].readiness()
    ok = all(v == "ok" for v in checks.values())
    return _json(Health(status="ok" if ok else "unavailable", checks=checks), 200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=request.app[METRICS].render(), content_type="text/plain", charset="utf-8")
