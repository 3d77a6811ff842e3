"""The chart deployed for real: the controller image built from this tree (``make image``'s script) and
imported into the test cluster's containerd (``k8s-cluster.sh up``), ``helm install`` into a fresh release
namespace with a fresh sandbox namespace, our own seccomp profiles (``backend.seccomp: localhost``), tokens
for an agent and an admin, and an approval rule; once with pvc workspaces on a host directory
(``workspaces.hostPath``), once in copy mode (the workspaces on the controller's state volume).
Then an agent's view: through the Service (``kubectl port-forward`` on 127.0.0.1), the project's client runs
a command in a sandbox pod; the answer, the file it wrote, the evidence the API server's lifecycle gave and
the pod's removal are checked. And the controller's own ServiceAccount token, used against the API server:
it may run pods in the sandbox namespace and nothing else.

The test cluster has no kube-proxy and its pods have no route off their subnet (sandboxes reach nothing),
so the controller, which must reach the API server, runs with ``controller.hostNetwork`` on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import select
import shlex
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from base64 import b64decode
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import pytest
import yaml

from orchestrator.client import Client
from scripts.testcluster.settings import API_PORT, CONTROLLER_IMAGE, MINIMAL_IMAGE, NODE_NAME
from tests.support.chart import CHART, helm
from tests.support.images import SANDBOX_UID
from tests.support.kube import cluster_script, host_env

if TYPE_CHECKING:  # the fixture's type lives in the plugin tests/conftest.py loads
    from tests.support.kube import Cluster

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
APPROVAL_RULE = "t1-agent-medium-risk"
COMMAND = "echo hello-from-a-pod > out.txt; cat out.txt"
OUTPUT = b"hello-from-a-pod\n"
LIFECYCLE = ["container_created", "container_scheduled", "container_started", "container_died", "container_destroyed"]
READY_TIMEOUT_S = 180
BUILD_TIMEOUT_S = 1800


# -- the image and the cluster ----------------------------------------------------------------------


def engine_env() -> dict[str, str]:
    """The scripts' environment with the Docker engine setup.sh recorded (``scripts/engine-env.sh``)."""
    env = host_env()
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / "engine-env.sh")], capture_output=True, text=True, env=env, timeout=30
    )
    assert proc.returncode == 0, proc.stderr
    for line in proc.stdout.splitlines():
        words = shlex.split(line)
        if words[:1] == ["export"] and len(words) == 2 and words[1].startswith("DOCKER_HOST="):
            env["DOCKER_HOST"] = words[1].split("=", 1)[1]
    return env


@pytest.fixture(scope="session")
def controller_image() -> str:
    """The controller image built from this tree (a no-op when it is up to date), with the Kubernetes
    client in it: its Docker id."""
    env = engine_env()
    build = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-controller.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=BUILD_TIMEOUT_S,
    )
    assert build.returncode == 0, f"build-controller.sh failed:\n{build.stdout[-2000:]}\n{build.stderr[-4000:]}"
    inspect = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", CONTROLLER_IMAGE],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert inspect.returncode == 0, inspect.stderr
    image_id = inspect.stdout.strip()
    client = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", image_id,
         "/opt/sandbox-orchestrator/bin/python", "-I", "-c", "import kubernetes; print(kubernetes.__version__)"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert client.returncode == 0, f"the controller image has no Kubernetes client:\n{client.stderr}"
    return image_id


@pytest.fixture(scope="session")
def cluster_with_image(k8s_cluster: Cluster, controller_image: str) -> Cluster:
    """The cluster once ``up`` has imported the controller image (it imports every image whose Docker id
    changed since its last import); the controller pod's imageID proves which one runs."""
    up = cluster_script("up")
    assert up.returncode == 0, f"k8s-cluster.sh up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
    return k8s_cluster


