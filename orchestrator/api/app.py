"""The aiohttp application: middlewares (errors, auth, rate limit), the route table, start-up and
shutdown of the service it drives."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
import weakref
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Handler

from orchestrator.api.asgi import ASGIBridge
from orchestrator.api.auth import RateLimiter, TokenBook
from orchestrator.api.connections import SERVED, ConnectionGuard, mark_served
from orchestrator.api.errors import answer
from orchestrator.api.events import EventHub
from orchestrator.api.grant_handlers import GRANT_BOOK
from orchestrator.api.keys import CI_JOBS, EVENTS, GITHUB_HOOK, LIMITER, METRICS, OPENAPI, PRINCIPAL, SERVICE, TOKENS
from orchestrator.api.metrics import ServiceMetrics
from orchestrator.api.openapi import build_document
from orchestrator.api.routes import ROUTES
from orchestrator.api.ui import add_ui_routes
from orchestrator.ci.github.hook import GithubHook
from orchestrator.ci.jobs import CiJobs
from orchestrator.domain.wire import ExecutionView
from orchestrator.mcp.http import PRINCIPAL_STATE, McpHttp
from orchestrator.pipeline.profile_usage import limits_in_force
from orchestrator.service.hosting import Service

log = logging.getLogger(__name__)
VERSION = "0.1.0"
MCP_PATH = "/mcp"
#: open MCP sessions at once (Streamable HTTP's Mcp-Session-Id; an idle one closes after 30 minutes), and at most
#: this many of them one caller's (a token's principal): one token cannot take them all from the other tenants
MCP_MAX_SESSIONS = 1000
MCP_MAX_SESSIONS_PER_CALLER = 100
_PUBLIC = frozenset((r.method, r.path) for r in ROUTES if not r.auth)


@web.middleware
async def auth_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Errors in our shape (errors.answer), and the token checked first on every route that needs one."""
    try:
        mark_served(request)
        resource = request.match_info.route.resource
        canonical = resource.canonical if resource is not None else request.path
        if (request.method, canonical) not in _PUBLIC and not request.path.startswith("/ui"):
            principal = request.app[TOKENS].principal(request.headers.get("Authorization"))
            request.app[LIMITER].take(principal.subject)
            request[PRINCIPAL] = principal
        return await handler(request)
    except Exception as exc:
        return answer(exc, request)


def build_app(service: Service) -> web.Application:
    """An app over ``service`` (opened by the caller; the app starts and stops it)."""
    # aiohttp's own body cap is ours plus room: the handlers refuse past the configured one themselves
    app = web.Application(middlewares=[auth_middleware], client_max_size=service.limits.max_body_bytes + 1024)
    metrics = ServiceMetrics()
    hub = EventHub()
    app[SERVICE] = service
    if service.orchestrator.budget_grants is not None:
        app[GRANT_BOOK] = service.orchestrator.budget_grants  # the one the runs reserve with
    app[TOKENS] = TokenBook(service.credentials)
    app[LIMITER] = RateLimiter(service.limits.rate_per_s, service.limits.burst)
    app[METRICS] = metrics
    app[EVENTS] = hub
    app[OPENAPI] = build_document(VERSION, service.limits)
    app[SERVED] = weakref.WeakSet()
    service.orchestrator.telemetry = metrics
    if service.orchestrator.pool is not None:
        metrics.watch_pool(service.orchestrator.pool)
    if service.orchestrator.runner is not None:
        metrics.watch_limits(functools.partial(limits_in_force, service.orchestrator.runner.profiles))

    def changed(view: ExecutionView) -> None:
        metrics.observe(view)
        hub.publish(view)

    service.manager.add_listener(changed)
    runner = service.orchestrator.runner
    assert runner is not None  # a service runs what it accepts
    jobs = CiJobs(service.manager, service.manager.workspaces, runner.profiles, idle_s=service.limits.ci_job_idle_s)
    app[CI_JOBS] = jobs
    app[GITHUB_HOOK] = GithubHook(jobs)
    for route in ROUTES:
        app.router.add_route(route.method, route.path, route.handler)
    add_ui_routes(app)  # the approvals page (public files; its data calls carry the token)
    # the MCP tools over Streamable HTTP: behind the same middleware (token, rate), bodies bounded alike
    mcp = McpHttp(
        service,
        max_body_bytes=service.limits.max_body_bytes,
        max_sessions=MCP_MAX_SESSIONS,
        max_sessions_per_caller=MCP_MAX_SESSIONS_PER_CALLER,
        version=VERSION,
    )
    bridge = ASGIBridge(
        mcp.app,
        max_body_bytes=service.limits.max_body_bytes,
        body_timeout_s=service.limits.body_timeout_s,
        state=lambda request: {PRINCIPAL_STATE: request[PRINCIPAL]},
    )
    app.router.add_route("*", MCP_PATH, bridge.handle)
    app.on_shutdown.append(bridge.on_shutdown)  # an open MCP event stream ends now, not after aiohttp's wait

    async def lifecycle(app: web.Application) -> object:
        await service.start()
        await jobs.recover()  # the CI jobs a previous controller left open (after the executions' recovery)
        expiry = asyncio.create_task(jobs.expire_forever(), name="ci-job-expiry")
        async with mcp.running():  # the MCP sessions' task group: left in the task that entered it
            yield
        expiry.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await expiry
        await service.close()

    async def end_streams(app: web.Application) -> None:
        hub.close()  # before aiohttp waits for the handlers still running: the event streams end now

    app.on_shutdown.append(end_streams)
    app.cleanup_ctx.append(lifecycle)  # type: ignore[arg-type]
    return app


async def start_site(service: Service, host: str, port: int) -> tuple[web.AppRunner, ConnectionGuard]:
    """The app over ``service``, listening on ``host:port``, its connections guarded. Stop with
    ``await guard.stop(); await runner.cleanup()``."""
    limits = service.limits
    runner = web.AppRunner(
        build_app(service),
        access_log=None,
        handle_signals=False,
        shutdown_timeout=10,
        keepalive_timeout=limits.header_timeout_s,  # an idle kept-alive connection closes as soon
    )
    await runner.setup()
    await web.TCPSite(runner, host, port, backlog=1024).start()
    guard = ConnectionGuard(runner, limits.header_timeout_s, limits.max_pending_connections)
    guard.start()
    return runner, guard


def serve(config: Path | None, host: str, port: int) -> int:
    """Run until SIGTERM/SIGINT. Returns the exit code."""

    async def main() -> None:
        service = await Service.open(config)
        runner, guard = await start_site(service, host, port)
        # what start-up built lives as long as the service: the collector need not walk it again
        gc.freeze()
        # a normal start is news, not a warning: INFO, which `sandboxctl serve` shows on the console
        log.info("serving on http://%s:%d (recovered: %s)", host, port, service.recovered)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await guard.stop()
        await runner.cleanup()

    asyncio.run(main())
    return 0
