"""The Kubernetes backend's settings: the ``backend.kubernetes`` section of the controller's config.

Pure data (no client import), so the service can validate a config without loading the client.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

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


class EgressListener(BaseModel):
    """Where the egress proxy listens for sandbox pods: their only route, allowed by a NetworkPolicy to the
    controller's pods on its port (the chart's), routed by the pod's IP to its run's allowlist."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    listen: str = Field(
        default="0.0.0.0:3128",
        pattern=r"^[0-9.]+:[0-9]{1,5}$",
        description="IPv4 address:port the proxy listens on (0.0.0.0 in a controller pod).",
    )
    address: str | None = Field(
        default=None,
        pattern=r"^[0-9.]+$",
        description="The address pods reach the proxy at (default: listen's, unless that is 0.0.0.0).",
    )
    address_env: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="An environment variable holding that address (the chart: POD_IP, from the downward API).",
    )
    netns: str | None = Field(
        default=None,
        pattern=r"^/",
        description="A network namespace file to listen in (a controller outside the cluster's pod network: "
        "the test cluster's attachment, /var/run/netns/so-k8s-egress); needs CAP_SYS_ADMIN.",
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        host, port = value.rsplit(":", 1)
        ipaddress.IPv4Address(host)  # ValueError names it
        if not 1 <= int(port) <= 65535:
            raise ValueError(f"port {port} is not in 1..65535")
        return value

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is not None:
            ipaddress.IPv4Address(value)
        return value


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
    egress: EgressListener | None = Field(
        default=None,
        description="The egress proxy for pods of profiles with a network allowlist; none: such runs are "
        "refused (SANDBOX.UNAVAILABLE), never given a wider network.",
    )
    require_network_policy: bool = Field(
        default=True,
        description="Refuse to launch (SANDBOX.UNAVAILABLE) unless a default-deny NetworkPolicy (ingress and"
        " egress, every pod) exists in the sandbox namespace: profiles ask for no network.",
    )
