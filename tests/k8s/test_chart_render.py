"""The Helm chart, rendered by helm itself (built by scripts/k8s-build.sh): lint, every variant renders, and
the security-relevant facts of what it renders, exactly. The controller's rendered config is validated by
the project's own config model; the token Secret is followed through its mounted files to credentials;
custom profiles are loaded from the mounted layout by the project's own profile loader."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.backends.kubernetes.egress import LABEL_EGRESS
from orchestrator.backends.kubernetes.preflight import NEEDED
from orchestrator.backends.kubernetes.settings import KubernetesSettings
from orchestrator.evidence.paths import default_evidence_path
from orchestrator.pipeline.config import (
    ApprovalsSection,
    EvidenceSection,
    OrchestratorConfig,
    PoolSettings,
    ServiceSection,
    load_config,
)
from orchestrator.pipeline.governing import check_workspace
from orchestrator.pipeline.this_process import CONTROLLER_ID_ENV
from orchestrator.profiles import ProfileRegistry
from orchestrator.service.tokens import load_credentials
from scripts.testcluster.settings import API_PORT, LOOPBACK
from tests.support.chart import (
    BACKEND_K8S_KEYS,
    BACKEND_KEYS,
    BACKEND_WORKSPACE_KEYS,
    BASE_RULES,
    CHART,
    FULLNAME,
    NAMESPACE,
    REPO,
    SANDBOX_NAMESPACE,
    config_of,
    config_text,
    controller_container,
    controller_pod,
    lint,
    normalized_rules,
    notes,
    of_kind,
    one,
    project_version,
    render,
    render_error,
    role_grants,
    secret_data,
)

pytestmark = pytest.mark.k8s

TOKENS: list[dict[str, Any]] = [
    {"subject": "ci-runner", "role": "agent", "tenants": ["team-a"], "value": "agent-token-0123456789"},
    {"subject": "alice", "role": "approver", "tenants": ["team-a", "team-b"], "value": "approver-token-0123456789"},
    {"subject": "ops", "role": "admin", "key": "ops-token", "value": "admin-token-0123456789"},
]

# Each variant the chart supports; every security fact is checked for each.
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "copy": {"workspaces": {"mode": "copy"}},
    "tokens": {"tokens": {"entries": TOKENS}},
    "existing-secret": {
        "tokens": {
            "existingSecret": "so-tokens",
            "entries": [{k: v for k, v in t.items() if k != "value"} for t in TOKENS],
        }
    },
    "gvisor": {"gvisor": {"runtimeClass": {"create": True, "nodeSelector": {"sandbox-orchestrator/gvisor": "true"}}}},
    "hostpath": {"workspaces": {"hostPath": {"enabled": True, "path": "/srv/so-workspaces"}}},
    "claims": {
        "workspaces": {"claims": {"create": True, "sandboxVolumeName": "nfs-a", "controllerVolumeName": "nfs-b"}}
    },
    "state-pvc": {"state": {"persistence": {"enabled": True}}},
    "external-namespace": {"sandboxNamespace": {"create": False, "name": "team-sandboxes"}},
    "localhost-seccomp": {"backend": {"seccomp": "localhost"}},
    # a cluster whose pods cannot reach the API server (the project's test cluster): the node's network
    "host-network": {
        "controller": {
            "port": 18700,
            "hostNetwork": {"enabled": True, "apiServerHost": LOOPBACK, "apiServerPort": API_PORT},
        }
    },
    # a controller user of its own (profiles that write as 10001:10001): workspaces follow it
    "own-user": {"controller": {"runAsUser": 10001, "runAsGroup": 10001}},
}

# the controller's default uid:gid: the built-in profiles' user, so that pvc workspaces fit them
DEFAULT_UID = DEFAULT_GID = 1000
# where the controller sees the workspaces: outside its state dir, where it refuses every workspace
WORKSPACES_ROOT = "/workspaces"

CLUSTER_SCOPED = {"Namespace", "RuntimeClass", "PersistentVolume"}


def sandbox_ns(values: dict[str, Any]) -> str:
    return str(values.get("sandboxNamespace", {}).get("name", SANDBOX_NAMESPACE))


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def variant(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    values = VARIANTS[request.param]
    return request.param, values, render(values)


# -- the chart itself --------------------------------------------------------------------------------


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    assert chart["apiVersion"] == "v2"
    assert chart["name"] == "sandbox-orchestrator"
    assert chart["version"] == "0.1.0"
    assert chart["appVersion"] == project_version() == "0.1.0"
    assert chart["type"] == "application"


@pytest.mark.parametrize("name", ["default", *sorted(set(VARIANTS) - {"default"})])
def test_lint_strict(name: str) -> None:
    proc = lint(VARIANTS[name])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout


def test_values_yaml_is_commented_and_schema_complete() -> None:
    """values.yaml: each top-level block and each key that is not self-evident carries a comment; the schema
    forbids keys it does not know at every level (a typo in a value is an error, not silently ignored)."""
    lines = (CHART / "values.yaml").read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        if re.match(r"^[A-Za-z]\w*:", line):  # a top-level key: a comment right above it
            above = [x for x in lines[max(0, number - 3) : number] if x.strip()]
            assert above and above[-1].lstrip().startswith("#"), f"values.yaml:{number + 1}: {line!r} has no comment"
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))

    def closed(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False, f"{path}: schema accepts unknown keys"
            for key, sub in node["properties"].items():
                closed(sub, f"{path}.{key}")

    closed(schema, "values")
    # the config sections the schema spells out have exactly the model's keys (less what the chart writes)
    config = schema["properties"]["config"]["properties"]
    # backend: the chart writes it
    assert set(config) == set(OrchestratorConfig.model_fields) - {"backend"}
    assert set(config["pool"]["properties"]) == set(PoolSettings.model_fields)
    assert set(config["approvals"]["properties"]) == set(ApprovalsSection.model_fields)
    assert set(config["evidence"]["properties"]) == set(EvidenceSection.model_fields)
    assert set(config["service"]["properties"]) == set(ServiceSection.model_fields) - {
        "tokens",
        "workspaces",
        "workspace_owner",
    }


def test_readme_documents_every_value() -> None:
    """The chart README's table names every value of values.yaml (maps documented as a whole are leaves)."""
    section = (CHART / "README.md").read_text(encoding="utf-8")  # the whole file is the chart's section
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    whole = {
        "controller.resources",
        "controller.probes.liveness",
        "controller.probes.readiness",
        "config.approvals",
        "backend.runtimeClasses",
    }

    def leaves(node: Any, path: str) -> list[str]:
        if isinstance(node, dict) and node and path not in whole:
            return [leaf for key, sub in node.items() for leaf in leaves(sub, f"{path}.{key}" if path else key)]
        return [path]

    missing = [p for p in leaves(values, "") if f"`{p}`" not in section]
    assert not missing, f"the chart's README does not document: {missing}"


