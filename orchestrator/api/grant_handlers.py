"""The grants' routes: issue, list, read, revoke, and a grant's ledger. Who: an admin for every tenant, an
approver for its own tenants, an agent never (AUTH.FORBIDDEN). Another tenant's grant is RESOURCE.NOT_FOUND,
in the same words as one that does not exist.

The handlers take the service's GrantBook from the app under ``GRANT_BOOK`` (set where the app is built,
``app.build_app``: the very GrantBook the orchestrator reserves with).
"""

from __future__ import annotations

import fnmatch

from aiohttp import web
from pydantic import BaseModel, ValidationError

from orchestrator.api.body import read_json
from orchestrator.api.keys import SERVICE, principal_of
from orchestrator.budgets.book import GrantBook
from orchestrator.domain.errors import Forbidden, InputInvalid, NotFound
from orchestrator.domain.grants import GrantList, GrantRequest, GrantView, RevokeBody
from orchestrator.domain.principal import Principal, Role
from orchestrator.domain.requests import describe_validation_error
from orchestrator.domain.routes import CHARGES_CURSOR, CHARGES_LIMIT, GRANT_STATE, GRANT_TENANT

#: where the app holds the service's GrantBook: ``app[GRANT_BOOK] = GrantBook(service.store)``
GRANT_BOOK = web.AppKey("grant_book", GrantBook)
#: a grant's body is small: terms, conditions, a reason
MAX_GRANT_BODY = 64 * 1024


def grant_book(app: web.Application) -> GrantBook:
    """The service's GrantBook: the one its runs reserve with (``app.build_app`` sets it)."""
    return app[GRANT_BOOK]


def _json(model: BaseModel, status: int = 200) -> web.Response:
    return web.Response(status=status, text=model.model_dump_json(), content_type="application/json")


def _manager(request: web.Request) -> Principal:
    """The caller, when its role may manage grants at all (agents may not)."""
    principal = principal_of(request)
    if principal.role is Role.AGENT:
        raise Forbidden("an agent token cannot manage grants")
    return principal


async def _visible(request: web.Request, principal: Principal) -> GrantView:
    """The grant of the path, when the caller may see it; else NOT_FOUND (another tenant's is never told
    apart from none)."""
    grant_id = request.match_info["id"]
    view = await grant_book(request.app).get(grant_id)
    if view is None or not principal.sees(view.tenant):
        raise NotFound(f"no grant {grant_id}", details={"grant_id": grant_id})
    return view


def _covers_subject(body: GrantRequest, principal: Principal) -> bool:
    """Whether the grant's subject condition lets requests of ``principal``'s own subject through."""
    subjects = body.conditions.subject
    return subjects is None or any(fnmatch.fnmatchcase(principal.subject, glob) for glob in subjects)


def _invalid(err: ValidationError) -> InputInvalid:
    fields = [".".join(map(str, e["loc"])) or "(root)" for e in err.errors(include_input=False)]
    return InputInvalid(describe_validation_error(err), details={"fields": fields})


async def create_grant(request: web.Request) -> web.Response:
    principal = _manager(request)
    service = request.app[SERVICE]
    raw = await read_json(request, MAX_GRANT_BODY, service.limits.body_timeout_s)
    try:
        body = GrantRequest.model_validate(raw)
    except ValidationError as err:
        raise _invalid(err) from None
    if not principal.sees(body.tenant):
        raise Forbidden("this token cannot issue grants for that tenant", details={"fields": ["tenant"]})
    if not principal.every_tenant and not service.manager.allow_self_approval and _covers_subject(body, principal):
        # a grant approves in advance: an approver who may not approve its own asks may not grant them either
        raise Forbidden(
            "a grant that could cover this approver's own requests (name other subjects in conditions.subject)",
            details={"fields": ["conditions.subject"]},
        )
    view = await grant_book(request.app).create(body, created_by=principal.label)
    return _json(view, 201)


async def list_grants(request: web.Request) -> web.Response:
    principal = _manager(request)
    tenants = principal.tenant_filter
    tenant, state = GRANT_TENANT.read(request.query), GRANT_STATE.read(request.query)
    if tenant:
        if not principal.sees(tenant):
            return _json(GrantList(items=[]))  # like a tenant without grants: nothing to tell apart
        tenants = (tenant,)
    items = await grant_book(request.app).list(tenants, state)
    return _json(GrantList(items=items))


async def get_grant(request: web.Request) -> web.Response:
    return _json(await _visible(request, _manager(request)))


async def revoke_grant(request: web.Request) -> web.Response:
    principal = _manager(request)
    service = request.app[SERVICE]
    body = RevokeBody()
    if request.body_exists:
        raw = await read_json(request, MAX_GRANT_BODY, service.limits.body_timeout_s)
        try:
            body = RevokeBody.model_validate(raw)
        except ValidationError as err:
            raise _invalid(err) from None
    view = await _visible(request, principal)
    revoked = await grant_book(request.app).revoke(view.id, by=principal.label, reason=body.reason)
    return _json(revoked)


async def grant_charges(request: web.Request) -> web.Response:
    principal = _manager(request)
    service = request.app[SERVICE]
    limit = CHARGES_LIMIT.read(request.query, service.limits)
    cursor = CHARGES_CURSOR.read(request.query)
    view = await _visible(request, principal)
    page = await grant_book(request.app).charges(view.id, cursor=cursor, limit=limit)
    return _json(page)
