"""The Helm chart against a real API server (the k8s_cluster fixture of tests/support/kube.py): the rendered objects
pass server-side dry-run and then apply for real, come back as rendered, and the API server itself says
what the controller's ServiceAccount may do (exactly the Role, in the sandbox namespace only) and refuses a
pod that is not Pod Security "restricted" in the sandbox namespace. Then helm's own install and uninstall."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from orchestrator.backends.kubernetes.preflight import NEEDED
from scripts.testcluster.settings import MINIMAL_IMAGE
from tests.support.chart import (
    BASE_RULES,
    CHART,
    can_i_resource,
    helm,
    normalized_rules,
    of_kind,
    one,
    render,
)

if TYPE_CHECKING:  # the fixture's type lives in the plugin tests/conftest.py loads
    from tests.support.kube import Cluster

pytestmark = pytest.mark.k8s

CLUSTER_SCOPED = ("Namespace", "PersistentVolume", "RuntimeClass")
RELEASE = "so"
FIELD_MANAGER = "so-chart-test"
# the probe pods' own ServiceAccount: "default" appears only once the controller-manager got to it
PROBE_ACCOUNT = "so-chart-probe"


@dataclass
class Kubectl:
    cluster: Cluster

    def run(self, *args: str, stdin: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.cluster.bin_dir / "kubectl"), "--kubeconfig", str(self.cluster.kubeconfig), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, stdin: str | None = None) -> str:
        proc = self.run(*args, stdin=stdin)
        assert proc.returncode == 0, f"kubectl {' '.join(args)}: exit {proc.returncode}\n{proc.stderr}"
        return proc.stdout

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        scope = ["--namespace", namespace] if namespace else []
        return dict(json.loads(self.ok("get", kind, name, *scope, "-o", "json")))

    def apply(self, docs: list[dict[str, Any]], *, dry_run: bool) -> subprocess.CompletedProcess[str]:
        args = ["apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "--validate=strict", "-f", "-"]
        if dry_run:
            args.insert(1, "--dry-run=server")
        return self.run(*args, stdin=yaml.safe_dump_all(docs))

    def can_i(self, verb: str, resource: str, namespace: str | None, account: str) -> bool:
        """The API server's answer (SelfSubjectAccessReview, impersonating the ServiceAccount)."""
        args = ["auth", "can-i", verb]
        resource, _, sub = resource.partition("/")
        args.append(resource)
        if sub:
            args.append(f"--subresource={sub}")
        args += ["--namespace", namespace] if namespace else ["--all-namespaces"]
        proc = self.run(*args, f"--as={account}")
        answer = proc.stdout.strip()
        assert answer in {"yes", "no"}, f"kubectl auth can-i: {proc.stdout}{proc.stderr}"
        return answer == "yes"


@pytest.fixture
def kubectl(k8s_cluster: Cluster) -> Kubectl:
    return Kubectl(k8s_cluster)


