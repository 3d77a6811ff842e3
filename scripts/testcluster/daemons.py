"""The six daemons as data: each one's command line, environment and readiness check, built from the
settings (``daemon``), and their start, stop and state on top of supervise.py.

Settings and why (docs/kubernetes-cluster.md has the whole story):
- etcd and every listener on 127.0.0.1 only, on ports of the cluster's own; TLS with client certificates.
- kube-apiserver: --allow-privileged=false (privileged containers are refused in every namespace, before
  admission); --endpoint-reconciler-type=none (no Endpoints for the kubernetes Service, whose only address
  would be 127.0.0.1, which Endpoints refuse: an error every 10 s otherwise); --kubelet-preferred-address-
  types=Hostname (the node is named localhost, so logs/exec reach the kubelet on 127.0.0.1: the kubelet
  refuses a loopback node IP), its serving certificate checked against the cluster's CA.
- controller-manager and scheduler: --secure-port=0 (no metrics endpoint: one port less), no leader election.
- containerd: PATH holds its shims (its own directory first: the runc shim of the same release; then the bin
  dir with gVisor's); the proxy variables send any image pull to a closed port on 127.0.0.1, so a pod naming
  an image that is not imported fails at once instead of sending traffic off the machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import health, supervise
from .pki import APISERVER_KUBELET_CLIENT_CERT
from .settings import (
    API_PORT,
    COMPONENTS,
    ETCD_PEER_PORT,
    ETCD_PORT,
    LOOPBACK,
    NODE_NAME,
    SERVICE_ACCOUNT_ISSUER,
    SERVICE_CIDR,
    Component,
    Settings,
)

ETCD_NAME = "so-k8s"
#: where an image pull goes: a closed port on loopback (loopback itself is never proxied)
NO_PULL_PROXY = f"http://{LOOPBACK}:9"


@dataclass(frozen=True)
class Daemon:
    name: Component
    argv: tuple[str, ...]
    #: variables set (or emptied, with "") on top of this process's environment
    env: dict[str, str] = field(default_factory=dict)
    ready: Callable[[Settings], bool] | None = None
    ready_timeout_s: float = 0.0
    ready_what: str = ""


def _flags(**flags: object) -> tuple[str, ...]:
    """--name=value flags from keyword arguments (underscores become dashes); True gives a bare flag."""
    out = []
    for key, value in flags.items():
        name = "--" + key.replace("_", "-")
        out.append(name if value is True else f"{name}={value}")
    return tuple(out)


def containerd_binary(s: Settings) -> Path:
    return s.containerd_bin or Path("/usr/bin/containerd")


def daemon(s: Settings, name: Component) -> Daemon:
    pki = s.pki_dir
    etcd_url = f"https://{LOOPBACK}:{ETCD_PORT}"
    peer_url = f"https://{LOOPBACK}:{ETCD_PEER_PORT}"
    if name == "etcd":
        argv = (
            str(s.binary("etcd")),
            *("--name", ETCD_NAME, "--data-dir", str(s.etcd_data), "--log-level", "warn"),
            *_flags(
                listen_client_urls=etcd_url,
                advertise_client_urls=etcd_url,
                listen_peer_urls=peer_url,
                initial_advertise_peer_urls=peer_url,
                initial_cluster=f"{ETCD_NAME}={peer_url}",
                cert_file=s.cert("etcd"),
                key_file=s.key("etcd"),
                trusted_ca_file=s.ca_cert,
                client_cert_auth=True,
                peer_cert_file=s.cert("etcd"),
                peer_key_file=s.key("etcd"),
                peer_trusted_ca_file=s.ca_cert,
                peer_client_cert_auth=True,
            ),
        )
        return Daemon(name, argv, ready=health.etcd_healthy, ready_timeout_s=30, ready_what="become healthy")
    if name == "kube-apiserver":
        argv = (
            str(s.binary(name)),
            *_flags(
                bind_address=LOOPBACK,
                secure_port=API_PORT,
                advertise_address=LOOPBACK,
                etcd_servers=etcd_url,
                etcd_cafile=s.ca_cert,
                etcd_certfile=s.cert("etcd-client"),
                etcd_keyfile=s.key("etcd-client"),
                client_ca_file=s.ca_cert,
                tls_cert_file=s.cert("apiserver"),
                tls_private_key_file=s.key("apiserver"),
                service_account_key_file=pki / "sa.pub",
                service_account_signing_key_file=pki / "sa.key",
                service_account_issuer=SERVICE_ACCOUNT_ISSUER,
                service_cluster_ip_range=SERVICE_CIDR,
                authorization_mode="Node,RBAC",
                enable_admission_plugins="NodeRestriction,PodSecurity",
                allow_privileged="false",
                anonymous_auth="false",
                profiling="false",
                endpoint_reconciler_type="none",
                kubelet_preferred_address_types="Hostname",
                kubelet_certificate_authority=s.ca_cert,
                kubelet_client_certificate=s.cert(APISERVER_KUBELET_CLIENT_CERT),
                kubelet_client_key=s.key(APISERVER_KUBELET_CLIENT_CERT),
            ),
        )
        return Daemon(name, argv, ready=health.api_ready, ready_timeout_s=60, ready_what="become ready")
    if name == "containerd":
        binary = containerd_binary(s)
        path = os.pathsep.join([str(binary.parent), str(s.gvisor_shim.parent), os.environ.get("PATH", "")])
        env = {
            "PATH": path,
            "HTTP_PROXY": NO_PULL_PROXY,
            "HTTPS_PROXY": NO_PULL_PROXY,
            "http_proxy": "",
            "https_proxy": "",
            "NO_PROXY": "",
            "no_proxy": "",
        }
        return Daemon(
            name,
            (str(binary), "--config", str(s.containerd_config)),
            env=env,
            ready=health.containerd_answers,
            ready_timeout_s=30,
            ready_what=f"answer on {s.containerd_socket}",
        )
    if name == "kubelet":
        argv = (
            str(s.binary(name)),
            *_flags(
                config=s.kubelet_config,
                kubeconfig=s.kubeconfig("kubelet"),
                root_dir=s.kubelet_root,
                hostname_override=NODE_NAME,
            ),
        )
        return Daemon(name, argv)
    if name == "kube-controller-manager":
        argv = (
            str(s.binary(name)),
            *_flags(
                kubeconfig=s.kubeconfig("controller-manager"),
                secure_port=0,
                leader_elect="false",
                use_service_account_credentials="true",
                service_account_private_key_file=pki / "sa.key",
                root_ca_file=s.ca_cert,
                service_cluster_ip_range=SERVICE_CIDR,
                allocate_node_cidrs="false",
            ),
        )
        return Daemon(name, argv)
    if name == "kube-scheduler":
        argv = (str(s.binary(name)), *_flags(kubeconfig=s.kubeconfig("scheduler"), secure_port=0, leader_elect="false"))
        return Daemon(name, argv)
    raise ValueError(f"no daemon {name!r}")


# --- state, start, stop --------------------------------------------------------------------------------


def pid(s: Settings, name: Component) -> int | None:
    """Our running daemon's pid (its binary's name, our cluster directory on its command line)."""
    return supervise.owned_pid(s.pid_file(name), name, str(s.cluster_dir))


def running(s: Settings, name: Component) -> bool:
    return pid(s, name) is not None


def all_running(s: Settings) -> bool:
    return all(running(s, name) for name in COMPONENTS)


def executable(s: Settings, name: Component) -> Path | None:
    """The binary our running daemon was started from (None when it does not run)."""
    number = pid(s, name)
    if number is None:
        return None
    try:
        return Path(os.readlink(f"/proc/{number}/exe").removesuffix(" (deleted)"))
    except OSError:
        return None


class DaemonError(RuntimeError):
    pass


def tail(log: Path, lines: int = 25) -> str:
    try:
        text = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return "    (no log)"
    return "\n".join(f"    {line}" for line in text)


def failure(s: Settings, name: str, message: str) -> DaemonError:
    """The message, then the end of the component's log."""
    log = s.log_file(name)
    return DaemonError(f"{message}; the end of {log}:\n{tail(log)}")


def start(s: Settings, d: Daemon) -> None:
    """Starts ``d`` unless it runs, then waits for its readiness check (if it has one)."""
    if running(s, d.name):
        return
    # this process's environment (less the PYTHONPATH the entry point set for it), and the daemon's own
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | d.env
    proc = supervise.start(s.pid_file(d.name), s.log_file(d.name), d.argv, env)
    ready = d.ready
    if ready is None:
        return
    # a daemon that exits (a port taken, a bad flag) fails at once, not after the whole timeout
    if (
        not supervise.wait_until(d.ready_timeout_s, lambda: ready(s) or proc.poll() is not None)
        or proc.poll() is not None
    ):
        what = f"exited with {proc.returncode}" if proc.poll() is not None else f"did not {d.ready_what}"
        raise failure(s, d.name, f"{d.name} {what}")


def stop(s: Settings, name: Component, grace: float = 10.0, *, quiet: bool = False) -> None:
    supervise.stop(s.pid_file(name), name, str(s.cluster_dir), grace, quiet=quiet)
