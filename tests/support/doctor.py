"""``sandboxctl doctor`` against the real cluster, for tests/k8s: a config for a namespace, an identity of its
own (a ServiceAccount's token in a kubeconfig of its own), and the report read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from orchestrator.backends.kubernetes.settings import KubernetesSettings
from tests.support.kube import Cluster

SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]


def write_config(path: Path, settings: KubernetesSettings, **top: Any) -> Path:
    """A config whose backend is ``settings`` (and ``top``: other sections, caps ...)."""
    backend = {"kind": "kubernetes", "kubernetes": settings.model_dump(mode="json", exclude_none=True)}
    path.write_text(yaml.safe_dump({"backend": backend, **top}))
    return path


def doctor(config: Path, tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``sandboxctl doctor --config … --json`` as a user runs it; the report parsed."""
    args = ["doctor", "--config", str(config), "--evidence", str(tmp_path / "doctor-evidence.jsonl"), "--json", *extra]
    proc = subprocess.run([*SANDBOXCTL, *args], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, dict(json.loads(proc.stdout))


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {check["name"]: check for check in report["checks"]}


def failures(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The checks that were made and failed (not those skipped because of them)."""
    return [check for check in report["checks"] if check["checked"] and not check["ok"]]


def skipped(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [check for check in report["checks"] if not check["checked"]]


def kubectl_env(cluster: Cluster) -> dict[str, str]:
    """The environment a person's shell has: the cluster's kubectl on PATH, the admin kubeconfig."""
    return {**os.environ, "PATH": f"{cluster.bin_dir}:{os.environ['PATH']}", "KUBECONFIG": str(cluster.kubeconfig)}


def shell(cluster: Cluster, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` run by sh, as pasted from the docs or the doctor's fix."""
    proc = subprocess.run(
        ["sh", "-e", "-c", script], env=kubectl_env(cluster), capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, f"{script}\n{proc.stdout}\n{proc.stderr}"
    return proc


def wait_for_default_account(cluster: Cluster, namespace: str) -> None:
    """Pods are refused until a namespace's default ServiceAccount exists (made a moment after it)."""
    deadline = time.monotonic() + 30
    while cluster.kubectl("get", "serviceaccount", "default", "-n", namespace, check=False).returncode != 0:
        assert time.monotonic() < deadline, f"no default ServiceAccount in {namespace} after 30 s"
        time.sleep(0.2)


def account_kubeconfig(cluster: Cluster, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as ServiceAccount ``namespace/account`` (a token of 1 h), as a
    controller outside the cluster would be given."""
    token = cluster.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "test", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "test", "user": account}}],
        "current-context": "ctx",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def runtime_class_exists(cluster: Cluster, name: str) -> bool:
    """The test cluster has RuntimeClass gvisor only where gVisor really runs pods."""
    return cluster.kubectl("get", "runtimeclass", name, check=False).returncode == 0
