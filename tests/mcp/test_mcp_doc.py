"""docs/mcp.md's host registrations, as written: each block's command line or URL and headers, with the doc's
addresses and paths replaced by this test's own, connects the SDK's client and runs a tool."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.support.mcp import SANDBOXCTL, stdio_parameters
from tests.support.paths import ROOT
from tests.support.service import start_service, token_of, write_config

pytestmark = pytest.mark.integration
DOC = (ROOT / "docs" / "mcp.md").read_text()
DOC_URL = "http://sandbox-orchestrator:8700"


def block(name: str) -> dict[str, Any]:
    found = re.search(rf"^```json {re.escape(name)}\n(.*?)^```", DOC, re.M | re.S)
    assert found is not None, f"docs/mcp.md: no ```json {name} block"
    server: dict[str, Any] = json.loads(found.group(1))["mcpServers"]["sandbox"]
    return server


async def _runs_true(client: Client) -> None:
    assert {t.name for t in (await client.list_tools()).tools} >= {"run", "exec_command", "write_stdin"}
    result = await client.call_tool("run", {"argv": ["true"]})
    assert result.is_error is False and result.structured_content is not None
    assert result.structured_content["exit_code"] == 0


async def test_the_documented_host_registrations_connect(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    harness = await start_service(config)
    token_file = tmp_path / "token"
    token_file.write_text(token_of("agent-a"))
    try:
        local = block("mcp-stdio.json")
        assert local["command"] == "sandboxctl" and local["args"][:2] == ["mcp", "--config"]
        args = [str(config) if a.endswith("config.yaml") else a for a in local["args"]]
        env = stdio_parameters().env
        async with Client(StdioServerParameters(command=SANDBOXCTL, args=args, env=env)) as client:
            await _runs_true(client)

        forward = block("mcp-stdio-forward.json")
        args = [a.replace(DOC_URL, harness.url) for a in forward["args"]]
        args = [str(token_file) if a.startswith("/var/run/secrets") else a for a in args]
        assert args != forward["args"] and "--token-file" in args
        async with Client(StdioServerParameters(command=SANDBOXCTL, args=args, env=env)) as client:
            await _runs_true(client)

        http = block("mcp-http.json")
        headers = {k: v.replace("${SANDBOX_TOKEN}", token_of("agent-a")) for k, v in http["headers"].items()}
        url = http["url"].replace(DOC_URL, harness.url)
        transport = create_mcp_http_client(headers=headers)
        async with transport, Client(streamable_http_client(url, http_client=transport)) as client:
            await _runs_true(client)
    finally:
        await harness.stop()
