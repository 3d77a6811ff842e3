"""Runs that end at a limit, for real, for the profiles page's tests (tests/api): a profile ``tiny`` (the default
profile with 32 MiB of memory and a 2 s wall timeout) in a directory the service's $SANDBOX_PROFILES_PATH
names, and a service that lets the few commands they run through without a person's answer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.domain.wire import ExecutionView
from tests.support.service import Harness, start_service, write_config

TINY = "tiny"
TINY_MEMORY = 32 * 2**20
TINY_WALL_S = 2
TINY_YAML = f"""\
extends: workspace-write
description: "The default profile, small: for runs that end at its limits."
limits:
  memory: 32m
  wall_timeout_s: {TINY_WALL_S}
"""
# python3 writes 256 MiB into memory at once: the kernel kills it at 32 MiB (an OOM end)
MEMORY_BOMB = ["python3", "-c", "b = b'x' * (256 << 20)"]
SLEEP = ["sleep", "30"]  # past the 2 s wall timeout


async def start_profiles_service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / f"{TINY}.yaml").write_text(TINY_YAML)
    monkeypatch.setenv("SANDBOX_PROFILES_PATH", str(profiles))
    safety = {"mode": "ask", "allowlist": ["true", "sleep"], "approval_timeout_s": 60}
    # `python3 -c` asks (the gate cannot read the code): an approvals rule answers it
    rule = {"name": "memory-bomb", "argv_prefix": "python3 -c", "outcome": "approved"}
    approvals = {"provider": "queue", "rules": [rule]}
    return await start_service(write_config(tmp_path, safety=safety, approvals=approvals))


@dataclass(frozen=True)
class AtLimits:
    ok: ExecutionView  # agent-a's `true`
    oom: ExecutionView  # agent-a's memory bomb
    timeout: ExecutionView  # agent-b's sleep past the wall timeout


async def run_to_the_limits(harness: Harness) -> AtLimits:
    """Three runs of ``tiny``, one after the other: one fine (team-a), one killed at its memory limit (team-a),
    one at its wall timeout (team-b)."""

    async def run(agent: str, argv: list[str]) -> ExecutionView:
        view = await harness.client(agent).run({"tool": "shell", "command": argv, "profile": TINY})
        assert view.result is not None, view
        return view

    return AtLimits(
        ok=await run("agent-a", ["true"]),
        oom=await run("agent-a", MEMORY_BOMB),
        timeout=await run("agent-b", SLEEP),
    )