# -- the release --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Release:
    name: str
    namespace: str
    sandboxes: str
    fullname: str
    mode: str  # workspaces.mode
    workspaces: Path  # pvc: the node directory both workspace claims are bound to (unused in copy mode)
    port: int  # the controller's, on the node's 127.0.0.1 (hostNetwork)
    agent_token: str
    admin_token: str
    ready_s: float  # helm install -> the Deployment Available (the pod's /readyz answered)
    bound_s: float  # helm install -> the sandboxes' workspace claim Bound


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def release_values(mode: str, names: dict[str, str], root: Path, port: int, tokens: dict[str, str]) -> dict[str, Any]:
    workspaces: dict[str, Any] = {"mode": mode}
    if mode == "pvc":
        workspaces["hostPath"] = {"enabled": True, "path": str(root), "type": "Directory"}
    return {
        "image": {"tag": "latest", "pullPolicy": "Never"},  # imported into the node, never pulled
        "controller": {
            "port": port,
            "hostNetwork": {"enabled": True, "apiServerHost": "127.0.0.1", "apiServerPort": API_PORT},
            # probed every second, so that install -> Ready measures the controller, not the probe period
            "probes": {"readiness": {"initialDelaySeconds": 0, "periodSeconds": 1}},
        },
        "sandboxNamespace": {"name": names["sandboxes"]},
        "backend": {"imagePullPolicy": "Never", "seccomp": "localhost"},
        "workspaces": workspaces,
        "tokens": {
            "entries": [
                {"subject": "agent-1", "role": "agent", "tenants": ["t1"], "value": tokens["agent"]},
                {"subject": "ops", "role": "admin", "value": tokens["admin"]},
            ]
        },
        "config": {
            # the test node has 2 cores, shared with other tests: a sandbox of a quarter core fits beside them
            "caps": {"max_cpus": 0.25},
            "approvals": {
                "provider": "queue",
                # The command is complex (a redirection, two commands), so the policy asks. An approving
                # rule must match every command of a compound string, and a rule names one program: a rule
                # for echo alone would leave `cat` to the queue. This one approves the agent's shell
                # commands of at most medium risk in t1; anything else waits in the queue.
                "rules": [
                    {
                        "name": APPROVAL_RULE,
                        "tool": ["shell_command"],
                        "tenant": ["t1"],
                        "subject": ["agent-1"],
                        "risk_at_most": "medium",
                        "outcome": "approved",
                    }
                ],
            },
        },
    }


def diagnostics(cluster: Cluster, namespace: str, sandboxes: str | None = None) -> str:
    """What the controller pod went through: its description, its logs (and its previous container's);
    with ``sandboxes``, that namespace's pods, claims and events too."""
    parts = []
    commands: list[tuple[str, ...]] = [
        ("describe", "pods", "-n", namespace),
        ("logs", "-n", namespace, "-l", "app.kubernetes.io/component=controller", "--tail=80"),
        ("logs", "-n", namespace, "-l", "app.kubernetes.io/component=controller", "--previous", "--tail=80"),
    ]
    if sandboxes:
        commands += [
            ("get", "pods,pvc", "-n", sandboxes, "-o", "wide"),
            ("describe", "pods", "-n", sandboxes),
            ("get", "events", "-n", sandboxes, "--sort-by=.lastTimestamp"),
        ]
    for args in commands:
        proc = cluster.kubectl(*args, check=False)
        parts.append(f"$ kubectl {' '.join(args)}\n{proc.stdout}{proc.stderr}")
    return "\n".join(parts)


