"""The long-running controller that the front doors (HTTP API, and later MCP and CI hooks) share: the hosted
``Service`` (``hosting``), its live executions (``executions``), interactive sessions (``sessions``), their
output logs, workspaces and credentials. The execution path itself is ``orchestrator.pipeline``; what
outlives a restart is ``orchestrator.state``."""
