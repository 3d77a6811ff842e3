"""Fixtures of the Kubernetes tests that need no more than a namespace.

``k8s_cluster`` (the cluster, started by ``scripts/k8s-cluster.sh up`` when it is not up, stopped at the
end only when this session started it) comes from tests/support/kube.py. Here: ``k8s_api``, the official
client for the cluster's admin kubeconfig, and ``sandbox_namespace``, a fresh namespace per test module
under Pod Security "restricted" (deleted after the module).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:  # the fixture's type lives in the plugin tests/conftest.py loads
    from tests.support.kube import Cluster


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