@pytest.fixture(scope="module", params=["pvc", "copy"])
def release(
    request: pytest.FixtureRequest, cluster_with_image: Cluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    """One release per workspace mode. pvc: the workspaces on a host directory both claims are bound to;
    copy: on the controller's state volume, copied into and out of each sandbox pod."""
    cluster = cluster_with_image
    mode = str(request.param)
    suffix = uuid.uuid4().hex[:8]
    names = {"release": f"so-e2e-{suffix}", "namespace": f"so-e2e-{suffix}", "sandboxes": f"so-e2e-sbx-{suffix}"}
    root = Path(tempfile.mkdtemp(prefix=f"so-e2e-{suffix}-", dir="/var/tmp"))
    os.chown(root, SANDBOX_UID, SANDBOX_UID)  # the controller (1000) makes the workspaces there
    root.chmod(0o755)
    tokens = {"agent": secrets.token_urlsafe(24), "admin": secrets.token_urlsafe(24)}
    port = free_port()
    values = tmp_path_factory.mktemp("e2e") / "values.yaml"
    values.write_text(yaml.safe_dump(release_values(mode, names, root, port, tokens)), encoding="utf-8")
    fullname = f"{names['release']}-sandbox-orchestrator"
    try:
        started = time.monotonic()
        install = helm(
            "install", names["release"], str(CHART), "--namespace", names["namespace"], "--create-namespace",
            "-f", str(values), kubeconfig=cluster.kubeconfig, timeout=300,
        )  # fmt: skip
        assert install.returncode == 0, install.stderr
        available = cluster.kubectl(
            "wait", "-n", names["namespace"], "--for=condition=Available", f"deployment/{fullname}",
            f"--timeout={READY_TIMEOUT_S}s", check=False,
        )  # fmt: skip
        ready_s = time.monotonic() - started
        if available.returncode != 0:
            why = diagnostics(cluster, names["namespace"])
            pytest.fail(f"the controller did not become Ready:\n{available.stderr}\n{why}")
        # The sandboxes' claim may still be Pending: helm makes the volumes and the claims together, and a
        # claim naming its volume (volumeName) that the PV controller saw before the volume is only bound
        # at its next resync (15 s). Until then sandbox pods wait to be scheduled; the execution below is
        # timed once it is bound.
        if mode == "pvc":
            bound = cluster.kubectl(
                "wait", "-n", names["sandboxes"], "--for=jsonpath={.status.phase}=Bound", "pvc/sandbox-workspaces",
                "--timeout=60s", check=False,
            )  # fmt: skip
            assert bound.returncode == 0, bound.stderr
        bound_s = time.monotonic() - started
        yield Release(
            name=names["release"],
            namespace=names["namespace"],
            sandboxes=names["sandboxes"],
            fullname=fullname,
            mode=mode,
            workspaces=root,
            port=port,
            agent_token=tokens["agent"],
            admin_token=tokens["admin"],
            ready_s=ready_s,
            bound_s=bound_s,
        )
    finally:
        helm(
            "uninstall", names["release"], "--namespace", names["namespace"], "--wait", "--timeout", "120s",
            kubeconfig=cluster.kubeconfig, timeout=180,
        )  # fmt: skip
        cluster.delete_namespaces(names["namespace"], names["sandboxes"])
        # the chart's PersistentVolumes (cluster-scoped), should helm have left them
        cluster.kubectl("delete", "pv", "-l", f"app.kubernetes.io/instance={names['release']}", check=False)
        shutil.rmtree(root, ignore_errors=True)


def test_controller_runs_the_image_built_here(
    release: Release, cluster_with_image: Cluster, controller_image: str
) -> None:
    pods = json.loads(
        cluster_with_image.kubectl(
            "get", "pods", "-n", release.namespace, "-l", "app.kubernetes.io/component=controller", "-o", "json"
        ).stdout
    )["items"]
    assert len(pods) == 1
    status = pods[0]["status"]["containerStatuses"][0]
    assert status["ready"] is True
    assert status["restartCount"] == 0, diagnostics(cluster_with_image, release.namespace)
    assert status["imageID"] == controller_image  # the import carried exactly the image built from this tree
    # where the time went, as the API server saw it (whole seconds)
    created = datetime.fromisoformat(pods[0]["metadata"]["creationTimestamp"])
    marks = {c["type"]: c["lastTransitionTime"] for c in pods[0]["status"]["conditions"]}
    marks["container started"] = status["state"]["running"]["startedAt"]
    since = ", ".join(f"{k} +{(datetime.fromisoformat(v) - created).total_seconds():.0f} s" for k, v in marks.items())
    waits = json.loads(
        cluster_with_image.kubectl(
            "get", "events", "-n", release.namespace, "--field-selector", "reason=FailedScheduling", "-o", "json"
        ).stdout
    )["items"]
    waited = "; ".join(sorted({e["message"] for e in waits})) or "none"
    print(f"\n{release.mode}: install -> Ready: {release.ready_s:.2f} s")
    print(f"{release.mode}: pod created, then {since}; FailedScheduling: {waited}")
    if release.mode == "pvc":
        print(f"{release.mode}: install -> the sandboxes' workspace claim Bound: {release.bound_s:.2f} s")


# -- an agent's execution, through the Service ---------------------------------------------------------


def _drain(stream: IO[str]) -> None:
    for _ in stream:  # kubectl reports each connection: the pipe must never fill
        pass


@contextlib.contextmanager
def port_forward(cluster: Cluster, release: Release) -> Iterator[str]:
    """``kubectl port-forward`` to the Service on a free port of 127.0.0.1 (never another address), bounded
    by ``timeout`` and ended when the block is left: the service's base URL."""
    proc = subprocess.Popen(
        ["timeout", "300", str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig),
         "-n", release.namespace, "port-forward", "--address", "127.0.0.1", f"svc/{release.fullname}", ":8700"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], 30)
        line = proc.stdout.readline() if readable else ""
        found = re.match(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)", line)
        if found is None:
            proc.kill()
            pytest.fail(f"kubectl port-forward: {line!r} {proc.communicate(timeout=10)}")
        # the Service's targetPort (the container's named port) is the controller's
        assert int(found[2]) == release.port
        threading.Thread(target=_drain, args=(proc.stdout,), daemon=True).start()
        yield f"http://127.0.0.1:{found[1]}"
    finally:
        proc.terminate()  # timeout passes SIGTERM on to kubectl
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def pod_uid_from_events(cluster: Cluster, namespace: str, pod_name: str) -> str:
    """The uid of the (deleted) pod: the scheduler's and the kubelet's events about it outlive it."""
    deadline = time.monotonic() + 30
    while True:
        events = json.loads(cluster.kubectl("get", "events", "-n", namespace, "-o", "json").stdout)["items"]
        uids = {
            e["involvedObject"]["uid"]
            for e in events
            if e["involvedObject"].get("kind") == "Pod" and e["involvedObject"].get("name") == pod_name
        }
        if uids or time.monotonic() > deadline:
            assert len(uids) == 1, f"events of pod {pod_name}: {uids}"
            return uids.pop()
        time.sleep(0.5)


