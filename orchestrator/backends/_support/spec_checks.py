"""What every backend refuses in a LaunchSpec before it reaches an engine (INPUT.INVALID)."""

from __future__ import annotations

from orchestrator.backends.base import LaunchSpec
from orchestrator.domain.errors import InputInvalid


def check_spec(spec: LaunchSpec) -> None:
    """argv not empty, an absolute working directory, environment names without '=' or NUL."""
    if not spec.argv:
        raise InputInvalid("argv must not be empty", details={"field": "argv"})
    if not spec.workdir.startswith("/"):
        raise InputInvalid("workdir must be an absolute path", details={"field": "workdir"})
    for key, value in spec.env.items():
        if not key or "=" in key or "\x00" in key or "\x00" in value:
            raise InputInvalid("environment names must be non-empty without '=' or NUL", details={"field": "env"})
