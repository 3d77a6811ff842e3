"""Pods as the Kubernetes backend launches sandboxes, for the tests of tests/k8s (a module: they import it)."""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest
from kubernetes import client

from scripts.testcluster.settings import MINIMAL_IMAGE

POD_TIMEOUT = 90.0


def hardened_pod(
    name: str,
    command: list[str],
    *,
    image: str = MINIMAL_IMAGE,
    seccomp: dict[str, str] | None = None,
    runtime_class: str | None = None,
) -> dict[str, Any]:
    """A pod as the Kubernetes backend launches a sandbox: non-root, read-only root, no capabilities, no
    privilege escalation, a seccomp profile, no service-account token, no service links, no restart."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 1000,
            "runAsGroup": 1000,
            "seccompProfile": seccomp or {"type": "RuntimeDefault"},
        },
        "containers": [
            {
                "name": "main",
                "image": image,
                "imagePullPolicy": "Never",
                "command": command,
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
                "resources": {
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                    "limits": {"cpu": "100m", "memory": "64Mi"},
                },
            }
        ],
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def run_pod(api: Any, namespace: str, pod: dict[str, Any]) -> tuple[str, str]:
    """Creates the pod, waits until it ended, returns (phase, log); the pod is deleted afterwards."""
    core = client.CoreV1Api(api)
    name = pod["metadata"]["name"]
    core.create_namespaced_pod(namespace, pod)
    try:
        deadline = time.monotonic() + POD_TIMEOUT
        phase = "Pending"
        while time.monotonic() < deadline:
            phase = core.read_namespaced_pod_status(name, namespace).status.phase
            if phase in {"Succeeded", "Failed"}:
                break
            time.sleep(0.2)
        else:
            events = core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}")
            pytest.fail(f"pod {name} still {phase} after {POD_TIMEOUT} s: {[e.message for e in events.items]}")
        return phase, core.read_namespaced_pod_log(name, namespace)
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"
