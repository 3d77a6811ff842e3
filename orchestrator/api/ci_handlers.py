"""CI routes: jobs (``ci.jobs``: open, step, close) and the GitHub container hook's one call per command, whose
answer streams as NDJSON (one JSON object a line: the step's output as produced, then its end)."""

from __future__ import annotations

import asyncio
import contextlib
import json

from aiohttp import web
from pydantic import ValidationError

from orchestrator.api.body import read_json
from orchestrator.api.keys import CI_JOBS, GITHUB_HOOK, SERVICE, principal_of
from orchestrator.ci.github.protocol import HookCall, refusal
from orchestrator.domain.routes import WAIT
from orchestrator.domain.wire import SubmitAnswer

NDJSON = "application/x-ndjson"
#: how often a silent step's stream carries an empty line ({}), so that a hook gone away is noticed
HEARTBEAT_S = 5.0


async def open_ci_job(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    raw = await read_json(request, service.limits.max_body_bytes, service.limits.body_timeout_s)
    view = await request.app[CI_JOBS].open(raw, principal_of(request))
    return web.Response(status=201, text=view.model_dump_json(), content_type="application/json")


async def get_ci_job(request: web.Request) -> web.Response:
    view = request.app[CI_JOBS].get(request.match_info["id"], principal_of(request))
    return web.Response(text=view.model_dump_json(), content_type="application/json")


async def run_ci_step(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    wait = WAIT.read(request.query, service.limits)
    raw = await read_json(request, service.limits.max_body_bytes, service.limits.body_timeout_s)
    view = await request.app[CI_JOBS].step(request.match_info["id"], raw, principal_of(request), wait_s=wait)
    answer = SubmitAnswer(execution=view)
    return web.Response(
        status=200 if view.state.final else 202, text=answer.model_dump_json(), content_type="application/json"
    )


async def close_ci_job(request: web.Request) -> web.Response:
    view = await request.app[CI_JOBS].close(request.match_info["id"], principal_of(request))
    return web.Response(text=view.model_dump_json(), content_type="application/json")


async def github_hook(request: web.Request) -> web.StreamResponse:
    """Refusals before anything ran answer as errors (the hook prints them and exits 1); once a step runs, its
    output and end stream. The runner's hook going away (its timeout's SIGINT) cancels the step."""
    service = request.app[SERVICE]
    raw = await read_json(request, service.limits.max_body_bytes, service.limits.body_timeout_s)
    try:
        call = HookCall.model_validate(raw)
    except ValidationError as err:
        raise refusal(err) from None
    events = request.app[GITHUB_HOOK].invoke(call, principal_of(request))
    first = await anext(events)  # a refusal raises here, before the answer starts
    response = web.StreamResponse(headers={"Content-Type": NDJSON, "Cache-Control": "no-store"})
    await response.prepare(request)
    queue: asyncio.Queue[dict[str, object] | None] = asyncio.Queue()

    async def pump() -> None:
        try:
            async for event in events:
                await queue.put(event)
        finally:
            await queue.put(None)

    task = asyncio.create_task(pump(), name="github-hook-events")
    try:
        with contextlib.suppress(ConnectionResetError):
            await response.write(json.dumps(first).encode() + b"\n")
            while True:
                try:
                    async with asyncio.timeout(HEARTBEAT_S):
                        event = await queue.get()
                except TimeoutError:
                    # a line the hook skips: writing it is how a hook that went away is noticed while a step
                    # is silent (its step is then cancelled, below)
                    await response.write(b"{}\n")
                    continue
                if event is None:
                    break
                await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
    finally:
        task.cancel()  # a step still running is cancelled by its follower (GithubHook.follow)
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return response
