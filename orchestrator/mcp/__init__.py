"""The MCP front door: the same governed path as the HTTP API, as MCP tools. ``tools`` is the tool table,
``calls`` turns one tool call into executions and sessions (waiting out asks), ``controller`` is what the
calls run on (this process's service, or a controller over HTTP), ``server`` the SDK's server over stdio
and Streamable HTTP. The official SDK (``mcp``) is imported here only."""
