"""The test cluster itself (scripts/k8s-cluster.sh): what the Kubernetes backend relies on, each checked
against a real API server, kubelet and container runtime.

- a hardened pod is admitted under Pod Security "restricted", runs as uid 1000 under a seccomp filter
  (RuntimeDefault, and the project's own profile installed on the node as a Localhost profile), reaches
  Succeeded, and its log comes back through the API server (API server -> kubelet -> containerd);
- weakened and privileged pods are refused by the API server;
- a pod has eth0 in its own subnet and no default route: nothing outside that subnet is reachable;
- RuntimeClass gvisor runs pods under gVisor (or is absent, with the reason `up` recorded).
"""

from __future__ import annotations

import json
import platform
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from scripts.testcluster.settings import DEFAULT_IMAGE, RUNTIME_CLASS, RUNTIME_HANDLER, Settings
from tests.support.k8s import hardened_pod, run_pod, unique
from tests.support.kube import host_env
from tests.support.paths import ROOT

pytestmark = pytest.mark.k8s

SECCOMP_PROFILES = sorted(p.name for p in (ROOT / "orchestrator/profiles/builtin/seccomp").glob("*.json"))


def status_fields(log: str) -> dict[str, str]:
    """``Key:\tvalue`` lines of /proc/self/status as printed by the pods."""
    return dict(line.split(":\t", 1) for line in log.splitlines() if ":\t" in line)


# what every hardened pod prints: its uid, its /proc/self/status security fields, whether / is writable
IDENTITY = "id -u; grep -E '^(Seccomp|NoNewPrivs|CapEff|CapBnd):' /proc/self/status; touch /workspace/x 2>&1 || true"


def assert_hardened(log: str, *, gvisor: bool = False) -> None:
    lines = log.splitlines()
    assert lines[0] == "1000"
    fields = status_fields(log)
    assert fields["Seccomp"] == "2"  # a filter is installed (under gVisor: by runsc --oci-seccomp)
    if not gvisor:  # gVisor's /proc/self/status has no NoNewPrivs line
        assert fields["NoNewPrivs"] == "1"
    assert fields["CapEff"] == fields["CapBnd"] == "0000000000000000"
    assert lines[-1] == "touch: cannot touch '/workspace/x': Read-only file system"


def test_hardened_pod_runs_under_restricted_and_its_log_comes_through_the_api(
    k8s_api: Any, sandbox_namespace: str
) -> None:
    phase, log = run_pod(k8s_api, sandbox_namespace, hardened_pod(unique("hardened"), ["sh", "-c", IDENTITY]))
    assert phase == "Succeeded", log
    assert_hardened(log)


@pytest.mark.parametrize("profile", SECCOMP_PROFILES)
def test_the_projects_seccomp_profile_is_installed_on_the_node_and_applies(
    k8s_api: Any, sandbox_namespace: str, profile: str
) -> None:
    """``localhostProfile: sandbox-orchestrator/<file>`` resolves to the project's own profile: it refuses
    io_uring_setup with EPERM (its default action), where the runtime's default profile lets the call
    through to the kernel (EFAULT for a NULL params pointer) — so the filter seen is ours, not the default."""
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.syscall(425, 1, None)\n"  # io_uring_setup(1, NULL)
        "print('io_uring_setup', r, os.strerror(ctypes.get_errno()) if r < 0 else '')\n"
    )
    localhost = {"type": "Localhost", "localhostProfile": f"sandbox-orchestrator/{profile}"}
    phase, log = run_pod(
        k8s_api,
        sandbox_namespace,
        hardened_pod(
            unique("seccomp-local"),
            ["sh", "-c", f'{IDENTITY} && python3 -c "$0"', probe],
            image=DEFAULT_IMAGE,
            seccomp=localhost,
        ),
    )
    assert phase == "Succeeded", log
    assert_hardened(log.rsplit("\n", 2)[0])
    assert log.splitlines()[-1] == "io_uring_setup -1 Operation not permitted"

    default = hardened_pod(unique("seccomp-default"), ["python3", "-c", probe], image=DEFAULT_IMAGE)
    phase, log = run_pod(k8s_api, sandbox_namespace, default)
    assert phase == "Succeeded", log
    assert log.splitlines()[-1] == "io_uring_setup -1 Bad address"


