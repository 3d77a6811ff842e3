"""The doctor's cluster checks against an API server that answers as a real one does in each case (a fake
KubeClient: what it refuses, and why, is written as the API server writes it): the dry runs send the backend's
own sandbox pod; a namespace the controller's identity (a Role only there) cannot see is said to be possibly
missing, with the namespace's fix; anonymous credentials are named as such."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.backends.checks import PreflightCheck
from orchestrator.backends.kubernetes.kube import KubeError
from orchestrator.backends.kubernetes.preflight import (
    ANONYMOUS_FIX,
    NEEDED,
    PROBE_LABEL,
    builtin_probe_profile,
    cluster_checks,
    probe_pod,
)
from orchestrator.backends.kubernetes.remedies import DOC, namespace_fix, permissions_fix
from orchestrator.backends.kubernetes.settings import KubernetesSettings, WorkspaceDelivery
from orchestrator.profiles import ProfileCaps, ProfileRegistry

NAMESPACE = "sandboxes"
CONTROLLER = "system:serviceaccount:sandbox-system:sandbox-controller"
DEFAULT_DENY = {
    "metadata": {"name": "default-deny"},
    "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
}
Admission = Callable[[dict[str, Any]], KubeError | None]


def forbidden_pods(user: str) -> KubeError:
    return KubeError(
        "forbidden",
        "create pod",
        f'pods is forbidden: User "{user}" cannot create resource "pods" in API group "" in the namespace'
        f' "{NAMESPACE}"',
        403,
    )


def quota(pod: dict[str, Any]) -> KubeError | None:
    """A namespace with a ResourceQuota on cpu and memory: every container must give its limits, or the pod
    at its level (PodLevelResources: the quota counts those; the quota admission plugin's refusal)."""
    pod_level = (pod["spec"].get("resources") or {}).get("limits", {})
    lacking = [
        f"limits.{resource} for: {container['name']}"
        for container in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        for resource in ("cpu", "memory")
        if resource not in (container.get("resources") or {}).get("limits", {}) and resource not in pod_level
    ]
    if lacking:
        return KubeError(
            "forbidden", "create pod", f"pods is forbidden: failed quota: q: must specify {'; '.join(lacking)}"
        )
    return None


def restricted(pod: dict[str, Any]) -> KubeError | None:
    """Pod Security restricted, the part the doctor's weakened pod violates."""
    if any(c["securityContext"].get("allowPrivilegeEscalation") is not False for c in pod["spec"]["containers"]):
        return KubeError(
            "forbidden",
            "create pod",
            'pods "so-preflight-x" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation'
            " != false",
        )
    return None


class FakeKube:
    """What the doctor asks a cluster; ``admit`` decides each dry run, ``granted`` what the access reviews allow."""

    def __init__(
        self,
        admit: list[Admission] | None = None,
        granted: set[tuple[str, str, str, str]] | frozenset[tuple[str, str, str, str]] = frozenset(NEEDED),
        policies: list[dict[str, Any]] | None = None,
        refuse_all: KubeError | None = None,
    ) -> None:
        self.admit = admit or []
        self.granted = granted
        self.policies = [DEFAULT_DENY] if policies is None else policies
        self.refuse_all = refuse_all  # RBAC: before any admission plugin, every request of this kind
        self.sent: list[dict[str, Any]] = []

    def version(self) -> dict[str, Any]:
        return {"gitVersion": "v1.31.0"}

    def create_pod(self, namespace: str, pod: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        assert dry_run and namespace == NAMESPACE
        self.sent.append(pod)
        if self.refuse_all is not None:
            raise self.refuse_all
        for check in self.admit:
            refused = check(pod)
            if refused is not None:
                raise refused
        return pod

    def list_network_policies(self, namespace: str) -> list[dict[str, Any]]:
        if ("list", "networkpolicies", "", "networking.k8s.io") not in self.granted:
            raise KubeError("forbidden", "list network policies", "networkpolicies.networking.k8s.io is forbidden")
        return self.policies

    def can_i(self, namespace: str, verb: str, resource: str, subresource: str = "", group: str = "") -> bool:
        return (verb, resource, subresource, group) in self.granted


def settings(**changes: Any) -> KubernetesSettings:
    return KubernetesSettings(namespace=NAMESPACE, **changes)


def report(checks: list[PreflightCheck]) -> list[tuple[str, str, str | None]]:
    return [("ok" if c.ok else "FAIL" if c.checked else "skip", c.name, c.code) for c in checks]


def test_the_probe_pod_is_the_backends_own_sandbox_pod() -> None:
    """Resources (requests = limits, every container), hardening, volumes: what pod_manifest gives a run of the
    profile, under a generated name and the doctor's label."""
    for mode in ("pvc", "copy"):
        pod = probe_pod(settings(workspace=WorkspaceDelivery(mode=mode)))
        assert "name" not in pod["metadata"] and pod["metadata"]["generateName"] == "so-preflight-"
        assert pod["metadata"]["labels"][PROBE_LABEL] == "true"
        containers = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        assert [c["name"] for c in pod["spec"]["containers"]] == ["sandbox", "sandbox-io"]
        pod_level = pod["spec"]["resources"]
        assert pod_level["requests"] == pod_level["limits"] and {"cpu", "memory"} <= set(pod_level["limits"])
        for container in containers:
            resources = container["resources"]
            assert resources["requests"] == resources["limits"] and "memory" in resources["limits"]
            assert container["securityContext"]["allowPrivilegeEscalation"] is False
    profile = builtin_probe_profile()
    assert (profile.name, profile.runtime) == ("workspace-write", "runc")
    sandbox = probe_pod(settings())["spec"]["containers"][0]
    assert sandbox["resources"]["limits"]["memory"] == str(profile.memory_bytes)
    # the doctor's profile, as runs under its config get it (caps included)
    capped = ProfileRegistry().resolve("workspace-write", caps=ProfileCaps.model_validate({"max_memory": "256m"}))
    sandbox = probe_pod(settings(), capped)["spec"]["containers"][0]
    assert sandbox["resources"]["limits"]["memory"] == str(256 * 1024 * 1024)


def test_a_namespace_with_a_resource_quota_admits_the_probe_as_it_admits_sandboxes() -> None:
    """Before: the hand-written probe pod had no resources, and a quota's refusal read as DOCTOR.NAMESPACE."""
    kube = FakeKube(admit=[quota, restricted])
    checks = cluster_checks(kube, settings())  # type: ignore[arg-type]
    assert report(checks) == [
        ("ok", f"namespace {NAMESPACE}", None),
        ("ok", "PodSecurity restricted", None),
        ("ok", "default-deny NetworkPolicy", None),
        ("ok", "RuntimeClass gvisor (runtime runsc)", None),
        ("ok", "permissions", None),
    ]
    assert kube.sent[0]["spec"]["containers"][0]["resources"]["limits"]["cpu"].endswith("m")
    assert kube.sent[2]["spec"]["runtimeClassName"] == "gvisor"


def test_a_namespace_the_controllers_identity_has_no_right_in_may_not_exist() -> None:
    """The controller's Role lives in the sandbox namespace: when that namespace does not exist, RBAC refuses the
    pod before the API server looks for the namespace. The doctor says it may not exist, with its commands."""
    kube = FakeKube(refuse_all=forbidden_pods(CONTROLLER), granted=set())
    checks = cluster_checks(kube, settings())  # type: ignore[arg-type]
    assert report(checks) == [
        ("FAIL", f"namespace {NAMESPACE}", "DOCTOR.NAMESPACE"),
        ("skip", "PodSecurity restricted", "DOCTOR.NOT_CHECKED"),
        ("skip", "default-deny NetworkPolicy", "DOCTOR.NOT_CHECKED"),
        ("skip", "RuntimeClass gvisor (runtime runsc)", "DOCTOR.NOT_CHECKED"),
        ("skip", "permissions", "DOCTOR.NOT_CHECKED"),
    ]
    namespace = checks[0]
    assert namespace.detail == (
        "may not exist: this identity has no right there (with a Role only in that namespace, the API server"
        " refuses before it looks for the namespace), or no Role there is bound to it: "
        + forbidden_pods(CONTROLLER).message
    )
    assert (
        namespace.fix
        == f"{namespace_fix(NAMESPACE)}\nif namespace {NAMESPACE} exists, bind this identity to the Role there: {DOC}"
    )
    assert {c.detail for c in checks[1:]} == {f"not checked: namespace {NAMESPACE} failed (above)"}


def test_an_identity_with_other_rights_there_is_told_what_its_role_lacks() -> None:
    granted = set(NEEDED) - {("create", "pods", "", "")}
    kube = FakeKube(refuse_all=forbidden_pods(CONTROLLER), granted=granted)
    checks = cluster_checks(kube, settings())  # type: ignore[arg-type]
    assert report(checks) == [
        ("FAIL", f"namespace {NAMESPACE}", "DOCTOR.PERMISSIONS"),
        ("skip", "PodSecurity restricted", "DOCTOR.NOT_CHECKED"),
        ("ok", "default-deny NetworkPolicy", None),
        ("skip", "RuntimeClass gvisor (runtime runsc)", "DOCTOR.NOT_CHECKED"),
        ("FAIL", "permissions", "DOCTOR.PERMISSIONS"),
    ]
    assert checks[0].detail.startswith("this identity may not create pods there (it has other rights there): ")
    assert checks[0].fix == permissions_fix(NAMESPACE, [("create", "pods", "", "")])


@pytest.mark.parametrize("granted", [set(), set(NEEDED)], ids=["no-reviews-allowed", "reviews-allowed"])
def test_anonymous_credentials_are_named(granted: set[tuple[str, str, str, str]]) -> None:
    """/version answers anonymous callers (the engine line passes); every other request is refused as
    system:anonymous: the credentials are the cause, not the namespace or the Role."""
    kube = FakeKube(refuse_all=forbidden_pods("system:anonymous"), granted=granted)
    checks = cluster_checks(kube, settings())  # type: ignore[arg-type]
    assert report(checks) == [
        ("FAIL", "credentials", "DOCTOR.ENGINE"),
        ("skip", f"namespace {NAMESPACE}", "DOCTOR.NOT_CHECKED"),
        ("skip", "PodSecurity restricted", "DOCTOR.NOT_CHECKED"),
        ("skip", "default-deny NetworkPolicy", "DOCTOR.NOT_CHECKED"),
        ("skip", "RuntimeClass gvisor (runtime runsc)", "DOCTOR.NOT_CHECKED"),
        ("skip", "permissions", "DOCTOR.NOT_CHECKED"),
    ]
    assert (
        checks[0].detail
        == "the API server takes them for system:anonymous: " + forbidden_pods("system:anonymous").message
    )
    assert checks[0].fix == ANONYMOUS_FIX
    assert {c.detail for c in checks[1:]} == {"not checked: credentials failed (above)"}
