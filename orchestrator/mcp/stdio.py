"""``sandboxctl mcp``: the MCP server over stdio, for a host that starts it (an IDE, a local agent). Without a
URL it hosts the controller's service in this process with the local config (asks wait in its approval queue:
`sandboxctl approvals` or /ui of a `serve` on the same config decide them); with a URL it forwards every call
to that controller with the token. stdout is the protocol's: everything else goes to stderr."""

from __future__ import annotations

import getpass
import uuid
from pathlib import Path
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.server.stdio import stdio_server

from orchestrator.client.aio import AsyncClient
from orchestrator.domain.principal import Principal, Role
from orchestrator.mcp.controller import Controller, RemoteController, ServiceController
from orchestrator.mcp.server import Caller, build_server
from orchestrator.service.hosting import Service

LOCAL_TENANT = "default"


def local_principal() -> Principal:
    """Whoever started the process, acting for the default tenant (as `sandboxctl run` does)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    return Principal(subject=f"mcp-stdio:{user}"[:256], role=Role.AGENT, tenants=frozenset({LOCAL_TENANT}))


async def _serve(controller: Controller) -> None:
    session = f"stdio-{uuid.uuid4().hex[:16]}"  # this process is the MCP session

    def resolve(ctx: ServerRequestContext[Any, Any]) -> Caller:
        return Caller(controller, session)  # the host closing stdio ends the server: its calls are cancelled

    server = build_server("stdio", resolve)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


async def _main(config: Path | None, url: str | None, token: str | None) -> None:
    if url is not None:
        assert token is not None
        async with AsyncClient(url, token) as client:
            await _serve(RemoteController(client))
        return
    service = await Service.open(config)
    try:
        await service.start()
        await _serve(ServiceController(service, local_principal()))
    finally:
        await service.close()


def serve_stdio(config: Path | None, url: str | None = None, token: str | None = None) -> int:
    """Serve until the host closes stdin. Returns the exit code."""
    anyio.run(_main, config, url, token)
    return 0
