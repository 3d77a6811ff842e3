"""The Kubernetes backend's settings: the ``backend.kubernetes`` section of the controller's config.

Pure data (no client import), so the service can validate a config without loading the client.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class WorkspaceDelivery(BaseModel):
    """How the execution's workspace (a directory the controller sees) reaches the pod."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["pvc", "copy"] = Field(
        default="pvc",
        description="pvc: pods mount <claim>/<path under root> (the controller sees the same storage at root);"
        " copy: the workspace is copied into the pod before the command and its changes back after it.",
    )
    claim: str = Field(
        default="sandbox-workspaces",
        pattern=_DNS_LABEL,
        description="pvc: the PersistentVolumeClaim in the sandbox namespace holding the workspaces.",
    )
    root: str = Field(
        default="/var/lib/sandbox-orchestrator/workspaces",
        pattern=r"^/",
        description="pvc: where this controller sees the claim's storage; a workspace is its sub-path below it.",
    )
    copy_max_bytes: int = Field(
        default=256 * 1024 * 1024, ge=1, description="copy: the most bytes copied in or out (tar stream)."
    )


class KubernetesSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kubeconfig: str | None = Field(
        default=None, description="A kubeconfig file; none: the in-cluster ServiceAccount (or $KUBECONFIG)."
    )
    context: str | None = Field(default=None, description="The kubeconfig context (default: its current one).")
    namespace: str = Field(default="sandboxes", pattern=_DNS_LABEL, description="Where sandbox pods run.")
    image_pull_policy: Literal["IfNotPresent", "Never", "Always"] = Field(default="IfNotPresent")
    seccomp: Literal["runtime-default", "localhost"] = Field(
        default="runtime-default",
        description="runtime-default: the runtime's profile; localhost: ours, which must be on every node at"
        " <kubelet root>/seccomp/sandbox-orchestrator/<profile>.json (else pods fail: SANDBOX.UNAVAILABLE).",
    )
    runtime_classes: dict[str, str] = Field(
        default_factory=lambda: {"runsc": "gvisor"},
        description="A profile's runtime -> the RuntimeClass its pods use; runc: the cluster's default runtime.",
    )
    workspace: WorkspaceDelivery = Field(default_factory=WorkspaceDelivery)
    start_timeout_s: float = Field(
        default=120.0, gt=0, description="How long a pod may take to be scheduled and start its container."
    )
    require_network_policy: bool = Field(
        default=True,
        description="Refuse to launch (SANDBOX.UNAVAILABLE) unless a default-deny NetworkPolicy (ingress and"
        " egress, every pod) exists in the sandbox namespace: profiles ask for no network.",
    )