@pytest.fixture
def names() -> dict[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return {
        "namespace": f"so-chart-{suffix}",
        "sandboxes": f"so-sandboxes-{suffix}",
        "runtimeclass": f"gvisor-{suffix}",  # cluster-scoped: one per test run
    }


def chart_values(names: dict[str, str], tmp: Path, **extra: Any) -> dict[str, Any]:
    return {
        "sandboxNamespace": {"name": names["sandboxes"]},
        "backend": {"runtimeClasses": {"runsc": names["runtimeclass"]}},
        "gvisor": {"runtimeClass": {"create": True, "name": names["runtimeclass"]}},
        "workspaces": {"hostPath": {"enabled": True, "path": str(tmp / "workspaces"), "type": "DirectoryOrCreate"}},
        "tokens": {"entries": [{"subject": "ops", "role": "admin", "value": uuid.uuid4().hex}]},
        **extra,
    }


@pytest.fixture
def applied(kubectl: Kubectl, names: dict[str, str], tmp_path: Path) -> Iterator[list[dict[str, Any]]]:
    """The chart's objects, applied in dependency order (cluster-scoped first, as helm does): each part
    through server-side dry-run, then for real. Deleted afterwards."""
    docs = render(chart_values(names, tmp_path), namespace=names["namespace"])
    kubectl.ok("create", "namespace", names["namespace"])  # what `helm install --create-namespace` does
    try:
        for part in (
            [d for d in docs if d["kind"] in CLUSTER_SCOPED],
            [d for d in docs if d["kind"] not in CLUSTER_SCOPED],
        ):
            dry = kubectl.apply(part, dry_run=True)
            assert dry.returncode == 0, f"server-side dry-run refused the chart:\n{dry.stderr}"
            assert "(server dry run)" in dry.stdout
            real = kubectl.apply(part, dry_run=False)
            assert real.returncode == 0, f"apply failed:\n{real.stderr}"
        yield docs
    finally:
        kubectl.run("delete", "--ignore-not-found", "--wait=false", "-f", "-", stdin=yaml.safe_dump_all(docs))
        kubectl.run("delete", "namespace", names["namespace"], "--ignore-not-found", "--wait=false")


def test_applied_objects_are_what_was_rendered(
    applied: list[dict[str, Any]], kubectl: Kubectl, names: dict[str, str]
) -> None:
    for doc in applied:  # every object exists
        kubectl.get(doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace"))
    role = kubectl.get("role", one(applied, "Role")["metadata"]["name"], names["sandboxes"])
    assert normalized_rules(role["rules"]) == normalized_rules(BASE_RULES)
    namespace = kubectl.get("namespace", names["sandboxes"])
    for mode in ("enforce", "audit", "warn"):
        assert namespace["metadata"]["labels"][f"pod-security.kubernetes.io/{mode}"] == "restricted"
    policy = kubectl.get("networkpolicy", one(applied, "NetworkPolicy")["metadata"]["name"], names["sandboxes"])
    assert policy["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    deployment = kubectl.get("deployment", one(applied, "Deployment")["metadata"]["name"], names["namespace"])
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]["securityContext"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["readOnlyRootFilesystem"] is True
    assert container["allowPrivilegeEscalation"] is False
    assert container["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for claim in of_kind(applied, "PersistentVolumeClaim"):
        stored = kubectl.get("pvc", claim["metadata"]["name"], claim["metadata"]["namespace"])
        assert stored["spec"]["volumeName"] == claim["spec"]["volumeName"]
    assert not kubectl.run(
        "get", "clusterrolebinding", "-o", "name", "-l", f"app.kubernetes.io/instance={RELEASE}"
    ).stdout


def test_service_account_may_do_exactly_the_role(
    applied: list[dict[str, Any]], kubectl: Kubectl, names: dict[str, str]
) -> None:
    account = f"system:serviceaccount:{names['namespace']}:{one(applied, 'ServiceAccount')['metadata']['name']}"
    sandboxes, own = names["sandboxes"], names["namespace"]
    allowed = [
        *[(verb, "pods") for verb in ("create", "get", "list", "watch", "patch", "delete", "deletecollection")],
        ("create", "pods/exec"),  # in the sidecar: the command's stdio, copy mode's tar streams
        ("get", "pods/exec"),
        *[(verb, "events") for verb in ("get", "list", "watch")],
        *[(verb, "networkpolicies.networking.k8s.io") for verb in ("get", "list")],
        *[(verb, "leases.coordination.k8s.io") for verb in ("get", "list", "watch", "create", "update", "delete")],
        # what the backend uses, as `sandboxctl doctor` asks it: the chart and the backend cannot drift
        *[(verb, can_i_resource(resource, sub, group)) for verb, resource, sub, group in NEEDED],
    ]
    for verb, resource in allowed:
        assert kubectl.can_i(verb, resource, sandboxes, account), f"{verb} {resource} in {sandboxes}"
    denied_in_sandboxes = [
        ("create", "pods/attach"),  # no attach: output comes through the sidecar's relays
        ("get", "pods/log"),  # nor from the node's log files
        ("update", "pods"),  # pods are patched (activeDeadlineSeconds), never replaced
        ("patch", "pods/ephemeralcontainers"),
        ("patch", "pods/status"),
        ("patch", "leases.coordination.k8s.io"),
        ("get", "secrets"),
        ("list", "configmaps"),
        ("create", "roles.rbac.authorization.k8s.io"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("create", "networkpolicies.networking.k8s.io"),
        ("delete", "networkpolicies.networking.k8s.io"),
        ("create", "persistentvolumeclaims"),
    ]
    for verb, resource in denied_in_sandboxes:
        assert not kubectl.can_i(verb, resource, sandboxes, account), f"{verb} {resource} in {sandboxes}"
    for verb, resource in [("create", "pods"), ("get", "pods"), ("get", "secrets"), ("list", "configmaps")]:
        assert not kubectl.can_i(verb, resource, own, account), f"{verb} {resource} in {own}"
    for verb, resource in [
        ("list", "pods"),
        ("list", "nodes"),
        ("patch", "namespaces"),
        ("create", "runtimeclasses.node.k8s.io"),
    ]:
        assert not kubectl.can_i(verb, resource, None, account), f"{verb} {resource} cluster-wide"


RESTRICTED_POD: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RESTRICTED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "readOnlyRootFilesystem": True,
}


def pod(name: str, spec: dict[str, Any] | None = None, container: dict[str, Any] | None = None) -> dict[str, Any]:
    """A pod that passes "restricted", with ``spec`` and the container's securityContext ``container``
    laid over it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": PROBE_ACCOUNT,
            "automountServiceAccountToken": False,
            "securityContext": RESTRICTED_POD,
            "containers": [
                {
                    "name": "c",
                    "image": MINIMAL_IMAGE,
                    "securityContext": {**RESTRICTED_CONTAINER, **(container or {})},
                }
            ],
            **(spec or {}),
        },
    }


def test_sandbox_namespace_refuses_pods_that_are_not_restricted(
    applied: list[dict[str, Any]], kubectl: Kubectl, names: dict[str, str]
) -> None:
    """Each pod is valid; each but the first breaks one rule of "restricted" (never the API's own
    validation), and the namespace's enforce label makes the API server refuse it."""
    del applied
    kubectl.ok("create", "serviceaccount", PROBE_ACCOUNT, "--namespace", names["sandboxes"])

    def create(manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        args = ("create", "--dry-run=server", "--namespace", names["sandboxes"], "-f", "-")
        return kubectl.run(*args, stdin=json.dumps(manifest))

    good = create(pod("restricted"))
    assert good.returncode == 0, good.stderr
    for manifest in [
        pod("root", spec={"securityContext": {**RESTRICTED_POD, "runAsNonRoot": False, "runAsUser": 0}}),
        pod("escalation", container={"allowPrivilegeEscalation": True}),
        pod("capabilities", container={"capabilities": {"drop": ["ALL"], "add": ["NET_RAW"]}}),
        pod("unconfined", spec={"securityContext": {**RESTRICTED_POD, "seccompProfile": {"type": "Unconfined"}}}),
        pod("host-network", spec={"hostNetwork": True}),
        pod("host-path", spec={"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
    ]:
        bad = create(manifest)
        name = manifest["metadata"]["name"]
        assert bad.returncode != 0, f"{name}: admitted"
        assert 'violates PodSecurity "restricted:latest"' in bad.stderr, f"{name}: {bad.stderr}"


def test_helm_install_and_uninstall(
    k8s_cluster: Cluster, kubectl: Kubectl, names: dict[str, str], tmp_path: Path
) -> None:
    """helm's own flow: install (the sandbox namespace first), copy mode's Role with exec, uninstall
    removes what it made."""
    values = chart_values(names, tmp_path, workspaces={"mode": "copy"})
    values_path = tmp_path / "values.yaml"
    values_path.write_text(yaml.safe_dump(values), encoding="utf-8")
    install = helm(
        "install", RELEASE, str(CHART), "--namespace", names["namespace"], "--create-namespace",
        "-f", str(values_path), kubeconfig=k8s_cluster.kubeconfig, timeout=300,
    )  # fmt: skip
    try:
        assert install.returncode == 0, install.stderr
        assert "Workspaces: copy mode." in install.stdout  # NOTES.txt, rendered
        status = json.loads(
            helm(
                "status", RELEASE, "--namespace", names["namespace"], "-o", "json", kubeconfig=k8s_cluster.kubeconfig
            ).stdout
        )
        assert status["info"]["status"] == "deployed"
        role = json.loads(kubectl.ok("get", "role", "--namespace", names["sandboxes"], "-o", "json"))["items"]
        assert len(role) == 1
        assert normalized_rules(role[0]["rules"]) == normalized_rules(BASE_RULES)
        account = f"system:serviceaccount:{names['namespace']}:{RELEASE}-sandbox-orchestrator"
        for verb, resource, sub, group in NEEDED:
            assert kubectl.can_i(verb, can_i_resource(resource, sub, group), names["sandboxes"], account)
        assert kubectl.can_i("create", "pods/exec", names["sandboxes"], account)
        assert not kubectl.can_i("create", "pods/exec", names["namespace"], account)
        assert kubectl.get("runtimeclass", names["runtimeclass"])["handler"] == "runsc"
    finally:
        uninstall = helm(
            "uninstall",
            RELEASE,
            "--namespace",
            names["namespace"],
            "--wait=false",
            kubeconfig=k8s_cluster.kubeconfig,
            timeout=300,
        )
        kubectl.run("delete", "namespace", names["namespace"], "--ignore-not-found", "--wait=false")
    assert uninstall.returncode == 0, uninstall.stderr
    assert kubectl.run("get", "runtimeclass", names["runtimeclass"]).returncode != 0
    gone = kubectl.run("get", "role", "--namespace", names["sandboxes"], "-o", "name")
    assert gone.stdout.strip() == "", gone.stdout
    namespace = kubectl.run("get", "namespace", names["sandboxes"], "-o", "json")
    # deleted with the release (gone, or Terminating while its contents go)
    assert namespace.returncode != 0 or json.loads(namespace.stdout)["status"]["phase"] == "Terminating"