def refusal(k8s_api: Any, namespace: str, pod: dict[str, Any]) -> tuple[int, str]:
    """The API server's refusal of ``pod``: its HTTP status and message (a pod it admits fails the test)."""
    with pytest.raises(ApiException) as refused:
        client.CoreV1Api(k8s_api).create_namespaced_pod(namespace, pod)
    return refused.value.status, json.loads(refused.value.body)["message"]


def test_a_weakened_pod_is_refused_by_pod_security(k8s_api: Any, sandbox_namespace: str) -> None:
    """No securityContext at all: 403 from the PodSecurity admission, naming what "restricted" requires."""
    pod = hardened_pod(unique("weak"), ["true"])
    pod["spec"].pop("securityContext")
    pod["spec"]["containers"][0].pop("securityContext")
    status, message = refusal(k8s_api, sandbox_namespace, pod)
    assert status == 403
    assert 'violates PodSecurity "restricted:latest"' in message
    for requirement in (
        "allowPrivilegeEscalation != false",
        "unrestricted capabilities",
        "runAsNonRoot != true",
        "seccompProfile",
    ):
        assert requirement in message


def test_a_privileged_pod_is_refused(k8s_api: Any, sandbox_namespace: str) -> None:
    """privileged: true is refused whatever the namespace says: the API server runs with
    --allow-privileged=false, and that validation answers before admission (422)."""
    pod = hardened_pod(unique("privileged"), ["true"])
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    status, message = refusal(k8s_api, sandbox_namespace, pod)
    assert status == 422
    assert "spec.containers[0].securityContext.privileged: Forbidden: disallowed by cluster policy" in message


def test_host_namespaces_are_refused_by_pod_security(k8s_api: Any, sandbox_namespace: str) -> None:
    """Host namespaces are not covered by --allow-privileged: PodSecurity alone refuses hostPID/hostNetwork."""
    pod = hardened_pod(unique("hostns"), ["true"])
    pod["spec"]["hostPID"] = True
    pod["spec"]["hostNetwork"] = True
    status, message = refusal(k8s_api, sandbox_namespace, pod)
    assert status == 403
    assert 'violates PodSecurity "restricted:latest": host namespaces (hostNetwork=true, hostPID=true)' in message


def test_a_pod_has_no_default_route(k8s_api: Any, sandbox_namespace: str) -> None:
    """eth0 with the pod subnet's on-link route only: no default route (IPv4 or IPv6), so nothing outside
    the pod subnet — the host, the internet — is reachable."""
    phase, log = run_pod(
        k8s_api,
        sandbox_namespace,
        hardened_pod(unique("route"), ["sh", "-c", "cat /proc/net/route; echo ---; cat /proc/net/ipv6_route"]),
    )
    assert phase == "Succeeded", log
    v4, v6 = log.split("---\n")
    routes = [line.split() for line in v4.splitlines()[1:]]
    assert routes, v4
    assert all(iface == "eth0" for iface, *_ in routes), v4
    assert all(dest != "00000000" for _, dest, *_ in routes), v4
    # IPv6: link-local and loopback entries only, never a ::/0 route through an interface
    for line in v6.splitlines():
        dest, prefix, *_rest, iface = line.split()
        assert not (dest == "0" * 32 and prefix == "00" and iface != "lo"), v6


def test_gvisor_runtime_class_runs_pods_under_gvisor(k8s_api: Any, sandbox_namespace: str) -> None:
    """A hardened pod under RuntimeClass gvisor sees gVisor's kernel (release 4.4.0), not the host's."""
    classes = {rc.metadata.name: rc.handler for rc in client.NodeV1Api(k8s_api).list_runtime_class().items}
    if RUNTIME_CLASS not in classes:
        reason = Settings.from_env(host_env()).gvisor_reason
        pytest.skip(f"no RuntimeClass gvisor: {reason.read_text() if reason.exists() else 'no reason recorded'}")
    assert classes[RUNTIME_CLASS] == RUNTIME_HANDLER
    phase, log = run_pod(
        k8s_api,
        sandbox_namespace,
        hardened_pod(unique("gvisor"), ["sh", "-c", f"uname -r; {IDENTITY}"], runtime_class=RUNTIME_CLASS),
    )
    assert phase == "Succeeded", log
    release, rest = log.split("\n", 1)
    assert release == "4.4.0"
    assert release != platform.release()
    assert_hardened(rest, gvisor=True)
