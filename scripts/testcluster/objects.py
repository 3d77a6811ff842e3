"""The cluster's own objects, as data, applied through the official client (server-side apply): the binding
that lets the API server use the kubelet's API (logs, exec, attach), RuntimeClass gvisor, and the gVisor
probe's namespace and pod. Also the deletion of every pod on ``down``.

The manifests are plain dicts (unit-tested without a cluster); only ``api_client`` and what takes its
result import the ``kubernetes`` package.
"""

from __future__ import annotations

import time
from typing import Any

from . import supervise
from .pki import APISERVER_KUBELET_CLIENT_USER
from .settings import API_SERVER, GVISOR_PROBE_NAMESPACE, MINIMAL_IMAGE, RUNTIME_CLASS, RUNTIME_HANDLER, Settings

Manifest = dict[str, Any]
FIELD_MANAGER = "sandbox-orchestrator-test-cluster"
APPLY = "application/apply-patch+yaml"
KUBELET_API_ROLE = "system:kubelet-api-admin"
PROBE_POD = "probe"


def kubelet_api_binding() -> Manifest:
    """The API server's kubelet client may use the kubelet API (logs, exec, attach): the built-in role."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": "sandbox-orchestrator:apiserver-kubelet-client"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": KUBELET_API_ROLE},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": APISERVER_KUBELET_CLIENT_USER}],
    }


def runtime_class() -> Manifest:
    """RuntimeClass gvisor: containerd's runtime ``runsc`` (gVisor's shim, configs.containerd_config)."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS},
        "handler": RUNTIME_HANDLER,
    }


def probe_namespace() -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": GVISOR_PROBE_NAMESPACE, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
    }


def probe_pod() -> Manifest:
    """A hardened pod under RuntimeClass gvisor printing its kernel's release: gVisor answers uname with its
    own (4.4.0), not the host's. (dmesg needs CAP_SYSLOG, which a restricted pod does not have.)"""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": PROBE_POD, "namespace": GVISOR_PROBE_NAMESPACE},
        "spec": {
            "runtimeClassName": RUNTIME_CLASS,
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "runAsGroup": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": PROBE_POD,
                    "image": MINIMAL_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["uname", "-r"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "readOnlyRootFilesystem": True,
                        "capabilities": {"drop": ["ALL"]},
                    },
                }
            ],
        },
    }


# --- through the client --------------------------------------------------------------------------------


def api_client(s: Settings) -> Any:
    """An ApiClient of the official client as the cluster's admin (the certificates of the PKI directory)."""
    from kubernetes import client

    config = client.Configuration()
    config.host = API_SERVER
    config.proxy = None  # the API server is on loopback: never through a proxy from the environment
    config.ssl_ca_cert = str(s.ca_cert)
    config.cert_file = str(s.cert("admin"))
    config.key_file = str(s.key("admin"))
    return client.ApiClient(config)


def apply(api: Any, manifest: Manifest) -> None:
    """Server-side apply of one of the manifests above (create or update, as ``kubectl apply``)."""
    from kubernetes import client

    kind, name = manifest["kind"], manifest["metadata"]["name"]
    options: dict[str, Any] = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": APPLY}
    if kind == "ClusterRoleBinding":
        client.RbacAuthorizationV1Api(api).patch_cluster_role_binding(name, manifest, **options)
    elif kind == "RuntimeClass":
        client.NodeV1Api(api).patch_runtime_class(name, manifest, **options)
    elif kind == "Namespace":
        client.CoreV1Api(api).patch_namespace(name, manifest, **options)
    elif kind == "Pod":
        client.CoreV1Api(api).patch_namespaced_pod(name, manifest["metadata"]["namespace"], manifest, **options)
    else:
        raise ValueError(f"no apply for {kind}")


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "status", None) == 404


def delete_runtime_class(api: Any) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.NodeV1Api(api).delete_runtime_class(RUNTIME_CLASS)
    except ApiException as exc:
        if not _not_found(exc):
            raise


def delete_probe_namespace(api: Any) -> None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        client.CoreV1Api(api).delete_namespace(GVISOR_PROBE_NAMESPACE)
    except ApiException as exc:
        if not _not_found(exc):
            supervise.warn(f"could not delete the namespace {GVISOR_PROBE_NAMESPACE}: {exc.reason}")


def pod_phase(api: Any, namespace: str, name: str) -> str | None:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        status = client.CoreV1Api(api).read_namespaced_pod_status(name, namespace).status
    except ApiException:
        return None
    return None if status is None or status.phase is None else str(status.phase)


def pod_log(api: Any, namespace: str, name: str) -> str:
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        return str(client.CoreV1Api(api).read_namespaced_pod_log(name, namespace))
    except ApiException:
        return ""


def delete_all_pods(api: Any, timeout_s: float = 60.0) -> bool:
    """Every pod in every namespace, with a grace period of 1 s, while the kubelet runs (it unmounts their
    volumes and tears their sandboxes down); True when all were gone within ``timeout_s``."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api)
    for pod in core.list_pod_for_all_namespaces().items:
        meta = pod.metadata
        if meta is None or meta.name is None or meta.namespace is None:
            continue
        try:
            core.delete_namespaced_pod(meta.name, meta.namespace, grace_period_seconds=1)
        except ApiException as exc:
            if not _not_found(exc):
                raise
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not core.list_pod_for_all_namespaces(limit=1).items:
            return True
        time.sleep(0.5)
    return False
