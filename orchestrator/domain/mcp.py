"""The MCP call a request came from: which transport, which MCP session, which client. Set by the MCP
server from the connection (never from the tool's arguments), recorded with the request's context."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

McpTransport = Literal["stdio", "streamable-http"]
_Label = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[\x20-\x7e]+$")]


class McpContext(BaseModel):
    """Recorded in the evidence (``request_received``'s context) so an MCP call can be told from any other."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    transport: McpTransport = Field(description="stdio (a host started `sandboxctl mcp`) or streamable-http (/mcp).")
    session: _Label | None = Field(
        default=None,
        description="The MCP session: Streamable HTTP's Mcp-Session-Id, or the stdio server process's own id.",
    )
    client: _Label | None = Field(
        default=None, description="The MCP client as it named itself (clientInfo name/version), printable ASCII."
    )
    tool: _Label | None = Field(default=None, description="The MCP tool called (run, exec_command, read_file …).")