# -- security facts, for every variant -------------------------------------------------------------


def test_nothing_cluster_wide(variant: tuple[str, dict[str, Any], list[dict[str, Any]]]) -> None:
    name, values, docs = variant
    kinds = {d["kind"] for d in docs}
    assert not kinds & {"ClusterRole", "ClusterRoleBinding"}
    # every object is where it belongs: namespaced ones in the release or the sandbox namespace only
    for doc in docs:
        meta = doc["metadata"]
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, doc
        else:
            assert meta["namespace"] in {NAMESPACE, sandbox_ns(values)}, (doc["kind"], meta)
    in_sandbox_ns = sorted(d["kind"] for d in docs if d["metadata"].get("namespace") == sandbox_ns(values))
    expected = ["NetworkPolicy", "Role", "RoleBinding"]
    if name in {"hostpath", "claims"}:
        expected = sorted([*expected, "PersistentVolumeClaim"])
    assert in_sandbox_ns == expected
    # exactly one Role, none in the release namespace (nothing there needs the API)
    assert [r["metadata"]["namespace"] for r in of_kind(docs, "Role")] == [sandbox_ns(values)]
    assert len(of_kind(docs, "RoleBinding")) == 1


def test_role_allows_exactly_what_the_backend_needs(variant: tuple[str, dict[str, Any], list[dict[str, Any]]]) -> None:
    _name, values, docs = variant
    role = one(docs, "Role")
    assert normalized_rules(role["rules"]) == normalized_rules(BASE_RULES)  # in either workspace mode
    # at least what the backend uses (what `sandboxctl doctor` asks the API server about)
    missing = [n for n in NEEDED if not role_grants(role["rules"], *n)]
    assert not missing, f"the Role lacks what the backend needs: {missing}"
    # no wildcard, no escalation verb; pods are only patched (their activeDeadlineSeconds), never updated
    # (update is for leases only)
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
        assert not {"escalate", "bind", "impersonate"} & set(rule["verbs"])
        assert "patch" not in rule["verbs"] or rule["resources"] == ["pods"]
        assert "update" not in rule["verbs"] or rule["resources"] == ["leases"]
    binding = one(docs, "RoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"] == sandbox_ns(values)
    account = controller_pod(docs)["spec"]["serviceAccountName"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]
    sa = one(docs, "ServiceAccount")
    assert sa["metadata"] == {**sa["metadata"], "name": account, "namespace": NAMESPACE}
    assert sa["automountServiceAccountToken"] is True


def test_sandbox_namespace_is_restricted(variant: tuple[str, dict[str, Any], list[dict[str, Any]]]) -> None:
    name, values, docs = variant
    namespaces = of_kind(docs, "Namespace")
    if name == "external-namespace":
        assert namespaces == []
        return
    (ns,) = namespaces
    assert ns["metadata"]["name"] == sandbox_ns(values)
    labels = ns["metadata"]["labels"]
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "restricted"
        assert labels[f"pod-security.kubernetes.io/{mode}-version"] == "latest"


