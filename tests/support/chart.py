"""The Helm chart in tests: helm built by the project's own script, rendered with values given as data, and
the rendered objects parsed. Shared by the render tests and the apply tests (which use the k8s_cluster
fixture of tests/support/kube.py)."""

from __future__ import annotations

import atexit
import base64
import functools
import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.paths import ROOT

REPO = ROOT
CHART = REPO / "charts" / "sandbox-orchestrator"
BUILD_SCRIPT = REPO / "scripts" / "k8s-build.sh"
BUILD_TIMEOUT_S = 3600  # a cold build compiles Kubernetes and helm from the Go module proxy

RELEASE = "so"
NAMESPACE = "so-system"
SANDBOX_NAMESPACE = "sandboxes"
FULLNAME = "so-sandbox-orchestrator"

# The Role the Kubernetes backend gets in the sandbox namespace, rule by rule, in either workspace mode.
# Nothing else, nowhere else. At least orchestrator.backends.kubernetes.preflight's NEEDED: role_grants()
# checks that, so the chart and the backend cannot drift apart.
BASE_RULES: list[dict[str, list[str]]] = [
    {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "get", "list", "watch", "patch", "delete", "deletecollection"],
    },
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create", "get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["networking.k8s.io"], "resources": ["networkpolicies"], "verbs": ["get", "list"]},
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "list", "watch", "create", "update", "delete"],
    },
]

# The config's backend section, key by key (the contract with the Kubernetes backend).
BACKEND_KEYS = {"kind", "kubernetes"}
BACKEND_K8S_KEYS = {
    "kubeconfig",
    "namespace",
    "image_pull_policy",
    "seccomp",
    "runtime_classes",
    "workspace",
}
BACKEND_WORKSPACE_KEYS = {"mode", "claim", "root", "copy_max_bytes"}


def project_version() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


@functools.cache
def bin_dir() -> Path:
    """The directory with helm and kubectl: ``scripts/k8s-build.sh`` prints it (a cached build returns at
    once; a running build is waited for through its lock)."""
    proc = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{BUILD_SCRIPT.name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = proc.stdout.strip().splitlines()
    directory = Path(lines[-1]) if lines else Path()
    if not (directory / "helm").is_file():
        pytest.fail(f"{BUILD_SCRIPT.name} printed {proc.stdout!r}: no helm there")
    return directory


@functools.cache
def _helm_home() -> Path:
    home = Path(tempfile.mkdtemp(prefix="so-chart-helm-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    return home


def helm_env(kubeconfig: Path | None = None) -> dict[str, str]:
    """helm with its own cache/config/data dirs (no repositories, nothing of the user's) and no proxy."""
    home = _helm_home()
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(
        HELM_CACHE_HOME=str(home / "cache"),
        HELM_CONFIG_HOME=str(home / "config"),
        HELM_DATA_HOME=str(home / "data"),
    )
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def helm(*args: str, kubeconfig: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bin_dir() / "helm"), *args],
        capture_output=True,
        text=True,
        env=helm_env(kubeconfig),
        timeout=timeout,
        check=False,
    )


def values_file(values: Mapping[str, Any] | None, directory: Path) -> list[str]:
    """``-f FILE`` arguments for these values (none for None)."""
    if not values:
        return []
    path = directory / f"values-{len(list(directory.iterdir()))}.yaml"
    path.write_text(yaml.safe_dump(dict(values), sort_keys=False), encoding="utf-8")
    return ["-f", str(path)]


def template(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="so-chart-values-") as tmp:
        return helm("template", release, str(CHART), "--namespace", namespace, *values_file(values, Path(tmp)))


def render(values: Mapping[str, Any] | None = None, **kwargs: str) -> list[dict[str, Any]]:
    """The chart's objects for these values (the test fails with helm's message when it does not render)."""
    proc = template(values, **kwargs)
    if proc.returncode != 0:
        pytest.fail(f"helm template failed:\n{proc.stderr}")
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def render_error(values: Mapping[str, Any] | None = None, **kwargs: str) -> str:
    """helm's refusal of these values (the test fails when they render)."""
    proc = template(values, **kwargs)
    if proc.returncode == 0:
        pytest.fail(f"helm template rendered values it should refuse: {values!r}")
    return proc.stderr


def notes(values: Mapping[str, Any] | None = None) -> str:
    """NOTES.txt as helm install prints it for these values, rendered without a cluster: `helm template`
    leaves NOTES.txt out, so a copy of the chart renders it through `tpl` into a ConfigMap of its own."""
    with tempfile.TemporaryDirectory(prefix="so-chart-notes-") as tmp:
        chart = Path(tmp) / CHART.name
        shutil.copytree(CHART, chart)
        (chart / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text(encoding="utf-8"))
        (chart / "templates" / "zz-notes.yaml").write_text(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
            'data:\n  notes: {{ tpl (.Files.Get "notes.txt") . | quote }}\n',
            encoding="utf-8",
        )
        proc = helm(
            "template", RELEASE, str(chart), "--namespace", NAMESPACE,
            "--show-only", "templates/zz-notes.yaml", *values_file(values, Path(tmp)),
        )  # fmt: skip
    if proc.returncode != 0:
        pytest.fail(f"helm template (NOTES.txt) failed:\n{proc.stderr}")
    return str(yaml.safe_load(proc.stdout)["data"]["notes"])


def lint(values: Mapping[str, Any] | None = None) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="so-chart-values-") as tmp:
        return helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE, *values_file(values, Path(tmp)))


# -- picking objects --------------------------------------------------------------------------------


def of_kind(docs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: Iterable[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, found {[d['metadata']['name'] for d in found]}"
    return found[0]


def config_text(docs: Iterable[dict[str, Any]]) -> str:
    return str(one(docs, "ConfigMap")["data"]["config.yaml"])


def config_of(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    data = yaml.safe_load(config_text(docs))
    assert isinstance(data, dict)
    return data


def secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode("utf-8") for k, v in secret.get("data", {}).items()}


def controller_pod(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    return dict(one(docs, "Deployment")["spec"]["template"])


def controller_container(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    containers = controller_pod(docs)["spec"]["containers"]
    assert [c["name"] for c in containers] == ["controller"]
    return dict(containers[0])


def normalized_rules(
    rules: Iterable[Mapping[str, Any]],
) -> list[tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]]:
    """Rules as sorted tuples (order of rules and of the items in them does not matter; every key does)."""
    out = []
    for rule in rules:
        assert set(rule) <= {"apiGroups", "resources", "verbs"}, f"unexpected keys in {rule}"
        out.append((tuple(sorted(rule["apiGroups"])), tuple(sorted(rule["resources"])), tuple(sorted(rule["verbs"]))))
    return sorted(out)


def role_grants(rules: Iterable[Mapping[str, Any]], verb: str, resource: str, subresource: str, group: str) -> bool:
    """Whether these rules allow the verb on the resource (``resource/subresource``) of the API group, as
    RBAC matches them (a rule for ``pods`` does not cover ``pods/exec``)."""
    name = f"{resource}/{subresource}" if subresource else resource
    return any(group in rule["apiGroups"] and name in rule["resources"] and verb in rule["verbs"] for rule in rules)


def can_i_resource(resource: str, subresource: str, group: str) -> str:
    """A (resource, subresource, group) as ``kubectl auth can-i`` names it: ``leases.coordination.k8s.io``,
    ``pods/exec``."""
    name = f"{resource}.{group}" if group else resource
    return f"{name}/{subresource}" if subresource else name
