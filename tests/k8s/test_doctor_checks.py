"""Each of ``sandboxctl doctor``'s cluster checks failing for its own cause, on the real cluster, with the fix
for that cause (and, where the fix is a command, that command run as printed makes the check pass); and the
probe of a config with caps holding the pod to what a run under it gets, every size with its unit."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.backends.kubernetes.preflight import ANONYMOUS_FIX
from orchestrator.backends.kubernetes.remedies import (
    DOC,
    DOCTOR_FIXES,
    namespace_fix,
    network_policy_command,
    pod_security_command,
    runtime_class_fix,
)
from orchestrator.backends.kubernetes.settings import KubernetesSettings, WorkspaceDelivery
from tests.support.doctor import (
    account_kubeconfig,
    by_name,
    doctor,
    failures,
    runtime_class_exists,
    shell,
    skipped,
    wait_for_default_account,
    write_config,
)
from tests.support.kube import Cluster, SandboxSpace
from tests.support.namespace_doc import role_documents

pytestmark = pytest.mark.k8s

COPY = WorkspaceDelivery(mode="copy")


def names_and_codes(report: dict[str, Any]) -> list[tuple[str, str]]:
    return [(check["name"], check["code"]) for check in failures(report)]


@pytest.fixture
def bare_namespace(k8s_cluster: Cluster) -> Iterator[str]:
    """A namespace as `kubectl create namespace` makes it: no Pod Security label, no NetworkPolicy."""
    name = f"so-bare-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    try:
        wait_for_default_account(k8s_cluster, name)
        yield name
    finally:
        k8s_cluster.delete_namespaces(name)


def test_pod_security_and_the_default_deny_policy_each_get_their_own_fix(
    k8s_cluster: Cluster, bare_namespace: str, tmp_path: Path
) -> None:
    settings = KubernetesSettings(kubeconfig=str(k8s_cluster.kubeconfig), namespace=bare_namespace, workspace=COPY)
    config = write_config(tmp_path / "k8s.yaml", settings)
    proc, report = doctor(config, tmp_path, "--no-probe")
    assert proc.returncode == 1
    assert names_and_codes(report) == [
        ("PodSecurity restricted", "DOCTOR.POD_SECURITY"),
        ("default-deny NetworkPolicy", "DOCTOR.NETWORK_POLICY"),
    ]
    checks = by_name(report)
    assert checks[f"namespace {bare_namespace}"]["ok"] and checks["permissions"]["ok"]
    pod_security, policy = checks["PodSecurity restricted"], checks["default-deny NetworkPolicy"]
    assert "does not enforce Pod Security restricted" in pod_security["detail"]
    assert pod_security["fix"] == pod_security_command(bare_namespace)
    assert policy["detail"] == f"none in {bare_namespace}: every launch is refused (sandbox pods would have network)"
    assert policy["fix"] == network_policy_command(bare_namespace)
    shell(k8s_cluster, pod_security["fix"])
    shell(k8s_cluster, policy["fix"])
    _, fixed = doctor(config, tmp_path, "--no-probe")
    assert by_name(fixed)["PodSecurity restricted"]["ok"] and by_name(fixed)["default-deny NetworkPolicy"]["ok"]


def test_a_missing_runtime_class(sandbox_space: SandboxSpace, tmp_path: Path) -> None:
    klass = f"so-missing-{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path / "k8s.yaml", sandbox_space.settings(runtime_classes={"runsc": klass}))
    proc, report = doctor(config, tmp_path)
    assert proc.returncode == 1
    name = f"RuntimeClass {klass} (runtime runsc)"
    assert names_and_codes(report) == [(name, "DOCTOR.RUNTIME")]
    check = by_name(report)[name]
    assert check["detail"].startswith("does not exist (a pod using it is refused: "), check
    assert check["fix"] == runtime_class_fix("runsc", klass)
    assert "make setup" not in proc.stdout
    assert by_name(report)["limits in force (untrusted, runsc)"]["detail"] == f"not checked: {name} failed (above)"


@pytest.fixture
def controller_account(k8s_cluster: Cluster) -> Iterator[str]:
    """A namespace holding the controller's ServiceAccount (named as in the docs)."""
    name = f"so-ctl-{uuid.uuid4().hex[:8]}"
    k8s_cluster.kubectl("create", "namespace", name)
    k8s_cluster.kubectl("create", "serviceaccount", "sandbox-controller", "-n", name)
    try:
        yield name
    finally:
        k8s_cluster.delete_namespaces(name)


def bind(cluster: Cluster, namespace: str, accounts: str, rules: list[dict[str, Any]], role: str) -> None:
    """The documented Role and RoleBinding, with ``rules`` instead of the documented ones."""
    documented, binding = role_documents()
    cluster.apply(
        {**documented, "metadata": {"name": role, "namespace": namespace}, "rules": rules},
        {
            **binding,
            "metadata": {"name": role, "namespace": namespace},
            "roleRef": {**binding["roleRef"], "name": role},
            "subjects": [{**binding["subjects"][0], "namespace": accounts}],
        },
    )


