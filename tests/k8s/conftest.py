"""The Kubernetes test tier: a real single-node cluster (scripts/k8s-cluster.sh) on 127.0.0.1.

``k8s_cluster`` brings the cluster up for the session (so a bare ``pytest tests/k8s`` works) and takes it
down at the end only when this session started it: a cluster that was already up (``make k8s-up``, another
tier) is left running. ``sandbox_namespace`` gives each test module a fresh namespace under Pod Security
"restricted", deleted after the module.

The cluster always lives in the project's default state and run directories: tests/conftest.py points
SANDBOX_STATE_DIR at a scratch directory for the orchestrator's own state, which must not move (and
rebuild) the cluster, so the script runs without that variable.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import ROOT, Cluster

SCRIPT = ROOT / "scripts" / "k8s-cluster.sh"
BUILD_SCRIPT = ROOT / "scripts" / "k8s-build.sh"
# a cold start may build the binaries first (about 3.5 min on a fresh machine) and import the images
UP_TIMEOUT = 1800
DOWN_TIMEOUT = 300


def _script_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in {"SANDBOX_STATE_DIR", "SANDBOX_RUN_DIR"}}


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", *args], capture_output=True, text=True, timeout=timeout, env=_script_env())


def _cluster_from_env() -> Cluster:
    """KUBECONFIG and the bin dir as ``k8s-cluster.sh env`` prints them; the server from the kubeconfig."""
    bin_dir = Path(_run(str(BUILD_SCRIPT), "--bin-dir", timeout=30).stdout.strip())
    env = _run(str(SCRIPT), "env", timeout=30)
    assert env.returncode == 0, env.stderr
    kubeconfig = next(
        Path(line.split("=", 1)[1]) for line in env.stdout.splitlines() if line.startswith("export KUBECONFIG=")
    )
    config = yaml.safe_load(kubeconfig.read_text())
    return Cluster(kubeconfig=kubeconfig, bin_dir=bin_dir, server=config["clusters"][0]["cluster"]["server"])


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[Cluster]:
    if os.geteuid() != 0:
        pytest.skip("the test cluster needs root (kubelet and containerd make cgroups, mounts, network namespaces)")
    already_up = _run(str(SCRIPT), "status", timeout=60).returncode == 0
    if not already_up:
        up = _run(str(SCRIPT), "up", timeout=UP_TIMEOUT)
        assert up.returncode == 0, f"k8s-cluster.sh up failed:\n{up.stderr[-4000:]}"
    try:
        yield _cluster_from_env()
    finally:
        if not already_up:
            down = _run(str(SCRIPT), "down", timeout=DOWN_TIMEOUT)
            assert down.returncode == 0, f"k8s-cluster.sh down failed:\n{down.stderr[-4000:]}"


@pytest.fixture(scope="session")
def k8s_api(k8s_cluster: Cluster) -> Iterator[Any]:
    """An ApiClient of the official client for the cluster's admin kubeconfig."""
    from kubernetes import config

    client = config.new_client_from_config(config_file=str(k8s_cluster.kubeconfig))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def sandbox_namespace(k8s_api: Any) -> Iterator[str]:
    """A fresh namespace for this test module where Pod Security "restricted" is enforced."""
    from kubernetes import client

    core = client.CoreV1Api(k8s_api)
    name = f"so-test-{secrets.token_hex(4)}"
    core.create_namespace(
        {
            "metadata": {
                "name": name,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            }
        }
    )
    try:
        # pods are refused until the namespace's default ServiceAccount exists (the controller-manager
        # makes it a moment after the namespace)
        deadline = time.monotonic() + 30
        while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
            assert time.monotonic() < deadline, f"no default ServiceAccount in {name} after 30 s"
            time.sleep(0.1)
        yield name
    finally:
        core.delete_namespace(name, propagation_policy="Background")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything in tests/k8s needs the cluster: marked k8s, so ``-m 'not k8s'`` leaves it out."""
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.k8s)
