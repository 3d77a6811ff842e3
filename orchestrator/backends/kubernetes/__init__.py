"""The Kubernetes backend: one hardened pod per execution (see ``backend``).

``KubernetesSettings`` imports no client; ``KubernetesBackend`` (which imports the official client)
loads on first use, so a Docker-only run never pays for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orchestrator.backends.kubernetes.settings import KubernetesSettings

if TYPE_CHECKING:
    from orchestrator.backends.kubernetes.backend import KubernetesBackend

__all__ = ["KubernetesBackend", "KubernetesSettings"]


def __getattr__(name: str) -> Any:
    if name == "KubernetesBackend":
        from orchestrator.backends.kubernetes.backend import KubernetesBackend  # noqa: PLC0415 - on first use

        return KubernetesBackend
    raise AttributeError(name)
