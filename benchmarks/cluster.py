"""The test cluster a benchmark runs on: found and started as the tests' ``k8s_cluster`` fixture does.

Through tests.support.kube: ``scripts/k8s-cluster.sh`` with the machine's state dir (``cluster_script``),
``status``, then ``up`` when it is down (its builds are cached: seconds). While the benchmark runs it is
registered beside the test sessions (``test-sessions/session-<pid>`` next to the kubeconfig), so a test
session that started the cluster does not stop it under the benchmark, and a benchmark that would restart
it can see who else uses it (``other_sessions``). It leaves as a test session does: the cluster is stopped
only when a test session started it and no other session still uses it. A cluster the benchmark started
itself is left up (``make k8s-down`` stops it).

``check``: the cluster found and its API server answering, nothing measured (the benchmarks' ``--check``).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support

from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from scripts.testcluster.settings import TEST_SESSIONS
from tests.support.kube import Cluster, cluster_script, env_value, other_live_sessions, sessions_locked

STARTED_BY_TESTS = "started-by-tests"  # the fixture's mark: a test session started the cluster


def sessions_dir(cluster: Cluster) -> Path:
    return cluster.kubeconfig.parent / TEST_SESSIONS


def ensure_up() -> None:
    """``k8s-cluster.sh status``, and ``up`` when it is down (``SANDBOX_K8S_PLEG`` from this environment)."""
    if cluster_script("status").returncode == 0:
        return
    up = cluster_script("up")
    if up.returncode != 0:
        raise SystemExit(f"scripts/k8s-cluster.sh up failed:\n{up.stdout[-2000:]}\n{up.stderr[-2000:]}")


@contextmanager
def cluster_session() -> Iterator[Cluster]:
    """The test cluster, up, with this benchmark registered as one more session for as long as it runs."""
    if os.geteuid() != 0:
        raise SystemExit("the test cluster needs root (a kubelet and containerd)")
    env = cluster_script("env")
    if env.returncode != 0:
        raise SystemExit(f"scripts/k8s-cluster.sh env failed: {env.stderr[-2000:]}")
    kubeconfig = Path(env_value(env.stdout, "KUBECONFIG"))
    bin_dir = Path(env_value(env.stdout, "PATH").split(":", 1)[0])
    sessions = kubeconfig.parent / TEST_SESSIONS
    sessions.mkdir(parents=True, exist_ok=True)
    me = sessions / f"session-{os.getpid()}"
    with sessions_locked(sessions):
        was_up = cluster_script("status").returncode == 0
        ensure_up()
        if not was_up or not other_live_sessions(sessions):
            # started here, or found up with no session around: nobody's to stop (as the fixture has it)
            (sessions / STARTED_BY_TESTS).unlink(missing_ok=True)
        me.touch()
    try:
        server = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        yield Cluster(kubeconfig=kubeconfig, bin_dir=bin_dir, server=server)
    finally:
        with sessions_locked(sessions):
            me.unlink(missing_ok=True)
            if (sessions / STARTED_BY_TESTS).exists() and not other_live_sessions(sessions):
                cluster_script("down")  # what the test session that started it would have done
                (sessions / STARTED_BY_TESTS).unlink(missing_ok=True)


def other_sessions(cluster: Cluster) -> list[int]:
    """Pids of the other sessions (test runs, benchmarks) using the cluster now."""
    sessions = sessions_dir(cluster)
    with sessions_locked(sessions):
        return sorted(other_live_sessions(sessions))


def check(cluster: Cluster) -> dict[str, Any]:
    """The API server's version and the nodes' readiness, printed with a ``SUMMARY`` line: what a benchmark's
    ``--check`` runs instead of its measured part."""
    api = k8s_config.new_client_from_config(config_file=str(cluster.kubeconfig))
    try:
        version = k8s_client.VersionApi(api).get_code().git_version
        nodes = {
            node.metadata.name: next((c.status for c in node.status.conditions or [] if c.type == "Ready"), "?")
            for node in k8s_client.CoreV1Api(api).list_node().items
        }
    finally:
        api.close()
    figures = {
        "check": "ok" if nodes and all(ready == "True" for ready in nodes.values()) else "nodes not ready",
        "server": cluster.server,
        "version": version,
        "nodes ready": nodes,
        "other sessions": other_sessions(cluster),
    }
    print(f"test cluster at {cluster.server}: Kubernetes {version}; nodes ready {nodes}")
    print(f"kubeconfig {cluster.kubeconfig}; other sessions using it: {figures['other sessions'] or 'none'}")
    print("--check: the cluster was found and answers; nothing measured")
    print("SUMMARY " + json.dumps(figures))
    return figures
