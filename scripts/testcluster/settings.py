"""The test cluster's settings, in one place: what the cluster code uses and what the tests import.

Fixed facts (ports, names, subnets, images) are module constants; what depends on the environment (the state
and runtime directories, the pods' subnet, the kubelet's PLEG, the binaries) is a frozen ``Settings`` made by
``Settings.from_env``, with every path derived from it. Standard library only: ``status`` and ``env`` run on
any python3, and the tests import it without the cluster code's dependencies.

Environment (all optional), as for the engine's scripts (scripts/lib.sh):
  SANDBOX_STATE_DIR       persistent state; default /var/lib/sandbox-orchestrator (the cluster: <it>/k8s/cluster)
  SANDBOX_RUN_DIR         runtime dir; default /run/sandbox-orchestrator, or $SANDBOX_STATE_DIR/run when only
                          SANDBOX_STATE_DIR is set (the cluster: <it>/k8s)
  SANDBOX_RUNSC           the runsc binary gVisor's shim runs; default $SANDBOX_STATE_DIR/bin/runsc
  SANDBOX_K8S_POD_SUBNET  the pods' IPv4 subnet; default 10.253.0.0/24 (see ``parse_pod_subnet``)
  SANDBOX_K8S_PLEG        generic (default) | evented: how the kubelet learns that a container started or ended
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

# --- fixed facts ---------------------------------------------------------------------------------------

LOOPBACK: Final = "127.0.0.1"
ETCD_PORT: Final = 23790
ETCD_PEER_PORT: Final = 23800
API_PORT: Final = 16443
KUBELET_PORT: Final = 16250
API_SERVER: Final = f"https://{LOOPBACK}:{API_PORT}"
#: the node's name: the kubelet refuses a loopback node IP, so the API server reaches it by this host name
NODE_NAME: Final = "localhost"
#: no kube-proxy: service addresses are names in the API only
SERVICE_CIDR: Final = ipaddress.IPv4Network("10.254.0.0/24")
SERVICE_IP: Final = SERVICE_CIDR.network_address + 1
SERVICE_ACCOUNT_ISSUER: Final = "https://kubernetes.default.svc.cluster.local"
CLUSTER_DOMAIN: Final = "cluster.local"
#: the pods' subnet: the bridge has no address and pods no default route, so the host never routes to it
DEFAULT_POD_SUBNET: Final = ipaddress.IPv4Network("10.253.0.0/24")
#: pods get addresses .1 to .250 of their subnet; .254 is the egress attachment's
POD_RANGE_END_OFFSET: Final = 250
EGRESS_OFFSET: Final = 254
BRIDGE: Final = "so-k8s0"
#: the egress proxy's door onto the pods' network: a network namespace of its own on the bridge, holding one
#: address and nothing but the listener a controller opens in it (backend.kubernetes.egress.netns)
EGRESS_NETNS: Final = "so-k8s-egress"
EGRESS_NETNS_PATH: Final = Path("/var/run/netns") / EGRESS_NETNS
EGRESS_LINK: Final = "so-k8s-egh"  # the veth's bridge end
EGRESS_PEER: Final = "so-k8s-egn"  # its end inside the namespace
#: the port a controller's egress listener takes in that namespace, by convention (docs, tests)
EGRESS_PROXY_PORT: Final = 3128
CNI_NETWORK: Final = "sandbox-orchestrator-k8s"
CNI_BIN_DIR: Final = Path("/usr/lib/cni")  # Debian's containernetworking-plugins
#: libcni's result cache (containerd 1.6 cannot move it): down removes our network's entries
CNI_RESULTS_DIR: Final = Path("/var/lib/cni/results")
#: every pod cgroup lives below this one, in every hierarchy (removed by down)
CGROUP_ROOT: Final = "/sandbox-orchestrator-k8s"
#: the kubelet's podPidsLimit (a pod has no pids field of its own)
NODE_POD_PIDS_LIMIT: Final = 1024
#: the kubelet's relist period with the generic PLEG (its default): when it notices a container's end
PLEG_RELIST_S: Final = 1.0

IMAGE_PREFIX: Final = "sandbox-orchestrator"
LABEL_NS: Final = "org.sandbox-orchestrator"
BASE_IMAGE: Final = f"{IMAGE_PREFIX}/base:bookworm"
MINIMAL_IMAGE: Final = f"{IMAGE_PREFIX}/minimal:latest"
DEFAULT_IMAGE: Final = f"{IMAGE_PREFIX}/default:latest"
#: the pod sandbox ("pause") image: the base image whose command sleeps forever, built by up
PAUSE_IMAGE: Final = f"{IMAGE_PREFIX}/k8s-pause:latest"
#: the images pods may use (imagePullPolicy Never), imported from the Docker engine by up
SANDBOX_IMAGES: Final = (BASE_IMAGE, MINIMAL_IMAGE, DEFAULT_IMAGE)
#: imported too when `make image` built it
CONTROLLER_IMAGE: Final = f"{IMAGE_PREFIX}/controller:latest"
#: pods name the project's seccomp profiles as localhostProfile: sandbox-orchestrator/<file>
SECCOMP_PROFILE_DIR: Final = "sandbox-orchestrator"

RUNTIME_CLASS: Final = "gvisor"
RUNTIME_HANDLER: Final = "runsc"
GVISOR_PROBE_NAMESPACE: Final = "sandbox-orchestrator-gvisor-probe"

Component = Literal["etcd", "kube-apiserver", "containerd", "kubelet", "kube-controller-manager", "kube-scheduler"]
#: start order; down stops them in reverse (after deleting the pods)
COMPONENTS: Final[tuple[Component, ...]] = (
    "etcd",
    "kube-apiserver",
    "containerd",
    "kubelet",
    "kube-controller-manager",
    "kube-scheduler",
)
#: the kubeconfigs up writes, each with the client certificate of the same name as its user
KUBECONFIG_USERS: Final = {
    "admin": "admin",
    "controller-manager": "controller-manager",
    "scheduler": "scheduler",
    "kubelet": "kubelet-client",
}
#: where test sessions register themselves, beside the cluster's state (tests/support/kube.py)
TEST_SESSIONS: Final = "test-sessions"
#: the values the kubelet overwrites at start: saved by up, written back by down
KUBELET_SYSCTLS: Final = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)

Pleg = Literal["generic", "evented"]
PLEGS: Final[tuple[Pleg, ...]] = ("generic", "evented")

DEFAULT_STATE_DIR: Final = Path("/var/lib/sandbox-orchestrator")
DEFAULT_RUN_DIR: Final = Path("/run/sandbox-orchestrator")
REPO_DIR: Final = Path(__file__).resolve().parents[2]
#: a unix socket path must fit sun_path (108 bytes with the NUL); 104 leaves containerd room for suffixes
SOCKET_PATH_MAX: Final = 103


class SettingsError(ValueError):
    """An environment variable names something the cluster cannot use."""


def parse_pod_subnet(value: str) -> ipaddress.IPv4Network:
    """SANDBOX_K8S_POD_SUBNET: a private IPv4 network, written without host bits, from /16 to /24 (pods get
    .1-.250 of its first /24 and the egress attachment .254), apart from the service range."""
    try:
        subnet = ipaddress.ip_network(value.strip(), strict=True)
    except ValueError as exc:
        raise SettingsError(f"SANDBOX_K8S_POD_SUBNET must be an IPv4 network such as 10.253.0.0/24: {exc}") from exc
    if not isinstance(subnet, ipaddress.IPv4Network):
        raise SettingsError(f"SANDBOX_K8S_POD_SUBNET must be an IPv4 network (got {value!r})")
    if not 16 <= subnet.prefixlen <= 24:
        raise SettingsError(f"SANDBOX_K8S_POD_SUBNET must be a /16 to /24 network (got /{subnet.prefixlen})")
    if not subnet.is_private or subnet.is_loopback or subnet.is_link_local:
        raise SettingsError(f"SANDBOX_K8S_POD_SUBNET must be a private network (got {subnet})")
    if subnet.overlaps(SERVICE_CIDR):
        raise SettingsError(f"SANDBOX_K8S_POD_SUBNET {subnet} overlaps the service range {SERVICE_CIDR}")
    return subnet


def parse_pleg(value: str) -> Pleg:
    for pleg in PLEGS:
        if value == pleg:
            return pleg
    raise SettingsError(f"SANDBOX_K8S_PLEG must be evented or generic (got '{value}')")


def _abspath(value: str) -> Path:
    """Absolute and normalised, symlinks resolved, without requiring it to exist (lib.sh's so_abspath)."""
    return Path(os.path.realpath(value))


@dataclass(frozen=True)
class Settings:
    """Where the cluster lives and how it runs; every path below is derived from these fields."""

    state_dir: Path = DEFAULT_STATE_DIR
    run_dir: Path = DEFAULT_RUN_DIR
    pod_subnet: ipaddress.IPv4Network = DEFAULT_POD_SUBNET
    pleg: Pleg = "generic"
    runsc: Path = DEFAULT_STATE_DIR / "bin" / "runsc"
    #: the Kubernetes binaries (scripts/k8s-build.sh prints it); None where nothing needs them
    bin_dir: Path | None = None
    #: the containerd the node runs (its runc shim beside it); None: containerd on PATH
    containerd_bin: Path | None = None
    repo_dir: Path = REPO_DIR

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        bin_dir: Path | None = None,
        containerd_bin: Path | None = None,
    ) -> Settings:
        """The settings for an environment (default: this process's); raises SettingsError for a bad value."""
        env = os.environ if env is None else env
        state_set = bool(env.get("SANDBOX_STATE_DIR"))
        state_dir = _abspath(env["SANDBOX_STATE_DIR"]) if state_set else DEFAULT_STATE_DIR
        if env.get("SANDBOX_RUN_DIR"):
            run_dir = _abspath(env["SANDBOX_RUN_DIR"])
        elif state_set:
            run_dir = state_dir / "run"
        else:
            run_dir = DEFAULT_RUN_DIR
        subnet = env.get("SANDBOX_K8S_POD_SUBNET")
        runsc = env.get("SANDBOX_RUNSC")
        return cls(
            state_dir=state_dir,
            run_dir=run_dir,
            pod_subnet=parse_pod_subnet(subnet) if subnet else DEFAULT_POD_SUBNET,
            pleg=parse_pleg(env.get("SANDBOX_K8S_PLEG") or "generic"),
            runsc=Path(runsc) if runsc else state_dir / "bin" / "runsc",
            bin_dir=bin_dir,
            containerd_bin=containerd_bin,
        )

    # --- the pods' network ------------------------------------------------------------------------------

    @property
    def pod_range_end(self) -> ipaddress.IPv4Address:
        return self.pod_subnet.network_address + POD_RANGE_END_OFFSET

    @property
    def egress_ip(self) -> ipaddress.IPv4Address:
        return self.pod_subnet.network_address + EGRESS_OFFSET

    @property
    def egress_listen(self) -> str:
        """Where a controller on this host opens the egress proxy for the pods (backend.kubernetes.egress)."""
        return f"{self.egress_ip}:{EGRESS_PROXY_PORT}"

    # --- persistent state: $SANDBOX_STATE_DIR/k8s/cluster ----------------------------------------------

    @property
    def cluster_dir(self) -> Path:
        return self.state_dir / "k8s" / "cluster"

    @property
    def pki_dir(self) -> Path:
        return self.cluster_dir / "pki"

    @property
    def logs_dir(self) -> Path:
        return self.cluster_dir / "logs"

    @property
    def runsc_logs_dir(self) -> Path:
        return self.logs_dir / "runsc"

    @property
    def etcd_data(self) -> Path:
        return self.cluster_dir / "etcd"

    @property
    def containerd_root(self) -> Path:
        """containerd's root: the imported images (kept by down)."""
        return self.cluster_dir / "containerd"

    @property
    def containerd_config(self) -> Path:
        return self.cluster_dir / "containerd.toml"

    @property
    def runsc_config(self) -> Path:
        return self.cluster_dir / "runsc.toml"

    @property
    def cni_conf_dir(self) -> Path:
        return self.cluster_dir / "cni"

    @property
    def cni_conflist(self) -> Path:
        return self.cni_conf_dir / f"10-{CNI_NETWORK}.conflist"

    @property
    def kubelet_root(self) -> Path:
        return self.cluster_dir / "kubelet"

    @property
    def kubelet_pods_dir(self) -> Path:
        """Where the kubelet keeps its pods: gVisor's shim is built pointing here (scripts/k8s-build.sh)."""
        return self.kubelet_root / "pods"

    @property
    def kubelet_config(self) -> Path:
        return self.cluster_dir / "kubelet.yaml"

    @property
    def pod_logs_dir(self) -> Path:
        return self.cluster_dir / "pod-logs"

    @property
    def volume_plugin_dir(self) -> Path:
        return self.cluster_dir / "volume-plugins"

    @property
    def seccomp_dir(self) -> Path:
        return self.kubelet_root / "seccomp" / SECCOMP_PROFILE_DIR

    @property
    def image_stamps(self) -> Path:
        return self.cluster_dir / "images"

    @property
    def sysctl_saved(self) -> Path:
        return self.cluster_dir / "sysctl.saved"

    @property
    def gvisor_stamp(self) -> Path:
        return self.cluster_dir / "gvisor.proven"

    @property
    def gvisor_reason(self) -> Path:
        """Why there is no RuntimeClass gvisor, when there is none."""
        return self.cluster_dir / "gvisor.unavailable"

    @property
    def lock_file(self) -> Path:
        return self.cluster_dir / "cluster.lock"

    @property
    def test_sessions_dir(self) -> Path:
        """Where test sessions register themselves (tests/support/kube.py)."""
        return self.cluster_dir / TEST_SESSIONS

    def kubeconfig(self, name: str) -> Path:
        return self.cluster_dir / f"{name}.kubeconfig"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfig("admin")

    def log_file(self, name: str) -> Path:
        return self.logs_dir / f"{name}.log"

    def cert(self, name: str) -> Path:
        return self.pki_dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.pki_dir / f"{name}.key"

    @property
    def ca_cert(self) -> Path:
        return self.cert("ca")

    # --- runtime state: $SANDBOX_RUN_DIR/k8s ---------------------------------------------------------

    @property
    def cluster_run_dir(self) -> Path:
        return self.run_dir / "k8s"

    @property
    def containerd_state(self) -> Path:
        return self.cluster_run_dir / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.cluster_run_dir / "containerd.sock"

    @property
    def ipam_dir(self) -> Path:
        return self.cluster_run_dir / "ipam"

    @property
    def runsc_root(self) -> Path:
        return self.cluster_run_dir / "runsc"

    @property
    def up_done(self) -> Path:
        """Present once up went all the way (objects applied, gVisor decided): a later up only checks."""
        return self.cluster_run_dir / "up.done"

    def pid_file(self, name: str) -> Path:
        return self.cluster_run_dir / f"{name}.pid"

    # --- binaries ------------------------------------------------------------------------------------

    def binary(self, name: str) -> Path:
        if self.bin_dir is None:
            raise SettingsError(f"no bin dir: {name} is built by scripts/k8s-build.sh")
        return self.bin_dir / name

    @property
    def gvisor_shim(self) -> Path:
        return self.binary("containerd-shim-runsc-v1")

    @property
    def seccomp_sources(self) -> Path:
        """The project's seccomp profiles, installed on the node by up."""
        return self.repo_dir / "orchestrator" / "profiles" / "builtin" / "seccomp"

    @property
    def docker_host_file(self) -> Path:
        """The engine scripts/setup.sh recorded (its DOCKER_HOST)."""
        return self.state_dir / "docker-host"
