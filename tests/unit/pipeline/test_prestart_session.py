"""``Orchestrator.prestart`` of an exec_command: the sandbox it asks the pool for has the key the session will
claim (its profile resolved for a session: the session's lifetime), not a one-shot run's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.docker import DockerBackend
from orchestrator.evidence import EvidenceWriter
from orchestrator.pipeline.config import PoolSettings
from orchestrator.pipeline.factory import assemble
from orchestrator.pipeline.pool import PoolKey
from orchestrator.profiles import ProfileRegistry


async def test_a_session_is_prestarted_under_a_sessions_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles_dir = tmp_path / "profiles"
    profiles_dir.mkdir()
    (profiles_dir / "brief.yaml").write_text(
        "name: brief\ndescription: short sessions\nextends: workspace-write\nsessions:\n  max_lifetime_s: 4\n"
    )
    (profiles_dir / "no-sessions.yaml").write_text(
        "name: no-sessions\ndescription: one-shot only\nextends: workspace-write\nsessions:\n  enabled: false\n"
    )
    registry = ProfileRegistry(extra_dirs=[profiles_dir])
    orch = assemble(
        evidence=EvidenceWriter(tmp_path / "evidence.jsonl"),
        backend=DockerBackend(),  # never called: the pool's fill is caught below
        profiles=registry,
        pool=PoolSettings(enabled=True),
    )
    try:
        assert orch.pool is not None
        wanted: list[tuple[PoolKey, Any]] = []
        monkeypatch.setattr(orch.pool, "want", lambda key, spec, announced=False: wanted.append((key, spec)))
        ws = tmp_path / "ws"
        ws.mkdir()
        session = {"tool": "exec_command", "cmd": "python3 -q", "profile": "brief"}
        one_shot = {"tool": "shell_command", "command": "python3 -q", "profile": "brief"}
        assert orch.prestart(session, workspace=ws) and orch.prestart(one_shot, workspace=ws)
        (session_key, session_spec), (one_shot_key, _) = wanted
        expected = registry.resolve("brief", session=True)
        assert session_key.profile_hash == expected.profile_hash
        assert session_spec.profile.wall_timeout_s == 4  # the session's lifetime is its sandbox's deadline
        assert session_key != one_shot_key  # a one-shot run of the profile never takes a session's sandbox
        # a session the profile refuses gets no sandbox either (its run would be refused: POLICY.DENIED)
        refused = {"tool": "exec_command", "cmd": "true", "profile": "no-sessions"}
        assert not orch.prestart(refused, workspace=ws) and len(wanted) == 2
    finally:
        await orch.aclose()
