"""The official MCP SDK's client against our MCP server, over both transports, as an agent host connects: over
Streamable HTTP to a running service's /mcp with a bearer token, or over stdio to `sandboxctl mcp` (in process
with a config, or forwarding to a service with --url). The tests judge tool results as a model would see them."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from orchestrator.backends.docker.endpoint import discover_endpoint

SANDBOXCTL = str(Path(sys.executable).with_name("sandboxctl"))
Mode = Literal["auto", "legacy"]  # auto: the 2026-07-28 envelope (server/discover); legacy: the initialize handshake


@contextlib.asynccontextmanager
async def http_client(url: str, token: str | None, *, mode: Mode = "auto", **options: Any) -> AsyncIterator[Client]:
    """The SDK's client on ``url``/mcp with ``Authorization: Bearer token`` (none when ``token`` is None)."""
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    http = create_mcp_http_client(headers=headers)
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode, **options) as client:
        yield client


def stdio_parameters(*args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    """`sandboxctl mcp ARGS` as a host starts it, with the engine's environment."""
    base = {**os.environ, "DOCKER_HOST": discover_endpoint().url}
    return StdioServerParameters(command=SANDBOXCTL, args=["mcp", *args], env={**base, **(env or {})})


@contextlib.asynccontextmanager
async def stdio_client(*args: str, mode: Mode = "auto", **options: Any) -> AsyncIterator[Client]:
    async with Client(stdio_parameters(*args), mode=mode, **options) as client:
        yield client


def text_of(result: Any) -> str:
    """The text a model reads of a tool result."""
    return "".join(getattr(part, "text", "") for part in result.content)
