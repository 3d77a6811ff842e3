"""Driving one sandbox through a SandboxBackend as the service does, for the backend tests of every tier
(tests/integration's Docker suite, tests/contract's suite on both backends)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from orchestrator.backends.base import LaunchSpec, LifecycleEvent, SandboxBackend, SandboxHandle, StreamCapture
from orchestrator.profiles import ProfileCaps, ProfileRegistry, ResolvedProfile, resolve


def resolved(name: str = "workspace-write", **caps: Any) -> ResolvedProfile:
    registry = ProfileRegistry()
    return resolve(registry.get(name), caps=ProfileCaps(**caps) if caps else None, registry=registry)


@dataclass(frozen=True)
class Ran:
    handle: SandboxHandle
    exit_code: int
    stdout: StreamCapture
    stderr: StreamCapture
    oom_killed: bool
    events: list[LifecycleEvent] = field(default_factory=list)


async def drive(
    backend: SandboxBackend,
    spec: LaunchSpec,
    *,
    limits: tuple[int, int] | None = None,
    timeout: float = 60,
    with_events: bool = False,
) -> Ran:
    """create → capture ‖ start → wait → inspect → destroy, as the service drives it; ``limits``: the
    output caps (the profile's by default); ``with_events``: the lifecycle events, followed from before
    the create as the service does."""
    events: list[LifecycleEvent] = []
    follower: asyncio.Task[None] | None = None
    if with_events:
        follower = asyncio.create_task(collect_events(backend, spec.execution_id, events))
        await asyncio.sleep(0)  # the iterator exists before create
    out_limit, err_limit = limits or (spec.profile.stdout_max_bytes, spec.profile.stderr_max_bytes)
    handle = await backend.create(spec)
    try:
        async with asyncio.timeout(timeout):
            capture = asyncio.create_task(backend.capture(handle, out_limit, err_limit))
            await backend.start(handle)
            exit_code = await backend.wait(handle)
            stdout, stderr = await capture
            state = await backend.inspect(handle)
    finally:
        await backend.destroy(handle)
    if follower is not None:
        try:
            async with asyncio.timeout(30):
                await follower
        finally:
            follower.cancel()
    return Ran(handle, exit_code, stdout, stderr, state.oom_killed, events)


async def collect_events(
    backend: SandboxBackend, execution_id: str, into: list[LifecycleEvent], until: str = "destroy"
) -> None:
    stream = backend.events(execution_id)
    try:
        async for event in stream:
            into.append(event)
            if event.kind == until:
                return
    finally:
        await stream.aclose()
