"""Orchestrators on the real Docker engine, as the Docker tier's tests make them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.approvals.base import ApprovalProvider
from orchestrator.backends.docker import DockerBackend
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles import ProfileRegistry
from tests.support.engine import answering_or_skip


async def docker_orchestrator(
    tmp_path: Path,
    config: Path | None,
    *,
    profile_dirs: Sequence[Path] = (),
    approvals: ApprovalProvider | None = None,
) -> Orchestrator:
    """An orchestrator of ``config`` (None: the built-in policy) over the project's engine, its evidence at
    ``tmp_path/evidence.jsonl``, the built-in profiles and ``profile_dirs``; skips when no engine answers."""
    backend = DockerBackend()
    await answering_or_skip(backend, "container engine")
    return build_orchestrator(
        config,
        evidence_path=tmp_path / "evidence.jsonl",
        backend=backend,
        approvals=approvals,
        profiles=ProfileRegistry(extra_dirs=list(profile_dirs)),
    )
