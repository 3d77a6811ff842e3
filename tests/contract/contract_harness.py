"""The contract tests' harness: a backend, a workspace, and the service's way of driving one execution."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.backends.base import (
    LABEL_DEADLINE,
    LABEL_EXECUTION_ID,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_PROFILE_HASH,
    MANAGED_BY,
    LaunchSpec,
    LifecycleEvent,
    SandboxBackend,
    SandboxHandle,
    StreamCapture,
    Workspace,
)
from orchestrator.domain.ids import new_execution_id
from orchestrator.profiles import ProfileCaps, ProfileRegistry, ResolvedProfile, resolve

SANDBOX_UID = 1000


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


class Harness:
    def __init__(self, kind: str, backend: SandboxBackend, workspace: Path) -> None:
        self.kind = kind
        self.backend = backend
        self.workspace = workspace
        self.owner = f"pytest-contract:{os.getpid()}:{uuid.uuid4().hex[:12]}"

    def spec(self, argv: list[str], *, profile: ResolvedProfile | None = None, **changes: Any) -> LaunchSpec:
        profile = profile or resolved()
        execution_id = new_execution_id()
        deadline = time.time() + profile.wall_timeout_s + 30
        fields: dict[str, Any] = {
            "execution_id": execution_id,
            "argv": tuple(argv),
            "profile": profile,
            "workspace": Workspace(str(self.workspace)),
            "workdir": profile.workspace.container_path,
            "env": dict(profile.env),
            "labels": {
                LABEL_MANAGED_BY: MANAGED_BY,
                LABEL_EXECUTION_ID: execution_id,
                LABEL_OWNER: self.owner,
                LABEL_DEADLINE: f"{deadline:.0f}",
                LABEL_PROFILE_HASH: profile.profile_hash,
            },
            "deadline_unix": deadline,
        }
        fields.update(changes)
        return LaunchSpec(**fields)

    async def run(self, spec: LaunchSpec, *, limits: tuple[int, int] | None = None, timeout: float = 120) -> Ran:
        """create → capture ‖ start → wait → inspect → destroy, with the lifecycle events, as the service."""
        events: list[LifecycleEvent] = []
        follower = asyncio.create_task(collect(self.backend, spec.execution_id, events))
        await asyncio.sleep(0)
        out_limit, err_limit = limits or (spec.profile.stdout_max_bytes, spec.profile.stderr_max_bytes)
        handle = await self.backend.create(spec)
        try:
            async with asyncio.timeout(timeout):
                capture = asyncio.create_task(self.backend.capture(handle, out_limit, err_limit))
                await self.backend.start(handle)
                exit_code = await self.backend.wait(handle)
                stdout, stderr = await capture
                state = await self.backend.inspect(handle)
        finally:
            await self.backend.destroy(handle)
        try:
            async with asyncio.timeout(30):
                await follower
        finally:
            follower.cancel()
        return Ran(handle, exit_code, stdout, stderr, state.oom_killed, events)

    async def left(self) -> list[str]:
        return [s.name for s in await self.backend.list_managed() if s.owner == self.owner]


async def collect(backend: SandboxBackend, execution_id: str, into: list[LifecycleEvent]) -> None:
    stream = backend.events(execution_id)
    try:
        async for event in stream:
            into.append(event)
            if event.kind == "destroy":
                return
    finally:
        await stream.aclose()