def without(rules: list[dict[str, Any]], resource: str, verb: str) -> list[dict[str, Any]]:
    return [
        {**rule, "verbs": [v for v in rule["verbs"] if rule["resources"] != [resource] or v != verb]} for rule in rules
    ]


def test_a_missing_permission_names_the_role_rules_to_add(
    k8s_cluster: Cluster, sandbox_space: SandboxSpace, controller_account: str, tmp_path: Path
) -> None:
    documented, _ = role_documents()
    role = f"so-partial-{uuid.uuid4().hex[:6]}"
    rules = without(without(documented["rules"], "pods/exec", "create"), "leases", "delete")
    bind(k8s_cluster, sandbox_space.namespace, controller_account, rules, role)
    kubeconfig = account_kubeconfig(k8s_cluster, controller_account, "sandbox-controller", tmp_path / "kubeconfig")
    config = write_config(tmp_path / "k8s.yaml", sandbox_space.settings(kubeconfig=str(kubeconfig)))
    proc, report = doctor(config, tmp_path, "--no-probe")
    assert proc.returncode == 1
    assert names_and_codes(report) == [("permissions", "DOCTOR.PERMISSIONS")]
    check = by_name(report)["permissions"]
    assert check["detail"] == f"missing in {sandbox_space.namespace}: create pods/exec, delete leases"
    fix_lines = check["fix"].splitlines()
    assert fix_lines[0].startswith(
        f"add to the Role bound to the controller's identity in namespace {sandbox_space.namespace}"
    )
    added = [yaml.safe_load(line)[0] for line in fix_lines[1:]]
    assert added == [
        {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["delete"]},
    ]
    bind(k8s_cluster, sandbox_space.namespace, controller_account, rules + added, role)  # the fix, as printed
    _, fixed = doctor(config, tmp_path, "--no-probe")
    assert by_name(fixed)["permissions"]["ok"], by_name(fixed)["permissions"]


def test_an_identity_that_may_not_create_pods_is_told_so(
    k8s_cluster: Cluster, sandbox_space: SandboxSpace, controller_account: str, tmp_path: Path
) -> None:
    """Whether the namespace exists is then unknown: the check says what it does know, and what needs a pod
    admitted by dry run is not checked."""
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    bind(k8s_cluster, sandbox_space.namespace, controller_account, rules, f"so-list-{uuid.uuid4().hex[:6]}")
    kubeconfig = account_kubeconfig(k8s_cluster, controller_account, "sandbox-controller", tmp_path / "kubeconfig")
    config = write_config(tmp_path / "k8s.yaml", sandbox_space.settings(kubeconfig=str(kubeconfig)))
    proc, report = doctor(config, tmp_path, "--no-probe")
    assert proc.returncode == 1
    namespace = f"namespace {sandbox_space.namespace}"
    assert names_and_codes(report) == [
        (namespace, "DOCTOR.PERMISSIONS"),
        ("default-deny NetworkPolicy", "DOCTOR.PERMISSIONS"),
        ("permissions", "DOCTOR.PERMISSIONS"),
    ]
    assert by_name(report)[namespace]["detail"].startswith("this identity may not create pods there")
    assert '- {apiGroups: [""], resources: [pods], verbs: [create]}' in by_name(report)[namespace]["fix"]
    assert by_name(report)["PodSecurity restricted"]["checked"] is False


def test_credentials_the_api_server_refuses(sandbox_space: SandboxSpace, tmp_path: Path) -> None:
    admin = yaml.safe_load(sandbox_space.cluster.kubeconfig.read_text())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": admin["clusters"][0]["cluster"]}],
                "users": [{"name": "nobody", "user": {"token": "not-a-token"}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "test", "user": "nobody"}}],
                "current-context": "ctx",
            }
        )
    )
    config = write_config(tmp_path / "k8s.yaml", sandbox_space.settings(kubeconfig=str(kubeconfig)))
    proc, report = doctor(config, tmp_path)
    assert proc.returncode == 1
    assert names_and_codes(report) == [("engine", "DOCTOR.ENGINE")]
    engine = by_name(report)["engine"]
    assert "the API server refused" in engine["detail"] and "Unauthorized" in engine["detail"], engine
    assert engine["fix"] == DOCTOR_FIXES.engine
    assert {check["detail"] for check in skipped(report)} == {"not checked: engine failed (above)"}


