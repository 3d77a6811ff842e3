"""What the app holds (typed keys)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from orchestrator.api.auth import RateLimiter, TokenBook
from orchestrator.api.events import EventHub
from orchestrator.api.metrics import ServiceMetrics
from orchestrator.ci.github.hook import GithubHook
from orchestrator.ci.jobs import CiJobs
from orchestrator.domain.principal import Principal
from orchestrator.service.hosting import Service

SERVICE = web.AppKey("service", Service)
TOKENS = web.AppKey("tokens", TokenBook)
LIMITER = web.AppKey("limiter", RateLimiter)
METRICS = web.AppKey("metrics", ServiceMetrics)
OPENAPI = web.AppKey("openapi", dict[str, Any])
EVENTS = web.AppKey("events", EventHub)
CI_JOBS = web.AppKey("ci_jobs", CiJobs)
GITHUB_HOOK = web.AppKey("github_hook", GithubHook)
PRINCIPAL = web.RequestKey("principal", Principal)  # set by the auth middleware


def principal_of(request: web.Request) -> Principal:
    return request[PRINCIPAL]
