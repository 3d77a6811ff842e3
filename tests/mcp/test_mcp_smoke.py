"""Both transports answer tools/list with the same tools, and a run of `true` (the simplest call) works."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.mcp import http_client, stdio_client
from tests.support.service import start_service, token_of, write_config

pytestmark = pytest.mark.integration
TOOLS = ["run", "exec_command", "write_stdin", "read_file", "write_file", "apply_patch"]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_http_and_stdio_list_the_same_tools_and_run(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path)
    harness = await start_service(config)
    try:
        async with http_client(harness.url, token_of("agent-a"), mode=mode) as client:  # type: ignore[arg-type]
            over_http = (await client.list_tools()).tools
            result = await client.call_tool("run", {"argv": ["true"]})
            assert result.is_error is False and result.structured_content["exit_code"] == 0
        async with stdio_client("--config", str(config), mode=mode) as client:  # type: ignore[arg-type]
            over_stdio = (await client.list_tools()).tools
            result = await client.call_tool("run", {"argv": ["true"]})
            assert result.is_error is False and result.structured_content["exit_code"] == 0
    finally:
        await harness.stop()
    assert [t.name for t in over_http] == [t.name for t in over_stdio] == TOOLS
    assert [t.input_schema for t in over_http] == [t.input_schema for t in over_stdio]
