"""An execution's evidence as an MCP resource (sandbox://executions/{id}/evidence): the caller's own, with the
call's MCP context in its request record; another tenant's is one that does not exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.support.mcp import http_client, stdio_client
from tests.support.service import start_service, token_of, write_config

pytestmark = pytest.mark.integration


def _records(result: object) -> list[dict[str, object]]:
    contents = result.contents  # type: ignore[attr-defined]
    assert len(contents) == 1 and contents[0].mime_type == "application/json"
    records: list[dict[str, object]] = json.loads(contents[0].text)
    return records


async def test_the_evidence_of_a_call_is_a_resource_of_its_caller(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    harness = await start_service(config)
    try:
        async with http_client(harness.url, token_of("agent-a"), mode="legacy") as client:
            templates = (await client.list_resource_templates()).resource_templates
            assert [t.uri_template for t in templates] == ["sandbox://executions/{execution_id}/evidence"]
            result = await client.call_tool("run", {"argv": ["echo", "recorded"]})
            assert result.structured_content is not None
            execution = result.structured_content["execution_id"]
            uri = f"sandbox://executions/{execution}/evidence"
            records = _records(await client.read_resource(uri))
        events = [r["event"] for r in records]
        assert events[0] == "request_received" and events[-1] == "execution_finished", events
        context = records[0]["data"]["sanitized"]["context"]  # type: ignore[index]
        assert context["mcp"]["transport"] == "streamable-http" and context["mcp"]["tool"] == "run"
        assert context["mcp"]["session"] and context["call_id"].startswith(context["mcp"]["session"])
        assert all(r["execution_id"] == execution for r in records)

        async with http_client(harness.url, token_of("agent-b")) as other:
            with pytest.raises(MCPError) as refused:
                await other.read_resource(uri)
            assert "NOT_FOUND" in str(refused.value) or "no execution" in str(refused.value)
            with pytest.raises(MCPError):
                await other.read_resource("sandbox://executions/../../etc/evidence")
    finally:
        await harness.stop()

    async with stdio_client("--config", str(config)) as client:
        result = await client.call_tool("run", {"argv": ["true"]})
        assert result.structured_content is not None
        execution = result.structured_content["execution_id"]
        records = _records(await client.read_resource(f"sandbox://executions/{execution}/evidence"))
        mcp = records[0]["data"]["sanitized"]["context"]["mcp"]  # type: ignore[index]
        assert mcp["transport"] == "stdio" and mcp["session"].startswith("stdio-")
