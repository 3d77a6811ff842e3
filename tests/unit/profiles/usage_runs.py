"""Synthetic runs for the usage, recommendation and what-if tests: every measure unknown unless given."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from orchestrator.domain.usage import EndCause, RunLimits, RunUsage

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB

# the workspace-write profile's limits
LIMITS = RunLimits(
    cpus=1.0,
    memory_bytes=512 * MIB,
    pids=128,
    wall_timeout_s=300.0,
    stdout_max_bytes=MIB,
    stderr_max_bytes=MIB,
    workspace_write_bytes=GIB,
    workspace_write_files=100_000,
)


def run(
    execution_id: str,
    *,
    profile: str = "ci",
    cause: EndCause = EndCause.OK,
    limits: RunLimits = LIMITS,
    ended_at: float = 1_000.0,
    **fields: Any,
) -> RunUsage:
    """A run of ``profile``; ``fields``: any other RunUsage field (a measure, tenant, tool, ci_repository)."""
    measures: dict[str, Any] = dict.fromkeys(
        (
            "cpu_seconds",
            "memory_peak_bytes",
            "pids_peak",
            "wall_seconds",
            "stdout_bytes",
            "stderr_bytes",
            "workspace_bytes_written",
            "workspace_files_written",
            "source",
        )
    )
    return RunUsage(
        execution_id=execution_id,
        profile=profile,
        ended_at=ended_at,
        cause=cause,
        limits=limits,
        **(measures | fields),
    )


def with_limits(**changes: Any) -> RunLimits:
    """``LIMITS`` with some values changed."""
    return replace(LIMITS, **changes)
