"""Where the service's executions run: ``<root>/<tenant>/<session or "default">``, one directory per
tenant and agent session, created on first use and owned by the profiles' user (the sandbox writes as
that user). Tenant and session names become directory names: only a safe alphabet gets there."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

from orchestrator.domain.errors import ConfigInvalid, InputInvalid

#: what a named workspace (a tenant, a session) may be called: one path segment, never "." or ".."
WORKSPACE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
DEFAULT_SESSION = "default"


class Workspaces:
    def __init__(self, root: Path, owner: tuple[int, int]) -> None:
        self.root = root
        self.owner = owner

    def check_owner(self) -> None:
        """CONFIG.INVALID at start-up when this process could not give new workspaces to ``owner``: only
        root can give a directory away (the sandbox writes as the profiles' user, so it must own them)."""
        uid, gid = self.owner
        if os.geteuid() == 0 or (uid == os.geteuid() and gid in {os.getegid(), *os.getgroups()}):
            return
        raise ConfigInvalid(
            f"service.workspace_owner: this service runs as uid {os.geteuid()} and cannot give workspaces to"
            f" {uid}:{gid}; run it as {uid}:{gid} (the profiles' user) or as root",
            details={"fields": ["service.workspace_owner"]},
        )

    def path(self, tenant: str, session: str | None) -> Path:
        for name, value in (("tenant", tenant), ("session_id", session)):
            if value is not None and (not isinstance(value, str) or not WORKSPACE_NAME.fullmatch(value)):
                raise InputInvalid(
                    f"{name}: with the service, 1-128 of A-Z a-z 0-9 . _ - (it names a workspace directory)",
                    details={"fields": [name]},
                )
        return self.root / tenant / (session or DEFAULT_SESSION)

    async def ensure(self, tenant: str, session: Any) -> Path:
        path = self.path(tenant, session)
        if not path.is_dir():
            await asyncio.to_thread(self._create, path)
        return path

    def _create(self, path: Path) -> None:
        for directory in (self.root, path.parent):
            directory.mkdir(mode=0o711, parents=True, exist_ok=True)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            return
        if os.stat(path).st_uid != self.owner[0] or os.stat(path).st_gid != self.owner[1]:
            os.chown(path, *self.owner)