def test_network_policy_denies_both_directions(variant: tuple[str, dict[str, Any], list[dict[str, Any]]]) -> None:
    _, values, docs = variant
    policy = one(docs, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == sandbox_ns(values)
    # every pod, both directions, and no rule that would allow anything (DNS included)
    assert policy["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}


def test_controller_pod_is_hardened(variant: tuple[str, dict[str, Any], list[dict[str, Any]]]) -> None:
    name, values, docs = variant
    uid = values.get("controller", {}).get("runAsUser", DEFAULT_UID)
    gid = values.get("controller", {}).get("runAsGroup", DEFAULT_GID)
    deployment = one(docs, "Deployment")
    assert deployment["metadata"]["namespace"] == NAMESPACE
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = controller_pod(docs)["spec"]
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "fsGroup": gid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["automountServiceAccountToken"] is True
    assert pod["enableServiceLinks"] is False
    host_network = name == "host-network"
    port = values.get("controller", {}).get("port", 8700)
    if host_network:  # asked for, and then listening on the node's loopback only
        assert pod["hostNetwork"] is True
        assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    for key in (
        "hostPID",
        "hostIPC",
        "shareProcessNamespace",
        "initContainers",
        *(() if host_network else ("hostNetwork", "dnsPolicy")),
    ):
        assert key not in pod
    assert not [v for v in pod["volumes"] if "hostPath" in v]
    container = controller_container(docs)
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": gid,
        "privileged": False,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["image"] == f"sandbox-orchestrator/controller:{project_version()}"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["command"] == [
        "sandboxctl", "serve", "--host", "127.0.0.1" if host_network else "0.0.0.0", "--port", str(port),
        "--config", "/etc/sandbox-orchestrator/config.yaml",
    ]  # fmt: skip
    assert container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    probe_host = {"host": "127.0.0.1"} if host_network else {}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http", **probe_host}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http", **probe_host}
    assert container["resources"] == {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["SANDBOX_STATE_DIR"]["value"] == "/var/lib/sandbox-orchestrator"
    # the controller's identity (pipeline.this_process.owner_label): Kubernetes expands $(VAR) only from variables
    # defined before it in the list
    assert env[CONTROLLER_ID_ENV] == {"name": CONTROLLER_ID_ENV, "value": "$(POD_NAMESPACE)/$(POD_NAME)"}
    order = [e["name"] for e in container["env"]]
    assert order.index("POD_NAME") < order.index(CONTROLLER_ID_ENV)
    assert order.index("POD_NAMESPACE") < order.index(CONTROLLER_ID_ENV)
    api_server = {k: env[k].get("value") for k in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") if k in env}
    assert api_server == (
        {"KUBERNETES_SERVICE_HOST": LOOPBACK, "KUBERNETES_SERVICE_PORT": str(API_PORT)} if host_network else {}
    )
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/tmp"]["name"]]["emptyDir"] == {"sizeLimit": "64Mi"}
    state = volumes[mounts["/var/lib/sandbox-orchestrator"]["name"]]
    if name == "state-pvc":
        assert state["persistentVolumeClaim"] == {"claimName": f"{FULLNAME}-state"}
        claim = next(c for c in of_kind(docs, "PersistentVolumeClaim") if c["metadata"]["name"] == f"{FULLNAME}-state")
        assert claim["metadata"]["namespace"] == NAMESPACE
    else:
        assert state["emptyDir"] == {"sizeLimit": "2Gi"}
    config_mount = mounts["/etc/sandbox-orchestrator"]
    assert config_mount["readOnly"] is True
    assert volumes[config_mount["name"]]["configMap"]["name"] == one(docs, "ConfigMap")["metadata"]["name"]
    annotations = controller_pod(docs)["metadata"]["annotations"]
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/config"])
    assert re.fullmatch(r"[0-9a-f]{64}", annotations["checksum/tokens"])


def test_controller_writes_only_to_volumes(
    variant: tuple[str, dict[str, Any], list[dict[str, Any]]], tmp_path: Path
) -> None:
    """Every place the controller writes is a writable volume (emptyDir or claim), never the image's
    read-only root: so the image's own user (10001, owner of its state dir) does not matter, and the
    controller may run as the profiles' user."""
    _, _, docs = variant
    container = controller_container(docs)
    volumes = {v["name"]: v for v in controller_pod(docs)["spec"]["volumes"]}
    mounts = container["volumeMounts"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    config = validate_config(config_text(docs), tmp_path)
    state = Path(env["SANDBOX_STATE_DIR"])
    image_env = dict(re.findall(r"\b(HOME|SANDBOX_STATE_DIR)=(\S+)", (REPO / "Dockerfile").read_text(encoding="utf-8")))
    written = {
        "state dir": state,
        "store": Path(config.service.store or state / "service.db"),
        "evidence": Path(config.evidence.path or default_evidence_path({"SANDBOX_STATE_DIR": str(state)})),
        "workspaces": Path(config.service.workspaces or state / "workspaces"),
        "temporary files": Path("/tmp"),
        "the image's HOME": Path(image_env["HOME"]),
    }
    for what, path in written.items():
        holding = [m for m in mounts if path.is_relative_to(m["mountPath"])]
        assert holding, f"{what} ({path}) is on the read-only root filesystem"
        mount = max(holding, key=lambda m: len(m["mountPath"]))
        assert not mount.get("readOnly"), f"{what} ({path}) is on the read-only mount {mount['mountPath']}"
        volume = volumes[mount["name"]]
        assert {"emptyDir", "persistentVolumeClaim"} & set(volume), f"{what} ({path}): {volume}"


def test_service(variant: tuple[str, dict[str, Any], list[dict[str, Any]]]) -> None:
    _, _, docs = variant
    service = one(docs, "Service")
    assert service["metadata"]["namespace"] == NAMESPACE
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8700, "targetPort": "http", "protocol": "TCP"}]
    pod_labels = controller_pod(docs)["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert one(docs, "Deployment")["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]


# -- the controller's config -----------------------------------------------------------------------


def validate_config(text: str, tmp_path: Path) -> OrchestratorConfig:
    """The rendered config.yaml as the controller reads it: its own loader (YAML reader and its limits,
    the safety defaults, the whole model, backend section included)."""
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return load_config(path)


def test_config_validates_with_the_project_model(
    variant: tuple[str, dict[str, Any], list[dict[str, Any]]], tmp_path: Path
) -> None:
    name, values, docs = variant
    config = validate_config(config_text(docs), tmp_path)
    assert config.service.workspaces == WORKSPACES_ROOT
    # the workspaces the service makes there (<root>/<tenant>/<session>) are ones the controller accepts
    check_workspace(Path(config.service.workspaces) / "team-a" / "default")
    uid = values.get("controller", {}).get("runAsUser", DEFAULT_UID)
    gid = values.get("controller", {}).get("runAsGroup", DEFAULT_GID)
    assert config.service.workspace_owner == f"{uid}:{gid}"  # the controller can give workspaces to itself
    assert config.approvals.provider == "queue"
    assert config.backend.kind == "kubernetes"
    k8s = config.backend.kubernetes
    assert k8s.namespace == sandbox_ns(values)
    assert k8s.kubeconfig is None
    assert k8s.workspace.mode == ("copy" if name == "copy" else "pvc")
    assert k8s.workspace.root == config.service.workspaces
    assert k8s.require_network_policy is True  # the chart's NetworkPolicy is what lets it launch
    if name in {"tokens", "existing-secret"}:
        mount = "/var/run/secrets/sandbox-orchestrator/tokens"
        assert [(t.subject, t.role, t.tenants, t.token_file) for t in config.service.tokens] == [
            ("ci-runner", "agent", ["team-a"], f"{mount}/ci-runner"),
            ("alice", "approver", ["team-a", "team-b"], f"{mount}/alice"),
            ("ops", "admin", [], f"{mount}/ops-token"),
        ]
        assert all(t.token is None and t.token_env is None for t in config.service.tokens)
    else:
        assert config.service.tokens == []


def test_backend_section(variant: tuple[str, dict[str, Any], list[dict[str, Any]]]) -> None:
    name, values, docs = variant
    backend = config_of(docs)["backend"]
    assert set(backend) == BACKEND_KEYS
    assert backend["kind"] == "kubernetes"
    k8s = backend["kubernetes"]
    assert set(k8s) == BACKEND_K8S_KEYS
    assert set(k8s["workspace"]) == BACKEND_WORKSPACE_KEYS
    assert k8s["kubeconfig"] is None  # in-cluster: the ServiceAccount
    assert k8s["namespace"] == sandbox_ns(values)
    assert k8s["image_pull_policy"] == "IfNotPresent"
    assert k8s["seccomp"] == ("localhost" if name == "localhost-seccomp" else "runtime-default")
    assert k8s["runtime_classes"] == {"runsc": "gvisor"}
    workspace = k8s["workspace"]
    assert workspace == {
        "mode": "copy" if name == "copy" else "pvc",
        "claim": "sandbox-workspaces",
        "root": config_of(docs)["service"]["workspaces"],
        "copy_max_bytes": 268435456,
    }
    assert type(workspace["copy_max_bytes"]) is int


def test_config_strings_stay_strings(tmp_path: Path) -> None:
    """Values that YAML 1.1 (the controller's reader) would take for numbers stay strings: a uid:gid like
    1000:59 is base 60 to YAML 1.1 when left bare."""
    values = {
        "workspaces": {"owner": "1000:59"},
        "config": {"safety": {"allowlist": ["12:30", "ls"]}, "caps": {"max_cpus": 0.5, "max_memory": "1g"}},
    }
    config = validate_config(config_text(render(values)), tmp_path)
    assert config.service.workspace_owner == "1000:59"
    assert "12:30" in [str(p) for p in config.safety.allowlist]
    assert config.caps is not None
    assert config.caps.max_cpus == 0.5


def test_config_sections_from_values(tmp_path: Path) -> None:
    values = {
        "config": {
            "safety": {"mode": "ask", "denylist": ["sudo"], "approval_timeout_s": 120},
            "approvals": {
                "provider": "queue",
                "rules": [{"name": "tests", "argv_glob": "pytest*", "outcome": "approved"}],
            },
            "caps": {"max_memory": "1g", "allowed_runtimes": ["runc", "runsc"]},
            "evidence": {"path": "/var/lib/sandbox-orchestrator/evidence/evidence.jsonl"},
            "service": {"allow_self_approval": True, "limits": {"max_page": 100}},
            "pool": {"enabled": True, "per_key": 3, "ttl_s": 120},
        },
        "workspaces": {"owner": "1000:1000"},
    }
    config = validate_config(config_text(render(values)), tmp_path)
    assert (config.pool.enabled, config.pool.per_key, config.pool.max_total, config.pool.ttl_s) == (True, 3, 16, 120)
    assert config.safety.approval_timeout_s == 120
    assert [r.name for r in config.approvals.rules] == ["tests"]
    assert config.caps is not None
    assert config.caps.allowed_runtimes == ("runc", "runsc")
    assert config.evidence.path == "/var/lib/sandbox-orchestrator/evidence/evidence.jsonl"
    assert config.service.allow_self_approval is True
    assert config.service.limits.max_page == 100
    assert config.service.workspace_owner == "1000:1000"


def test_pool_bounds_per_profile_from_values(tmp_path: Path) -> None:
    """The pool's floor and ceiling, the pool's and a profile's own, reach the controller's config as given."""
    pool = {
        "enabled": True,
        "min_ready": 0,
        "max_ready": 6,
        "shrink_after_s": 120,
        "profiles": {"ci": {"max_ready": 20}},
    }
    config = validate_config(config_text(render({"config": {"pool": pool}})), tmp_path)
    assert (config.pool.bounds("workspace-write").floor, config.pool.bounds("workspace-write").ceiling) == (0, 6)
    assert (config.pool.bounds("ci").floor, config.pool.bounds("ci").ceiling) == (0, 20)
    assert config.pool.shrink_after_s == 120


def test_a_pool_needs_pvc_workspaces() -> None:
    """Pre-started pods get the workspace mounted; in copy mode it is copied in as a pod starts (the run
    would see the workspace as it was at fill): refused at install, not left to a warning. By the values
    schema, generated from the config's own rule (the controller refuses the same config at start-up)."""
    values = {**VARIANTS["copy"], "config": {"pool": {"enabled": True}}}
    message = render_error(values)
    assert "config.pool.enabled: pre-started pods need workspaces.mode pvc" in message
    assert "values don't meet the specifications of the schema" in message, message
    render({**VARIANTS["copy"], "config": {"pool": {"enabled": False}}})  # off: no objection


# -- tokens ------------------------------------------------------------------------------------------


def test_token_secret_becomes_credentials(tmp_path: Path) -> None:
    """The Secret's keys, mounted as files where the config's token_file entries point, give the
    controller exactly the principals the values describe."""
    mount = tmp_path / "tokens"
    mount.mkdir()
    docs = render({"tokens": {"entries": TOKENS, "mountPath": str(mount)}})
    secret = one(docs, "Secret")
    assert secret["metadata"]["namespace"] == NAMESPACE
    assert secret["type"] == "Opaque"
    data = secret_data(secret)
    assert data == {"ci-runner": TOKENS[0]["value"], "alice": TOKENS[1]["value"], "ops-token": TOKENS[2]["value"]}
    # the volume: exactly these keys at these paths, read-only, 0440
    container = controller_container(docs)
    volumes = {v["name"]: v for v in controller_pod(docs)["spec"]["volumes"]}
    (token_mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == str(mount)]
    assert token_mount["readOnly"] is True
    volume = volumes[token_mount["name"]]["secret"]
    assert volume["secretName"] == secret["metadata"]["name"]
    assert volume["defaultMode"] == 0o440
    assert volume["items"] == [{"key": k, "path": k} for k in data]
    for item in volume["items"]:  # what the kubelet would write
        (mount / item["path"]).write_text(data[item["key"]], encoding="utf-8")
    config = validate_config(config_text(docs), tmp_path)
    principals = {
        c.principal.subject: (c.principal.role.value, sorted(c.principal.tenants))
        for c in load_credentials(config.service.tokens)
    }
    assert principals == {
        "ci-runner": ("agent", ["team-a"]),
        "alice": ("approver", ["team-a", "team-b"]),
        "ops": ("admin", []),
    }
    # no token in the ConfigMap, the pod spec or anywhere but the Secret
    rendered = yaml.safe_dump_all([d for d in docs if d["kind"] != "Secret"])
    for token in TOKENS:
        assert token["value"] not in rendered


def test_existing_secret_is_used_not_created() -> None:
    docs = render(VARIANTS["existing-secret"])
    assert of_kind(docs, "Secret") == []
    volume = next(v for v in controller_pod(docs)["spec"]["volumes"] if "secret" in v)["secret"]
    assert volume["secretName"] == "so-tokens"
    assert [i["key"] for i in volume["items"]] == ["ci-runner", "alice", "ops-token"]


def test_checksums_roll_the_pod_on_change() -> None:
    def annotations(values: dict[str, Any]) -> dict[str, str]:
        return dict(controller_pod(render(values))["metadata"]["annotations"])

    base = annotations({"tokens": {"entries": TOKENS}})
    assert base == annotations({"tokens": {"entries": TOKENS}})  # deterministic
    policy = annotations({"tokens": {"entries": TOKENS}, "config": {"safety": {"denylist": ["sudo", "su"]}}})
    assert policy["checksum/config"] != base["checksum/config"]
    assert policy["checksum/tokens"] == base["checksum/tokens"]
    rotated = [{**TOKENS[0], "value": "another-agent-token-0123"}, *TOKENS[1:]]
    token = annotations({"tokens": {"entries": rotated}})
    assert token["checksum/tokens"] != base["checksum/tokens"]
    assert token["checksum/config"] == base["checksum/config"]


def test_a_changed_profile_rolls_no_pod_an_added_one_does() -> None:
    """The controller re-reads its profiles (docs/profiles.md): a helm upgrade that changes a profile the pod
    mounts changes the ConfigMap, never the pod; one that adds a profile changes the volume's items."""
    small = {"profiles": {"custom": {"tiny": {"extends": "workspace-write", "limits": {"memory": "64m"}}}}}
    large = {"profiles": {"custom": {"tiny": {"extends": "workspace-write", "limits": {"memory": "128m"}}}}}
    pods = [controller_pod(render(values)) for values in (small, large)]
    assert pods[0] == pods[1]  # the same pod spec, annotations included: no rollout
    configmaps = [next(d for d in render(values) if d["kind"] == "ConfigMap") for values in (small, large)]
    assert configmaps[0]["data"]["profile.tiny.yaml"] != configmaps[1]["data"]["profile.tiny.yaml"]
    added = {"profiles": {"custom": {**small["profiles"]["custom"], "other": {"extends": "ci"}}}}
    assert controller_pod(render(added))["spec"] != pods[0]["spec"]  # a new item: a new pod


# -- workspaces, gVisor, profiles ------------------------------------------------------------------


def test_copy_mode_has_no_shared_storage() -> None:
    docs = render(VARIANTS["copy"])
    assert of_kind(docs, "PersistentVolumeClaim") == []
    assert of_kind(docs, "PersistentVolume") == []
    assert not [v for v in controller_pod(docs)["spec"]["volumes"] if "persistentVolumeClaim" in v]
    # the workspaces are kept on the state volume, seen outside the state dir
    mount = next(m for m in controller_container(docs)["volumeMounts"] if m["mountPath"] == WORKSPACES_ROOT)
    assert mount == {"name": "state", "mountPath": WORKSPACES_ROOT, "subPath": "workspaces"}


def test_pvc_mode_mounts_the_controller_claim() -> None:
    docs = render()
    assert of_kind(docs, "PersistentVolumeClaim") == []  # nothing unbound: the claims must exist
    mounts = {m["mountPath"]: m["name"] for m in controller_container(docs)["volumeMounts"]}
    volumes = {v["name"]: v for v in controller_pod(docs)["spec"]["volumes"]}
    claim = volumes[mounts[WORKSPACES_ROOT]]["persistentVolumeClaim"]
    assert claim == {"claimName": f"{FULLNAME}-workspaces"}


def test_hostpath_workspaces_bind_two_claims_to_one_directory() -> None:
    docs = render(VARIANTS["hostpath"])
    volumes = {pv["metadata"]["name"]: pv for pv in of_kind(docs, "PersistentVolume")}
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in of_kind(docs, "PersistentVolumeClaim")}
    assert set(claims) == {(SANDBOX_NAMESPACE, "sandbox-workspaces"), (NAMESPACE, f"{FULLNAME}-workspaces")}
    assert len(volumes) == 2
    for (namespace, claim_name), claim in claims.items():
        pv = volumes[claim["spec"]["volumeName"]]
        assert pv["spec"]["claimRef"] == {"namespace": namespace, "name": claim_name}  # bound to each other only
        assert pv["spec"]["hostPath"] == {"path": "/srv/so-workspaces", "type": "Directory"}
        assert pv["spec"]["accessModes"] == claim["spec"]["accessModes"] == ["ReadWriteMany"]
        assert pv["spec"]["storageClassName"] == claim["spec"]["storageClassName"] == ""
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
        assert pv["metadata"]["name"].startswith(NAMESPACE)  # cluster-scoped: the namespace keeps releases apart


def test_created_claims_bind_to_named_volumes() -> None:
    docs = render(VARIANTS["claims"])
    assert of_kind(docs, "PersistentVolume") == []
    bound = {(c["metadata"]["namespace"], c["spec"]["volumeName"]) for c in of_kind(docs, "PersistentVolumeClaim")}
    assert bound == {(SANDBOX_NAMESPACE, "nfs-a"), (NAMESPACE, "nfs-b")}


def test_notes_warn_when_workspaces_do_not_fit_the_profiles() -> None:
    """By default the controller is the built-in profiles' user (1000:1000) and pvc workspaces fit them:
    no warning. Another controller user (or owner) in pvc mode is warned about; copy mode is not."""
    default = notes()
    assert "Workspaces: pvc mode." in default
    assert "WARNING: new workspaces" not in default
    for values in (VARIANTS["own-user"], {"workspaces": {"owner": "2000:2000"}}):
        text = notes(values)
        owner = values.get("workspaces", {}).get("owner", "10001:10001")
        assert f"WARNING: new workspaces belong to {owner}, but the built-in profiles write as 1000:1000" in text
    copy = notes({**VARIANTS["own-user"], **VARIANTS["copy"]})
    assert "Workspaces: copy mode." in copy
    assert "WARNING: new workspaces" not in copy


def test_gvisor_runtime_class() -> None:
    docs = render(VARIANTS["gvisor"])
    rc = one(docs, "RuntimeClass")
    assert rc["apiVersion"] == "node.k8s.io/v1"
    assert rc["metadata"]["name"] == "gvisor"
    assert rc["handler"] == "runsc"
    assert rc["scheduling"] == {"nodeSelector": {"sandbox-orchestrator/gvisor": "true"}}
    assert config_of(docs)["backend"]["kubernetes"]["runtime_classes"] == {"runsc": "gvisor"}
    assert of_kind(render(), "RuntimeClass") == []


def test_custom_profiles_load_from_the_mounted_layout(tmp_path: Path) -> None:
    """Custom profiles and seccomp files land where SANDBOX_PROFILES_PATH points, laid out as the profile
    loader reads them (NAME.yaml, seccomp/NAME.json); the project's loader resolves them."""
    seccomp = json.loads((REPO / "profiles" / "seccomp" / "default.json").read_text(encoding="utf-8"))
    values = {
        "profiles": {
            "custom": {
                "tiny": {
                    "extends": "workspace-write",
                    "description": "small",
                    "user": "1000:10",
                    "seccomp": "strict",
                    "limits": {"memory": "64m"},
                }
            },
            "seccomp": {"strict": seccomp},
        }
    }
    docs = render(values)
    configmap = one(docs, "ConfigMap")
    container = controller_container(docs)
    env = {e["name"]: e.get("value") for e in container["env"]}
    profiles_dir = env["SANDBOX_PROFILES_PATH"]
    config_mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    items = next(v for v in controller_pod(docs)["spec"]["volumes"] if v["name"] == "config")["configMap"]["items"]
    assert {i["key"] for i in items} == set(configmap["data"])
    root = tmp_path / "etc"
    for item in items:  # what the kubelet writes into the volume
        path = root / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(configmap["data"][item["key"]], encoding="utf-8")
    relative = Path(profiles_dir).relative_to(config_mount["mountPath"])
    registry = ProfileRegistry([root / relative])
    resolved = registry.resolve("tiny")
    assert (resolved.uid, resolved.gid) == (1000, 10)
    assert resolved.memory_bytes == 64 * 1024 * 1024
    # the same seccomp policy as the built-in it was copied from (the JSON is re-formatted, not changed)
    assert resolved.seccomp == "strict"
    assert resolved.seccomp_sha256 == registry.load_seccomp("default").sha256
    # without custom profiles the variable is not set (the loader refuses a missing directory)
    assert "SANDBOX_PROFILES_PATH" not in {e["name"] for e in controller_container(render())["env"]}


def test_ci_values_size_the_ci_profile_and_allow_the_job_images(tmp_path: Path) -> None:
    """ci.images join the caps' allowed images (never replacing them); ci.profile is the `ci` profile laid over
    the built-in one, as the project's loader resolves it from the mounted layout."""
    values = {
        "config": {"caps": {"allowed_images": ["sandbox-orchestrator/default:*"], "max_pids": 4096}},
        "ci": {
            "images": ["ci/node:20", "sandbox-orchestrator/default:*"],
            "profile": {"limits": {"cpus": 4, "memory": "6g", "wall_timeout_s": 3600}},
        },
    }
    docs = render(values)
    caps = config_of(docs)["caps"]
    assert caps == {"allowed_images": ["sandbox-orchestrator/default:*", "ci/node:20"], "max_pids": 4096}
    configmap = one(docs, "ConfigMap")
    items = next(v for v in controller_pod(docs)["spec"]["volumes"] if v["name"] == "config")["configMap"]["items"]
    root = tmp_path / "etc"
    for item in items:
        (root / item["path"]).parent.mkdir(parents=True, exist_ok=True)
        (root / item["path"]).write_text(configmap["data"][item["key"]], encoding="utf-8")
    env = {e["name"]: e.get("value") for e in controller_container(docs)["env"]}
    mount = next(m for m in controller_container(docs)["volumeMounts"] if m["name"] == "config")["mountPath"]
    registry = ProfileRegistry([root / Path(env["SANDBOX_PROFILES_PATH"]).relative_to(mount)])
    builtin, sized = ProfileRegistry([]).resolve("ci"), registry.resolve("ci")
    assert (sized.cpus, sized.memory_bytes, sized.wall_timeout_s) == (4, 6 * 1024**3, 3600)
    # the rest is the built-in's: the job's workspace, its home, its environment
    assert (sized.workspace.container_path, sized.env, sized.pids_limit) == (
        builtin.workspace.container_path,
        builtin.env,
        builtin.pids_limit,
    )
    # without ci values, nothing changes: no caps, no profile directory
    plain = render()
    assert "caps" not in config_of(plain)
    assert "SANDBOX_PROFILES_PATH" not in {e["name"] for e in controller_container(plain)["env"]}


def test_the_ci_guide_s_chart_values_render() -> None:
    """docs/ci.md's values for our chart, as written: the runners' token, their images, the sized profile."""
    guide = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", guide, flags=re.S)
    [values] = [yaml.safe_load(b) for b in blocks if b.startswith("tokens:")]
    docs = render(values)
    assert config_of(docs)["caps"]["allowed_images"] == values["ci"]["images"]
    assert json.loads(one(docs, "ConfigMap")["data"]["profile.ci.yaml"]) == {"extends": "ci", **values["ci"]["profile"]}
    [runner] = config_of(docs)["service"]["tokens"]
    assert (runner["subject"], runner["role"], runner["tenants"]) == ("ci-runner", "agent", ["ci-runners"])


# -- refusals ----------------------------------------------------------------------------------------

SCHEMA_REFUSALS = [
    ({"workspaces": {"mode": "hostpath"}}, "/workspaces/mode"),
    ({"workspaces": {"copyMaxBytes": 0}}, "/workspaces/copyMaxBytes"),
    ({"workspaces": {"owner": "root"}}, "/workspaces/owner"),
    ({"workspaces": {"claims": {"create": True}}}, "/workspaces/claims/sandboxVolumeName"),
    ({"workspaces": {"hostPath": {"path": "relative/dir"}}}, "/workspaces/hostPath/path"),
    ({"controller": {"runAsUser": 0}}, "/controller/runAsUser"),
    ({"controller": {"replicas": 2}}, "/controller/replicas"),
    ({"controller": {"extraEnv": [{"name": "POD_NAME", "value": "x"}]}}, "/controller/extraEnv/0/name"),
    ({"backend": {"seccomp": "unconfined"}}, "/backend/seccomp"),
    # a map's keys are checked by propertyNames: helm names the key, not its place
    ({"backend": {"runtimeClasses": {"kata": "kata"}}}, "invalid propertyName 'kata'"),
    (
        {"sandboxNamespace": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}},
        "invalid propertyName 'pod-security.kubernetes.io/enforce'",
    ),
    ({"sandboxNamespace": {"name": "Not_A_Namespace"}}, "/sandboxNamespace/name"),
    ({"tokens": {"entries": [{"subject": "a", "role": "agent", "tenants": ["t"]}]}}, "/tokens/entries/0"),
    (
        {"tokens": {"entries": [{"subject": "a", "role": "agent", "tenants": ["t", "u"], "value": "x" * 16}]}},
        "/tokens/entries/0/tenants",
    ),
    (
        {"tokens": {"entries": [{"subject": "a", "role": "agent", "tenants": ["t"], "value": "short"}]}},
        "/tokens/entries/0/value",
    ),
    ({"tokens": {"entries": [{"subject": "a", "role": "root", "value": "x" * 16}]}}, "/tokens/entries/0/role"),
    ({"config": {"service": {"tokens": []}}}, "/config/service"),
    ({"config": {"approvals": {"provider": "slack"}}}, "/config/approvals/provider"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"controller": {"port": 0}}, "/controller/port"),
    ({"controller": {"hostNetwork": {"address": "localhost"}}}, "/controller/hostNetwork/address"),
    (
        {"controller": {"hostNetwork": {"enabled": True, "apiServerPort": 70000}}},
        "/controller/hostNetwork/apiServerPort",
    ),
    ({"profiles": {"custom": {"Bad Name": {}}}}, "invalid propertyName 'Bad Name'"),
    ({"replicaCount": 3}, "replicaCount"),
    ({"ci": {"images": "ci/node:20"}}, "/ci/images"),
    ({"ci": {"runners": 3}}, "runners"),
    ({"dashboards": {"label": "app.kubernetes.io/component"}}, "/dashboards/label"),  # one of the chart's own
    ({"dashboards": {"labelValue": "not a label value"}}, "/dashboards/labelValue"),
]