def test_the_probe_gets_and_expects_what_a_run_under_the_configs_caps_gets(
    sandbox_space: SandboxSpace, tmp_path: Path
) -> None:
    """caps: {max_memory: 256m}: a run of workspace-write (512 MiB) gets 256 MiB; so does the probe pod, and
    the doctor says so, with units."""
    gvisor = runtime_class_exists(sandbox_space.cluster, "gvisor")  # only where gVisor runs pods
    settings = sandbox_space.settings(runtime_classes={"runsc": "gvisor"} if gvisor else {})
    config = write_config(tmp_path / "k8s.yaml", settings, caps={"max_memory": "256m"})
    proc, report = doctor(config, tmp_path)
    checks = by_name(report)
    assert ", memory 256MiB," in checks["profile workspace-write"]["detail"]
    probe = checks["limits in force (workspace-write, runc)"]
    assert probe["ok"], probe
    assert "memory=256MiB" in probe["detail"] and "fsize=256MiB" in probe["detail"] and "nofile=1024" in probe["detail"]
    if gvisor:
        untrusted = checks["limits in force (untrusted, runsc)"]
        assert untrusted["ok"] and "fsize=64MiB" in untrusted["detail"], untrusted
        assert proc.returncode == 0, failures(report)


def test_a_namespace_with_a_resource_quota_is_not_taken_for_a_broken_one(
    k8s_cluster: Cluster, bare_namespace: str, tmp_path: Path
) -> None:
    """A ResourceQuota on cpu and memory refuses pods without limits; the doctor's dry runs send the backend's
    own sandbox pod (requests = limits), which it admits as it admits real sandboxes."""
    k8s_cluster.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "compute", "namespace": bare_namespace},
            "spec": {"hard": {"limits.cpu": "8", "limits.memory": "16Gi", "requests.cpu": "8"}},
        }
    )
    settings = KubernetesSettings(kubeconfig=str(k8s_cluster.kubeconfig), namespace=bare_namespace, workspace=COPY)
    config = write_config(tmp_path / "k8s.yaml", settings)
    _, report = doctor(config, tmp_path, "--no-probe")
    checks = by_name(report)
    assert checks[f"namespace {bare_namespace}"]["ok"], checks[f"namespace {bare_namespace}"]
    assert names_and_codes(report) == [  # what the bare namespace lacks, nothing about the quota
        ("PodSecurity restricted", "DOCTOR.POD_SECURITY"),
        ("default-deny NetworkPolicy", "DOCTOR.NETWORK_POLICY"),
    ]


def test_a_missing_namespace_seen_by_the_controllers_own_identity(
    k8s_cluster: Cluster, sandbox_space: SandboxSpace, controller_account: str, tmp_path: Path
) -> None:
    """Its Role is only in the sandbox namespace: in a namespace that does not exist RBAC refuses the pod before
    the API server looks for the namespace. The doctor says it may not exist and gives the namespace's commands
    (before: DOCTOR.PERMISSIONS, "add to the Role ...": no Role can be added in a namespace that does not exist)."""
    documented, _ = role_documents()
    bind(
        k8s_cluster, sandbox_space.namespace, controller_account, documented["rules"], f"so-doc-{uuid.uuid4().hex[:6]}"
    )
    kubeconfig = account_kubeconfig(k8s_cluster, controller_account, "sandbox-controller", tmp_path / "kubeconfig")
    missing = f"so-missing-{uuid.uuid4().hex[:8]}"
    settings = KubernetesSettings(kubeconfig=str(kubeconfig), namespace=missing, workspace=COPY)
    config = write_config(tmp_path / "k8s.yaml", settings)
    proc, report = doctor(config, tmp_path, "--no-probe")
    assert proc.returncode == 1
    assert names_and_codes(report) == [(f"namespace {missing}", "DOCTOR.NAMESPACE")]
    check = by_name(report)[f"namespace {missing}"]
    assert check["detail"].startswith("may not exist: this identity has no right there"), check
    assert (
        check["fix"]
        == f"{namespace_fix(missing)}\nif namespace {missing} exists, bind this identity to the Role there: {DOC}"
    )
    assert {c["detail"] for c in skipped(report) if not c["name"].startswith(("limits", "runtime"))} == {
        f"not checked: namespace {missing} failed (above)"
    }


def test_credentials_taken_for_anonymous_are_named(sandbox_space: SandboxSpace, tmp_path: Path) -> None:
    """A kubeconfig whose user sends no credentials: where the API server lets anonymous callers read /version
    (the engine line passes), every other request is system:anonymous's; the doctor names the credentials."""
    admin = yaml.safe_load(sandbox_space.cluster.kubeconfig.read_text())
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "test", "cluster": admin["clusters"][0]["cluster"]}],
                "users": [{"name": "nobody", "user": {}}],
                "contexts": [{"name": "ctx", "context": {"cluster": "test", "user": "nobody"}}],
                "current-context": "ctx",
            }
        )
    )
    config = write_config(tmp_path / "k8s.yaml", sandbox_space.settings(kubeconfig=str(kubeconfig)))
    proc, report = doctor(config, tmp_path, "--no-probe")
    assert proc.returncode == 1
    if not by_name(report)["engine"]["ok"]:
        pytest.skip("this API server refuses anonymous callers outright (engine: DOCTOR.ENGINE, tested above)")
    assert names_and_codes(report) == [("credentials", "DOCTOR.ENGINE")]
    check = by_name(report)["credentials"]
    assert check["detail"].startswith("the API server takes them for system:anonymous: "), check
    assert check["fix"] == ANONYMOUS_FIX
