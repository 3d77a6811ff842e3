"""Sandbox orchestrator: governed, contained execution.

The public surface, imported lazily (the CLI's start-up imports none of it)::

    from orchestrator import open_orchestrator, OrchestratorError
    orch = await open_orchestrator("policy.yaml")
    result = await orch.execute({"tool": "shell", "command": ["pytest", "-q"]}, workspace=Path("."))

For the HTTP service's client: ``from orchestrator.client import Client, AsyncClient``.
"""

from __future__ import annotations

import importlib

# not `from typing import TYPE_CHECKING`: `sandboxctl` imports this package first, and typing costs
# every start (type checkers treat any TYPE_CHECKING name as true)
TYPE_CHECKING = False

# name -> module that defines it
_EXPORTS: dict[str, str] = {
    "open_orchestrator": "orchestrator.pipeline.factory",
    "Orchestrator": "orchestrator.pipeline.orchestrator",
    "ExecutionResult": "orchestrator.pipeline.orchestrator",
    "Authorization": "orchestrator.pipeline.orchestrator",
    "parse_request": "orchestrator.domain.requests",
    "Request": "orchestrator.domain.requests",
    "ShellRequest": "orchestrator.domain.requests",
    "ShellExecRequest": "orchestrator.domain.requests",
    "ShellCommandRequest": "orchestrator.domain.requests",
    "ExecCommandRequest": "orchestrator.domain.requests",
    "WriteStdinRequest": "orchestrator.domain.requests",
    "FileWriteRequest": "orchestrator.domain.requests",
    "ApplyPatchRequest": "orchestrator.domain.requests",
    "SkillExecRequest": "orchestrator.domain.requests",
    "ScriptFile": "orchestrator.domain.requests",
    "CiContext": "orchestrator.domain.ci",
    "RunResult": "orchestrator.domain.wire",
    "ExecutionView": "orchestrator.domain.wire",
    "ExecutionState": "orchestrator.domain.wire",
    "OrchestratorError": "orchestrator.domain.errors",
    "InputInvalid": "orchestrator.domain.errors",
    "PolicyDenied": "orchestrator.domain.errors",
    "ApprovalDenied": "orchestrator.domain.errors",
    "ApprovalTimeout": "orchestrator.domain.errors",
    "SandboxUnavailable": "orchestrator.domain.errors",
}

__all__ = [
    "ApplyPatchRequest",
    "ApprovalDenied",
    "ApprovalTimeout",
    "Authorization",
    "CiContext",
    "ExecCommandRequest",
    "ExecutionResult",
    "ExecutionState",
    "ExecutionView",
    "FileWriteRequest",
    "InputInvalid",
    "Orchestrator",
    "OrchestratorError",
    "PolicyDenied",
    "Request",
    "RunResult",
    "SandboxUnavailable",
    "ScriptFile",
    "ShellCommandRequest",
    "ShellExecRequest",
    "ShellRequest",
    "SkillExecRequest",
    "WriteStdinRequest",
    "open_orchestrator",
    "parse_request",
]

if TYPE_CHECKING:
    from typing import Any

    from orchestrator.domain.ci import CiContext
    from orchestrator.domain.errors import (
        ApprovalDenied,
        ApprovalTimeout,
        InputInvalid,
        OrchestratorError,
        PolicyDenied,
        SandboxUnavailable,
    )
    from orchestrator.domain.requests import (
        ApplyPatchRequest,
        ExecCommandRequest,
        FileWriteRequest,
        Request,
        ScriptFile,
        ShellCommandRequest,
        ShellExecRequest,
        ShellRequest,
        SkillExecRequest,
        WriteStdinRequest,
        parse_request,
    )
    from orchestrator.domain.wire import ExecutionState, ExecutionView, RunResult
    from orchestrator.pipeline.factory import open_orchestrator
    from orchestrator.pipeline.orchestrator import Authorization, ExecutionResult, Orchestrator


def __getattr__(name: str) -> Any:  # PEP 562: the first use imports the module
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
