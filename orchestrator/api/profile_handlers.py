"""The profiles' usage routes: the profiles in force, what a profile's runs used and how they spread against
its limits (the profiles page's data), the limits they call for, what a change would have done
(``pipeline.profile_usage``, ``pipeline.profile_distribution``). Who: an admin (every tenant's runs) or an
approver (its own tenants' runs only: another tenant's usage is never part of an answer); an agent never
(AUTH.FORBIDDEN)."""

from __future__ import annotations

import asyncio
import time
from typing import cast

from aiohttp import web
from pydantic import BaseModel, ValidationError

from orchestrator.api.body import read_json
from orchestrator.api.keys import SERVICE, principal_of
from orchestrator.domain.errors import Forbidden, InputInvalid
from orchestrator.domain.principal import Principal, Role
from orchestrator.domain.profile_usage import WhatIfProposal
from orchestrator.domain.requests import describe_validation_error
from orchestrator.domain.routes import MIN_RUNS, USAGE_BY, USAGE_SINCE
from orchestrator.domain.usage import RunUsage, window_start
from orchestrator.pipeline import profile_usage as answers
from orchestrator.pipeline.profile_distribution import distribution, profile_list
from orchestrator.pipeline.profiles_of import Profiles

MAX_WHATIF_BODY = 16 * 1024  # a handful of limits and a node size


def _json(model: BaseModel) -> web.Response:
    return web.Response(text=model.model_dump_json(), content_type="application/json")


def _reader(request: web.Request) -> Principal:
    principal = principal_of(request)
    if principal.role is Role.AGENT:
        raise Forbidden("an agent token cannot read profiles' usage")
    return principal


async def _runs(request: web.Request, principal: Principal, name: str, since: float, until: float) -> list[RunUsage]:
    runs = await request.app[SERVICE].store.usage(profile=name, since=since, until=until)
    return runs if principal.every_tenant else [run for run in runs if principal.sees(run.tenant)]


def _profiles(request: web.Request) -> Profiles:
    runner = request.app[SERVICE].orchestrator.runner
    if runner is None:  # a service always has one: a bug, said as such
        raise RuntimeError("the service has no runner")
    return runner.profiles


async def profile_usage(request: web.Request) -> web.Response:
    principal, name, now = _reader(request), request.match_info["name"], time.time()
    since = window_start(USAGE_SINCE.read(request.query), now)
    by = cast(answers.GroupBy | None, USAGE_BY.read(request.query) or None)  # one of USAGE_BY's enum
    runs = await _runs(request, principal, name, since, now)
    # off the loop: 100,000 runs take a few tenths of a second, which approvals and sessions must not wait for
    profiles = _profiles(request)
    return _json(await asyncio.to_thread(answers.usage, runs, profiles, name, since=since, until=now, by=by))


async def profile_recommendation(request: web.Request) -> web.Response:
    principal, name, now = _reader(request), request.match_info["name"], time.time()
    since = window_start(USAGE_SINCE.read(request.query), now)
    min_runs = MIN_RUNS.read(request.query, request.app[SERVICE].limits)
    runs = await _runs(request, principal, name, since, now)
    profiles = _profiles(request)
    return _json(await asyncio.to_thread(answers.recommendation, runs, profiles, name, min_runs=min_runs))


async def profile_whatif(request: web.Request) -> web.Response:
    principal, name, now = _reader(request), request.match_info["name"], time.time()
    service = request.app[SERVICE]
    raw = await read_json(request, MAX_WHATIF_BODY, service.limits.body_timeout_s)
    try:
        body = WhatIfProposal.model_validate(raw)
    except ValidationError as err:
        fields = [".".join(map(str, e["loc"])) or "(root)" for e in err.errors(include_input=False)]
        raise InputInvalid(describe_validation_error(err), details={"fields": fields}) from None
    runs = await _runs(request, principal, name, window_start(body.since, now), now)
    profiles, proposed = _profiles(request), body.set.given()
    return _json(await asyncio.to_thread(answers.what_if, runs, profiles, name, proposed=proposed, node=body.node))


async def list_profiles(request: web.Request) -> web.Response:
    _reader(request)
    return _json(profile_list(_profiles(request)))


async def profile_distribution(request: web.Request) -> web.Response:
    principal, name, now = _reader(request), request.match_info["name"], time.time()
    since = window_start(USAGE_SINCE.read(request.query), now)
    min_runs = MIN_RUNS.read(request.query, request.app[SERVICE].limits)
    answer = await distribution(
        request.app[SERVICE].store,
        _profiles(request),
        name,
        since=since,
        until=now,
        tenants=principal.tenant_filter,  # an approver: its own tenants' runs only, filtered in the SQL
        min_runs=min_runs,
    )
    return _json(answer)
