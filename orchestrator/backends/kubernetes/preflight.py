"""What ``sandboxctl doctor`` checks on a cluster, with the controller's own credentials. Blocking.

The controller has no cluster-wide rights by design (a Role in the sandbox namespace only), so what it
cannot read it tests by asking the API server to admit a pod without keeping it (``dryRun=All``):
PodSecurity ``restricted`` enforced is a weakened pod refused; a RuntimeClass present is a pod naming it
admitted. The permissions are asked with SelfSubjectAccessReviews, which every identity may send.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from orchestrator.backends.base import PreflightCheck
from orchestrator.backends.kubernetes.kube import JsonObject, KubeClient, KubeError
from orchestrator.backends.kubernetes.settings import KubernetesSettings

#: (verb, resource, subresource, group): what the backend does, and so what its Role must allow
NEEDED: tuple[tuple[str, str, str, str], ...] = (
    ("create", "pods", "", ""),
    ("get", "pods", "", ""),
    ("list", "pods", "", ""),
    ("watch", "pods", "", ""),
    ("patch", "pods", "", ""),
    ("delete", "pods", "", ""),
    # the command's stdio, relayed from the sidecar, and copy mode's tar streams (a websocket: a GET
    # upgrade, and create where the API server asks for it)
    ("create", "pods", "exec", ""),
    ("get", "pods", "exec", ""),
    ("list", "events", "", ""),
    ("list", "networkpolicies", "", "networking.k8s.io"),
    ("get", "leases", "", "coordination.k8s.io"),
    ("create", "leases", "", "coordination.k8s.io"),
    ("update", "leases", "", "coordination.k8s.io"),
    ("list", "leases", "", "coordination.k8s.io"),
    ("delete", "leases", "", "coordination.k8s.io"),
)
RBAC_FIX = "install the chart's Role/RoleBinding for the controller's ServiceAccount (charts/sandbox-orchestrator)"

_PROBE_POD: JsonObject = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"generateName": "so-preflight-", "labels": {"org.sandbox-orchestrator.preflight": "true"}},
    "spec": {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "probe",
                "image": "sandbox-orchestrator/minimal:latest",
                "imagePullPolicy": "Never",
                "command": ["true"],
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                    "readOnlyRootFilesystem": True,
                },
            }
        ],
    },
}


def _probe_pod(change: Callable[[JsonObject], None] | None = None) -> JsonObject:
    pod = copy.deepcopy(_PROBE_POD)
    if change is not None:
        change(pod)
    return pod


def _weaken(pod: JsonObject) -> None:
    """What ``restricted`` refuses and the API server itself allows (it may forbid privileged pods outright)."""
    container: dict[str, Any] = pod["spec"]["containers"][0]
    container["securityContext"] = {"allowPrivilegeEscalation": True, "capabilities": {"add": ["SYS_ADMIN"]}}


def denies_all(policy: JsonObject) -> bool:
    """A NetworkPolicy for every pod, both directions, allowing nothing."""
    spec = policy.get("spec") or {}
    types = set(spec.get("policyTypes") or [])
    return (
        spec.get("podSelector") in ({}, {"matchLabels": {}}, None)
        and {"Ingress", "Egress"} <= types
        and not spec.get("ingress")
        and not spec.get("egress")
    )


def cluster_checks(kube: KubeClient, settings: KubernetesSettings) -> list[PreflightCheck]:
    namespace = settings.namespace
    checks: list[PreflightCheck] = []
    try:
        version = kube.version()
    except KubeError as exc:
        return [PreflightCheck("cluster API", False, f"{kube.server}: {exc.message}", "check the kubeconfig / API")]
    checks.append(PreflightCheck("cluster API", True, f"{kube.server}: Kubernetes {version.get('gitVersion')}"))

    try:
        kube.list_pods(namespace, "org.sandbox-orchestrator.preflight=true")
        checks.append(PreflightCheck(f"namespace {namespace}", True, "pods can be listed"))
    except KubeError as exc:
        checks.append(PreflightCheck(f"namespace {namespace}", False, exc.message, RBAC_FIX))

    checks.append(_pod_security(kube, namespace))
    checks.append(_network_policy(kube, namespace, settings))
    for runtime, klass in sorted(settings.runtime_classes.items()):
        checks.append(_runtime_class(kube, namespace, runtime, klass))
    checks.append(_permissions(kube, namespace, settings))
    return checks


def _pod_security(kube: KubeClient, namespace: str) -> PreflightCheck:
    name = "PodSecurity restricted"
    try:
        kube.create_pod(namespace, _probe_pod(_weaken), dry_run=True)
    except KubeError as exc:
        if exc.kind == "forbidden" and "podsecurity" in exc.message.lower().replace(" ", "").replace("-", ""):
            return PreflightCheck(name, True, "a privileged pod is refused by the API server (dry run)")
        return PreflightCheck(name, False, f"dry run failed: {exc.message}", RBAC_FIX)
    return PreflightCheck(
        name,
        False,
        f"a privileged pod was admitted in {namespace} (dry run): the namespace does not enforce PodSecurity"
        " restricted",
        f"kubectl label namespace {namespace} pod-security.kubernetes.io/enforce=restricted",
    )


def _network_policy(kube: KubeClient, namespace: str, settings: KubernetesSettings) -> PreflightCheck:
    name = "default-deny NetworkPolicy"
    try:
        policies = kube.list_network_policies(namespace)
    except KubeError as exc:
        return PreflightCheck(name, False, exc.message, RBAC_FIX)
    found = [p.get("metadata", {}).get("name") for p in policies if denies_all(p)]
    if found:
        return PreflightCheck(name, True, f"{', '.join(map(str, found))} (ingress and egress, every pod)")
    required = "required: launches are refused" if settings.require_network_policy else "not required by config"
    return PreflightCheck(
        name,
        not settings.require_network_policy,
        f"none in {namespace} ({required})",
        "install the chart (it creates one) or apply a NetworkPolicy with podSelector {} and both policyTypes",
    )


def _runtime_class(kube: KubeClient, namespace: str, runtime: str, klass: str) -> PreflightCheck:
    name = f"RuntimeClass {klass} (runtime {runtime})"

    def use(pod: JsonObject) -> None:
        pod["spec"]["runtimeClassName"] = klass

    try:
        kube.create_pod(namespace, _probe_pod(use), dry_run=True)
    except KubeError as exc:
        fix = f"create RuntimeClass {klass} (the chart's gvisor.runtimeClass.create) on nodes with its handler"
        return PreflightCheck(name, False, f"a pod using it is refused: {exc.message}", fix)
    return PreflightCheck(name, True, "a pod using it is admitted (dry run)")


def _permissions(kube: KubeClient, namespace: str, settings: KubernetesSettings) -> PreflightCheck:
    needed = NEEDED
    missing = []
    try:
        for verb, resource, sub, group in needed:
            if not kube.can_i(namespace, verb, resource, sub, group):
                missing.append(f"{verb} {resource}{'/' + sub if sub else ''}")
    except KubeError as exc:
        return PreflightCheck("permissions", False, f"access reviews failed: {exc.message}", RBAC_FIX)
    if missing:
        return PreflightCheck("permissions", False, f"missing in {namespace}: {', '.join(missing)}", RBAC_FIX)
    return PreflightCheck("permissions", True, f"all {len(needed)} the backend needs in {namespace}")