def written_file(cluster: Cluster, release: Release, relative: str) -> tuple[bytes, tuple[int, int]]:
    """A workspace file as the controller has it, and its owner: pvc, on the node's directory (this host);
    copy, on the controller's state volume (read in the controller's container)."""
    if release.mode == "pvc":
        path = release.workspaces / relative
        return path.read_bytes(), (path.stat().st_uid, path.stat().st_gid)
    inside = f"/workspaces/{relative}"  # workspaces.root
    exec_ = ("exec", "-n", release.namespace, f"deployment/{release.fullname}", "--")
    owner = cluster.kubectl(*exec_, "stat", "-c", "%u %g", inside).stdout.split()
    raw = subprocess.run(
        [str(cluster.bin_dir / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *exec_, "cat", inside],
        capture_output=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    return raw, (int(owner[0]), int(owner[1]))


def test_agent_runs_a_command_in_a_sandbox_pod(release: Release, cluster_with_image: Cluster) -> None:
    cluster = cluster_with_image
    with port_forward(cluster, release) as base_url:
        agent = Client(base_url, token=release.agent_token)
        me = agent.whoami()
        assert (me.subject, me.role, me.tenants) == ("agent-1", "agent", ["t1"])
        started = time.monotonic()
        # longer than the backend's start timeout (120 s): a pod that cannot start ends the execution
        view = agent.submit({"tool": "shell_command", "command": COMMAND}, wait=180)
        elapsed = time.monotonic() - started
        records = agent.evidence(view.execution_id).records
        # the pod's init reported the end: the kubelet's account and the removal follow the end record
        for _ in range(150):
            if any(r["event"] == "container_destroyed" for r in records):
                break
            time.sleep(0.2)
            records = agent.evidence(view.execution_id).records
        with urllib.request.urlopen(  # the whole chain, as the admin may ask
            urllib.request.Request(
                f"{base_url}/v1/evidence/verify", headers={"Authorization": f"Bearer {release.admin_token}"}
            ),
            timeout=60,
        ) as answer:
            verified = json.loads(answer.read())

    # the answer
    if view.state != "succeeded":
        why = diagnostics(cluster, release.namespace, release.sandboxes)
        pytest.fail(f"{view.model_dump_json(indent=1)}\nevidence: {json.dumps(records, indent=1)}\n{why}")
    assert view.approval is not None
    assert (view.approval.outcome, view.approval.approver) == ("approved", f"rule:{APPROVAL_RULE}")
    result = view.result
    assert result is not None
    assert (result.exit_code, result.stdout, result.stderr) == (0, OUTPUT.decode(), "")
    assert (result.timed_out, result.oom_killed, result.truncated) == (False, False, False)
    # the side effect, where the controller sees it: <root>/<tenant>/<session>
    content, owner = written_file(cluster, release, "t1/default/out.txt")
    assert content == OUTPUT
    assert owner == (SANDBOX_UID, SANDBOX_UID)  # the profile's user
    digest = hashlib.sha256(OUTPUT).hexdigest()

    # the evidence: one execution, from the request to its end, the pod's lifecycle from the API server
    assert {r["execution_id"] for r in records} == {view.execution_id}
    events = [r["event"] for r in records]
    assert events[0] == "request_received"
    assert events[-1] == "container_destroyed"  # after the end record: the end came from the pod's init
    assert [e for e in events if e.startswith("container_")] == LIFECYCLE
    lifecycle = {r["event"]: r for r in records if r["event"] in LIFECYCLE}
    pod_uid = pod_uid_from_events(cluster, release.sandboxes, f"sbx-{view.execution_id}")
    assert {r["data"]["sandbox_id"] for r in lifecycle.values()} == {pod_uid}
    assert lifecycle["container_scheduled"]["data"]["node"] == NODE_NAME
    assert lifecycle["container_died"]["data"]["exit_code"] == 0
    assert all(r["engine_ts"] for r in lifecycle.values())  # the API server's timestamps
    (finished,) = [r for r in records if r["event"] == "execution_finished"]
    assert finished["status"] == "succeeded"
    assert finished["data"]["exit_code"] == 0
    assert finished["data"]["lifecycle_stream"].startswith("reported by the sandbox's init")
    assert finished["data"]["usage"]["memory_peak_bytes"] > 0  # the pod's own cgroup, read by its init
    side_effects = finished["data"]["side_effects"]
    assert side_effects["created"] == [
        {"path": "out.txt", "kind": "file", "mode": 0o644, "size": len(OUTPUT), "sha256": digest}
    ]
    assert (side_effects["modified"], side_effects["deleted"], side_effects["complete"]) == ([], [], True)
    assert finished["data"]["stdout"]["sha256"] == digest  # the output, as kept and returned
    assert verified["ok"] is True, verified

    # nothing is left in the sandbox namespace
    left = json.loads(cluster.kubectl("get", "pods", "-n", release.sandboxes, "-o", "json").stdout)["items"]
    assert left == []
    first = datetime.fromisoformat(records[0]["ts"])
    steps = ", ".join(
        f"{r['event']} +{(datetime.fromisoformat(r['ts']) - first).total_seconds():.2f}"
        for r in records
        if r["event"] in {"execution_started", *LIFECYCLE, "execution_finished"}
    )
    print(f"\n{release.mode}: one execution end to end (submit with wait -> answer): {elapsed:.2f} s")
    print(f"{release.mode}: evidence times, s: {steps}")


# -- the controller's ServiceAccount against the API server ------------------------------------------


@dataclass(frozen=True)
class Api:
    server: str
    context: ssl.SSLContext
    token: str

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(
            self.server + path,
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=30) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())


def service_account_api(cluster: Cluster, release: Release) -> Api:
    """The API server (127.0.0.1 only) as the controller's ServiceAccount, with a token of its own."""
    config = yaml.safe_load(cluster.kubeconfig.read_text(encoding="utf-8"))
    entry = config["clusters"][0]["cluster"]
    server = entry["server"]
    assert server.startswith("https://127.0.0.1:"), server
    context = ssl.create_default_context(cadata=b64decode(entry["certificate-authority-data"]).decode())
    token = cluster.kubectl(
        "create", "token", release.fullname, "-n", release.namespace, "--duration=10m"
    ).stdout.strip()
    return Api(server, context, token)


def probe_pod(name: str) -> dict[str, Any]:
    """A pod the sandbox namespace admits (Pod Security "restricted") that does nothing."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": SANDBOX_UID,
                "runAsGroup": SANDBOX_UID,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": MINIMAL_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["true"],
                    "securityContext": {
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "readOnlyRootFilesystem": True,
                    },
                }
            ],
        },
    }


def assert_forbidden(answer: tuple[int, dict[str, Any]], account: str, verb: str, resource: str) -> None:
    status, body = answer
    assert status == 403, body
    assert body["reason"] == "Forbidden", body
    assert f'User "{account}" cannot {verb} resource "{resource}"' in body["message"], body["message"]


def test_service_account_runs_pods_in_the_sandbox_namespace_only(release: Release, cluster_with_image: Cluster) -> None:
    cluster = cluster_with_image
    api = service_account_api(cluster, release)
    account = f"system:serviceaccount:{release.namespace}:{release.fullname}"
    # the pod runs as the namespace's "default" ServiceAccount: made by the controller-manager
    deadline = time.monotonic() + 60
    while cluster.kubectl("get", "serviceaccount", "default", "-n", release.sandboxes, check=False).returncode:
        assert time.monotonic() < deadline, "no default ServiceAccount in the sandbox namespace"
        time.sleep(0.5)
    pods = f"/api/v1/namespaces/{release.sandboxes}/pods"
    name = f"so-e2e-probe-{uuid.uuid4().hex[:6]}"
    status, created = api.call("POST", pods, probe_pod(name))
    assert status == 201, created
    try:
        status, listed = api.call("GET", pods)
        assert status == 200, listed
        assert name in [p["metadata"]["name"] for p in listed["items"]]
    finally:
        status, deleted = api.call("DELETE", f"{pods}/{name}")
    assert status == 200, deleted
    assert deleted["metadata"]["uid"] == created["metadata"]["uid"]

    assert_forbidden(api.call("GET", f"/api/v1/namespaces/{release.sandboxes}/secrets"), account, "list", "secrets")
    for namespace in (release.namespace, "default"):
        answer = api.call("POST", f"/api/v1/namespaces/{namespace}/pods", probe_pod(name))
        assert_forbidden(answer, account, "create", "pods")
    assert_forbidden(api.call("GET", "/api/v1/namespaces"), account, "list", "namespaces")
