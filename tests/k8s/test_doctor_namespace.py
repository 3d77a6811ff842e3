"""``sandboxctl doctor`` and a sandbox namespace, on the real cluster: a missing one is one failure, said first,
with the commands that make it (and nothing else about the namespace reported failed with a guessed fix); the
namespace docs/kubernetes.md makes without the chart ("A sandbox namespace without the chart"), its commands
run as written, passes every namespace check as the controller's own ServiceAccount."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.backends.kubernetes.remedies import namespace_fix
from orchestrator.backends.kubernetes.settings import KubernetesSettings, WorkspaceDelivery
from orchestrator.domain.errors import OrchestratorError
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.profiles import ProfileRegistry
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
from tests.support.kube import Cluster
from tests.support.namespace_doc import ACCOUNT, blocks, renamed

pytestmark = pytest.mark.k8s

COPY = WorkspaceDelivery(mode="copy")  # no claim needed: these tests launch nothing that gets that far


def settings(cluster: Cluster, namespace: str, kubeconfig: Path | None = None) -> KubernetesSettings:
    return KubernetesSettings(
        kubeconfig=str(kubeconfig or cluster.kubeconfig), namespace=namespace, image_pull_policy="Never", workspace=COPY
    )


def test_a_missing_namespace_is_one_failure_said_first_with_its_commands(k8s_cluster: Cluster, tmp_path: Path) -> None:
    namespace = f"so-missing-{uuid.uuid4().hex[:8]}"
    config = write_config(tmp_path / "k8s.yaml", settings(k8s_cluster, namespace))
    proc, report = doctor(config, tmp_path)
    assert proc.returncode == 1
    (failure,) = failures(report)
    assert (failure["name"], failure["code"]) == (f"namespace {namespace}", "DOCTOR.NAMESPACE")
    assert failure["detail"].startswith("does not exist"), failure
    assert failure["fix"] == namespace_fix(namespace)
    names = [check["name"] for check in report["checks"]]
    assert names.index(failure["name"]) == 1  # right after the engine's line (the API server answered)
    assert by_name(report)["engine"]["ok"]
    not_checked = {check["name"]: check["detail"] for check in skipped(report)}
    for name in ("PodSecurity restricted", "default-deny NetworkPolicy", "RuntimeClass gvisor (runtime runsc)"):
        assert not_checked.pop(name) == f"not checked: namespace {namespace} does not exist"
    assert not_checked.pop("permissions") == f"not checked: namespace {namespace} does not exist"
    assert "limits in force (workspace-write, runc)" in not_checked and "runtime runsc for untrusted" in not_checked
    assert set(not_checked.values()) == {f"not checked: namespace {namespace} failed (above)"}
    text = proc.stdout + proc.stderr
    assert "make setup" not in text and "RoleBinding for the controller" not in text


async def test_a_run_in_a_missing_namespace_names_the_namespace(k8s_cluster: Cluster, tmp_path: Path) -> None:
    """The run's own refusal names the true cause too (a namespace that does not exist lists no policy either)."""
    namespace = f"so-missing-{uuid.uuid4().hex[:8]}"
    policy = tmp_path / "policy.yaml"
    policy.write_text("safety: {mode: allow, denylist: [], rules: []}\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    backend = KubernetesBackend(settings(k8s_cluster, namespace))
    orch = build_orchestrator(
        policy, workspace=workspace, evidence_path=tmp_path / "e.jsonl", backend=backend, profiles=ProfileRegistry()
    )
    try:
        with pytest.raises(OrchestratorError) as refused:
            await orch.execute({"tool": "shell_command", "command": "true"}, workspace=workspace)
    finally:
        await orch.aclose()
        await backend.close()
    assert refused.value.code == "SANDBOX.UNAVAILABLE"
    assert f"namespace {namespace} does not exist" in refused.value.message
    assert "A sandbox namespace without the chart" in refused.value.message


@pytest.fixture
def documented(k8s_cluster: Cluster) -> Iterator[tuple[str, str]]:
    """The documented namespace and the controller's ServiceAccount, under names of this test's own."""
    suffix = uuid.uuid4().hex[:8]
    namespace, accounts = f"so-doc-{suffix}", f"so-doc-ctl-{suffix}"
    try:
        yield namespace, accounts
    finally:
        k8s_cluster.delete_namespaces(namespace, accounts)


def test_the_documented_namespace_passes_the_doctors_namespace_checks(
    k8s_cluster: Cluster, documented: tuple[str, str], tmp_path: Path
) -> None:
    namespace, accounts = documented
    for block in blocks():
        shell(k8s_cluster, renamed(block, namespace, accounts))
    k8s_cluster.kubectl("create", "namespace", accounts)  # where the controller runs: not the docs' business
    k8s_cluster.kubectl("create", "serviceaccount", ACCOUNT, "-n", accounts)
    wait_for_default_account(k8s_cluster, namespace)
    kubeconfig = account_kubeconfig(k8s_cluster, accounts, ACCOUNT, tmp_path / "controller.kubeconfig")
    config = write_config(tmp_path / "k8s.yaml", settings(k8s_cluster, namespace, kubeconfig))
    proc, report = doctor(config, tmp_path, "--no-probe")
    checks = by_name(report)
    namespace_checks = ["engine", f"namespace {namespace}", "PodSecurity restricted", "default-deny NetworkPolicy"]
    namespace_checks.append("permissions")
    gvisor = runtime_class_exists(k8s_cluster, "gvisor")  # only where gVisor runs pods (scripts/testcluster)
    if gvisor:  # the controller may not read RuntimeClasses: a pod naming it admitted (dry run) shows it
        namespace_checks += ["RuntimeClass gvisor (runtime runsc)", "runtime runsc for untrusted"]
    for name in namespace_checks:
        assert checks[name]["ok"], (name, checks[name])
    assert not skipped(report), skipped(report)
    if gvisor:  # then nothing else can fail here
        assert proc.returncode == 0, failures(report)