@pytest.mark.parametrize(("values", "field"), SCHEMA_REFUSALS, ids=[f for _, f in SCHEMA_REFUSALS])
def test_schema_refuses(values: dict[str, Any], field: str) -> None:
    message = render_error(values)
    assert "values don't meet the specifications of the schema" in message, message
    assert field in message, message


IN_STATE_DIR = "is inside the controller's state dir"
TEMPLATE_REFUSALS = [
    ({"sandboxNamespace": {"name": NAMESPACE}}, "must differ from the release namespace"),
    # the controller refuses every workspace in its state dir: the chart refuses to put them there
    ({"workspaces": {"root": "/var/lib/sandbox-orchestrator/workspaces"}}, IN_STATE_DIR),
    ({"workspaces": {"mode": "copy", "root": "/var/lib/sandbox-orchestrator/workspaces"}}, IN_STATE_DIR),
    ({"workspaces": {"root": "/var/lib/sandbox-orchestrator/"}}, IN_STATE_DIR),
    ({"gvisor": {"runtimeClass": {"create": True, "name": "runsc-rc"}}}, "is not a value of backend.runtimeClasses"),
    (
        {"tokens": {"entries": [
            {"subject": "a", "role": "admin", "key": "k", "value": "x" * 16},
            {"subject": "b", "role": "admin", "key": "k", "value": "y" * 16},
        ]}},
        'the Secret key "k" is used twice',
    ),
    (
        {"ci": {"profile": {"limits": {"cpus": 4}}}, "profiles": {"custom": {"ci": {"extends": "ci"}}}},
        "ci.profile and profiles.custom.ci both define the ci profile",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("values", "reason"), TEMPLATE_REFUSALS, ids=[r for _, r in TEMPLATE_REFUSALS])
def test_template_refuses(values: dict[str, Any], reason: str) -> None:
    assert reason in render_error(values)


def test_egress_proxy_for_allowlist_pods() -> None:
    """backend.egress.enabled: the controller serves the proxy on its pod IP; pods of allowlist profiles (and
    only they) may reach it, on its port only; the default-deny policy still holds everything else."""
    docs = render({"backend": {"egress": {"enabled": True, "port": 3130}}})
    controller, deny, proxy = sorted(of_kind(docs, "NetworkPolicy"), key=lambda p: p["metadata"]["name"])
    # the controller: its API open as before; the proxy's port only to those pods
    assert controller["metadata"]["namespace"] == NAMESPACE
    api, egress_in = controller["spec"]["ingress"]
    assert "from" not in api and [p["port"] for p in api["ports"]] == [8700]
    assert egress_in["ports"] == [{"protocol": "TCP", "port": 3130}]
    [source] = egress_in["from"]
    assert source["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": SANDBOX_NAMESPACE}}
    assert source["podSelector"] == {"matchLabels": {LABEL_EGRESS: "proxy"}}
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert proxy["metadata"]["namespace"] == SANDBOX_NAMESPACE
    assert proxy["spec"]["podSelector"] == {"matchLabels": {LABEL_EGRESS: "proxy"}}
    assert proxy["spec"]["policyTypes"] == ["Egress"]  # no ingress: the default-deny keeps every pod unreachable
    [rule] = proxy["spec"]["egress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 3130}]
    [peer] = rule["to"]
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    assert peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "controller"
    egress = KubernetesSettings.model_validate(config_of(docs)["backend"]["kubernetes"]).egress
    assert egress is not None and (egress.listen, egress.address_env) == ("0.0.0.0:3130", "POD_IP")
    container = controller_pod(docs)["spec"]["containers"][0]
    assert {"name": "egress", "containerPort": 3130, "protocol": "TCP"} in container["ports"]
    pod_ip = next(e for e in container["env"] if e["name"] == "POD_IP")
    assert pod_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    # off (the default): no proxy, and allowlist runs are refused by the controller (SANDBOX.UNAVAILABLE)
    assert "egress" not in config_of(render({}))["backend"]["kubernetes"]


DASHBOARD_FILES = sorted((CHART / "dashboards").glob("*.json"))


def test_dashboards_ship_as_a_configmap_the_grafana_sidecar_finds() -> None:
    """dashboards.enabled: one ConfigMap in the release namespace with every dashboard of dashboards/, each the
    file as it is (one key per file), labelled with the sidecar's label (default grafana_dashboard: "1") and
    annotated as asked (a folder); off (the default): none, and the controller's ConfigMap is the only one."""
    assert [f.name for f in DASHBOARD_FILES] == ["sandbox-profiles.json"]
    assert of_kind(render({}), "ConfigMap") == [one(render({}), "ConfigMap")]
    assert "grafana_dashboard" not in one(render({}), "ConfigMap")["metadata"]["labels"]
    assert lint({"dashboards": {"enabled": True}}).returncode == 0

    def dashboards(values: dict[str, Any]) -> dict[str, Any]:
        [found] = [c for c in of_kind(render(values), "ConfigMap") if c["metadata"]["name"] != FULLNAME]
        return found

    default = dashboards({"dashboards": {"enabled": True}})
    assert default["metadata"]["name"] == f"{FULLNAME}-dashboards"
    assert default["metadata"]["namespace"] == NAMESPACE
    assert default["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert default["metadata"]["labels"]["app.kubernetes.io/component"] == "dashboards"
    assert "annotations" not in default["metadata"]
    assert set(default["data"]) == {f.name for f in DASHBOARD_FILES}
    for file in DASHBOARD_FILES:
        assert default["data"][file.name] == file.read_text(encoding="utf-8").rstrip("\n")
        assert json.loads(default["data"][file.name])["uid"] == file.stem

    custom = dashboards({
        "dashboards": {
            "enabled": True,
            "label": "example.com/dashboard",
            "labelValue": "sandboxes",
            "annotations": {"grafana_folder": "Sandboxes"},
        }
    })  # fmt: skip
    assert custom["metadata"]["labels"]["example.com/dashboard"] == "sandboxes"
    assert "grafana_dashboard" not in custom["metadata"]["labels"]
    assert custom["metadata"]["annotations"] == {"grafana_folder": "Sandboxes"}
