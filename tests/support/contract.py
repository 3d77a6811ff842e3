"""The contract tests' harness: a backend, a workspace, and the service's way of driving one execution."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Any

from orchestrator.backends.base import LaunchSpec, SandboxBackend, Workspace
from orchestrator.domain.ids import new_execution_id
from orchestrator.profiles import ResolvedProfile
from tests.support.backend_runs import Ran, drive, resolved


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
            "owner": self.owner,
            "deadline_unix": deadline,
        }
        fields.update(changes)
        return LaunchSpec(**fields)

    async def run(self, spec: LaunchSpec, *, limits: tuple[int, int] | None = None, timeout: float = 120) -> Ran:
        """One sandbox driven as the service does, with its lifecycle events."""
        return await drive(self.backend, spec, limits=limits, timeout=timeout, with_events=True)

    async def left(self) -> list[str]:
        return [s.name for s in await self.backend.list_managed() if s.owner == self.owner]
