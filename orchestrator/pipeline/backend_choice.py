"""The backend a config asks for: Docker (the default) or Kubernetes."""

from __future__ import annotations

from pathlib import Path

from orchestrator.backends.base import SandboxBackend
from orchestrator.backends.docker import DockerBackend
from orchestrator.pipeline.config import OrchestratorConfig, load_config


def backend_for(config: OrchestratorConfig) -> SandboxBackend:
    if config.backend.kind == "kubernetes":
        # the official client takes ~0.3 s to import: only when a config asks for it
        from orchestrator.backends.kubernetes.backend import KubernetesBackend  # noqa: PLC0415

        return KubernetesBackend(config.backend.kubernetes)
    return DockerBackend()


def backend_for_file(config_path: Path | None) -> SandboxBackend:
    """Docker without a config file (nothing to read); else what the file says."""
    return DockerBackend() if config_path is None else backend_for(load_config(config_path))
