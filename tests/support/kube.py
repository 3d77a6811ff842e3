"""Fixtures for tests on the real cluster (a pytest plugin: tests/conftest.py loads it).

``k8s_cluster`` (session): the project's cluster (``scripts/k8s-cluster.sh up``), stopped at the end only
if a test session started it and no other test session still uses it. ``sandbox_space`` (module): a
namespace of its own as the chart makes one (PodSecurity ``restricted``, a default-deny NetworkPolicy),
with a workspace claim bound to a directory of this host (two-sided like the chart's
``workspaces.hostPath``: the pods mount a sub-path of the claim, the test process sees the same
directory), and the backend settings that go with it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from orchestrator.backends.kubernetes.settings import KubernetesSettings, WorkspaceDelivery
from scripts.testcluster.settings import TEST_SESSIONS
from tests.support.images import SANDBOX_UID
from tests.support.paths import ROOT

REPO = ROOT
CLUSTER_SCRIPT = Path(os.environ.get("SO_K8S_CLUSTER_SCRIPT") or REPO / "scripts" / "k8s-cluster.sh")
CLAIM = "sandbox-workspaces"


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path
    bin_dir: Path
    server: str

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=check,
        )

    def apply(self, *manifests: dict[str, object]) -> None:
        docs = "\n---\n".join(json.dumps(m) for m in manifests)
        self.kubectl("apply", "-f", "-", input=docs)

    def delete_namespaces(self, *names: str) -> None:
        """Delete the namespaces; wait only until none of their pods is left (a pod holds the node's CPU, which
        the next module's pods need). The rest (service accounts, claims, policies) goes in the background:
        waiting for the namespace controller to finish costs ~10 s a namespace and frees nothing a test uses."""
        self.kubectl("delete", "namespace", *names, "--ignore-not-found", "--wait=false", check=False)
        for name in names:
            self.kubectl("wait", "--for=delete", "pod", "--all", "-n", name, "--timeout=120s", check=False)


def host_env() -> dict[str, str]:
    """The environment for the project's scripts: the machine's state dir (their builds and caches are
    there, and the engine setup.sh recorded), not the tests' own."""
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOX_STATE_DIR", "SANDBOX_RUN_DIR")}
    host_state = os.environ.get("SO_TESTS_HOST_STATE_DIR", "")
    if host_state:
        env["SANDBOX_STATE_DIR"] = host_state
    return env


def cluster_script(*args: str) -> subprocess.CompletedProcess[str]:
    """The cluster script with the machine's state dir (its builds are cached there), not the tests' own."""
    return subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), *args], capture_output=True, text=True, timeout=1800, env=host_env()
    )


def env_value(text: str, name: str) -> str:
    for raw in text.splitlines():
        line = raw.removeprefix("export ").strip()
        if line.startswith(f"{name}="):
            return line.split("=", 1)[1].strip("'\"")
    raise AssertionError(f"{name} not in `k8s-cluster.sh env`: {text!r}")


@contextmanager
def sessions_locked(directory: Path) -> Iterator[None]:
    fd = os.open(directory / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def other_live_sessions(directory: Path) -> list[int]:
    """Pids of the other test sessions registered in ``directory`` that still run (stale entries go)."""
    live = []
    for entry in directory.glob("session-*"):
        pid = int(entry.name.removeprefix("session-"))
        if pid == os.getpid():
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            entry.unlink(missing_ok=True)
            continue
        live.append(pid)
    return live


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[Cluster]:
    """The cluster, up for the session. Test sessions on one machine share it: each registers itself next
    to the cluster's state, and the cluster is stopped at the end only when a test session started it and
    no other session still uses it. A cluster found up with no session around (``make k8s-up``, or one a
    crashed session left) is nobody's to stop."""
    if os.geteuid() != 0:
        pytest.skip("the test cluster needs root (a kubelet and containerd)")
    env = cluster_script("env")
    kubeconfig = Path(env_value(env.stdout, "KUBECONFIG"))
    sessions = kubeconfig.parent / TEST_SESSIONS
    sessions.mkdir(parents=True, exist_ok=True)
    started_by_tests = sessions / "started-by-tests"
    me = sessions / f"session-{os.getpid()}"
    with sessions_locked(sessions):
        if cluster_script("status").returncode != 0:
            started = cluster_script("up")
            if started.returncode != 0:
                raise AssertionError(f"k8s-cluster.sh up failed:\n{started.stdout[-4000:]}\n{started.stderr[-4000:]}")
            started_by_tests.touch()
        elif not other_live_sessions(sessions):
            started_by_tests.unlink(missing_ok=True)
        me.touch()
    path = env_value(env.stdout, "PATH")
    bin_dir = Path(path.split(":", 1)[0])
    server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    try:
        yield Cluster(kubeconfig=kubeconfig, bin_dir=bin_dir, server=server)
    finally:
        with sessions_locked(sessions):
            me.unlink(missing_ok=True)
            if started_by_tests.exists() and not other_live_sessions(sessions):
                stopped = cluster_script("down")
                started_by_tests.unlink(missing_ok=True)
                assert stopped.returncode == 0, stopped.stderr[-4000:]


@dataclass(frozen=True)
class SandboxSpace:
    cluster: Cluster
    namespace: str
    root: Path  # the claim's directory as this process sees it

    def settings(self, **changes: object) -> KubernetesSettings:
        fields: dict[str, object] = {
            "kubeconfig": str(self.cluster.kubeconfig),
            "namespace": self.namespace,
            "image_pull_policy": "Never",
            "seccomp": "localhost",
            "workspace": WorkspaceDelivery(mode="pvc", claim=CLAIM, root=str(self.root)),
            "start_timeout_s": 60.0,
        }
        fields.update(changes)
        return KubernetesSettings(**fields)  # type: ignore[arg-type]

    def workspace(self, name: str | None = None) -> Path:
        path = self.root / (name or uuid.uuid4().hex[:12])
        path.mkdir(parents=True)
        os.chown(path, SANDBOX_UID, SANDBOX_UID)
        return path


def space_manifests(namespace: str, root: Path) -> list[dict[str, object]]:
    volume = f"{namespace}-workspaces"
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            },
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "default-deny", "namespace": namespace},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]},
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume, "labels": {"sandbox-orchestrator.test/namespace": namespace}},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": str(root), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": CLAIM},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": CLAIM, "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": volume,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        },
    ]


def open_space(cluster: Cluster, prefix: str = "so-test") -> SandboxSpace:
    """A fresh namespace (Pod Security "restricted", default-deny NetworkPolicy) with its workspace claim,
    bound to a directory of this host; ``close_space`` removes it all."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    root = Path(tempfile.mkdtemp(prefix=f"{namespace}-", dir="/var/tmp"))
    root.chmod(0o755)
    cluster.apply(*space_manifests(namespace, root))
    cluster.kubectl("wait", "-n", namespace, "--for=jsonpath={.status.phase}=Bound", f"pvc/{CLAIM}", "--timeout=60s")
    return SandboxSpace(cluster=cluster, namespace=namespace, root=root)


def close_space(space: SandboxSpace) -> None:
    space.cluster.delete_namespaces(space.namespace)
    space.cluster.kubectl("delete", "pv", f"{space.namespace}-workspaces", "--wait=false", check=False)
    shutil.rmtree(space.root, ignore_errors=True)


@pytest.fixture(scope="module")
def sandbox_space(k8s_cluster: Cluster) -> Iterator[SandboxSpace]:
    space = open_space(k8s_cluster)
    try:
        yield space
    finally:
        close_space(space)
