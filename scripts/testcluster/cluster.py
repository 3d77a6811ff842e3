"""The cluster's steps: ``up`` (start what is not running, wait until the node is Ready; idempotent) and
``down`` (delete the pods, stop everything, clean mounts, network, cgroups and the cluster's objects).
scripts/k8s-cluster.sh has installed the host's packages and built the binaries before either runs (main.py).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from . import configs, daemons, health, host, images, network, pki, supervise
from .settings import (
    API_SERVER,
    COMPONENTS,
    KUBECONFIG_USERS,
    NODE_NAME,
    SOCKET_PATH_MAX,
    Component,
    Settings,
)

LOCK_TIMEOUT_S = 900.0
#: runsc writes a log directory per container (about 60 KiB): the newest are kept for diagnosis
RUNSC_LOGS_KEPT = 200


class ClusterError(RuntimeError):
    """A step failed: the message says which and why (main.py prints it and exits 1)."""


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ClusterError(
            f"{what} needs root (the kubelet and containerd make cgroups, mounts and network namespaces)"
        )


@contextmanager
def locked(s: Settings, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """The cluster's lock (one up or down at a time, whoever runs it)."""
    fd = os.open(s.lock_file, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise ClusterError(f"timed out waiting for {s.lock_file}") from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)


# --- up ------------------------------------------------------------------------------------------------


def ensure_pki(s: Settings) -> None:
    """A new CA and every certificate when any is missing or expires within a day. Components running with
    the old ones are stopped first (they would no longer trust each other)."""
    specs = pki.certificate_set()
    if pki.valid(s.pki_dir, specs):
        return
    for name in COMPONENTS:
        daemons.stop(s, name)
    supervise.say("making the cluster's CA and certificates")
    pki.make(s.pki_dir, specs)


def ensure_kubeconfigs(s: Settings) -> None:
    for name, cert in KUBECONFIG_USERS.items():
        configs.kubeconfig(s, name, cert).write()


def ensure_node_configs(s: Settings) -> None:
    """Every node-side configuration; a running component whose configuration changed (or containerd
    running another binary than the one asked for) is stopped here, and started again with it below."""
    for directory in (s.cni_conf_dir, s.kubelet_root, s.containerd_root, s.runsc_logs_dir):
        directory.mkdir(parents=True, exist_ok=True)
    files = configs.node_configs(s)
    changed = files["containerd"].write()
    running = daemons.executable(s, "containerd")
    if changed or (running is not None and running != daemons.containerd_binary(s).resolve()):
        daemons.stop(s, "containerd")
    # read by the shim at each pod start, and by containerd whenever its CNI directory changes
    files["runsc"].write()
    files["cni"].write()
    if files["kubelet"].write():
        daemons.stop(s, "kubelet")


def prune_runsc_logs(s: Settings, keep: int = RUNSC_LOGS_KEPT) -> None:
    try:
        dirs = [d for d in s.runsc_logs_dir.iterdir() if d.is_dir()]
    except FileNotFoundError:
        return
    dirs.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    for old in dirs[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def start(s: Settings, name: Component) -> None:
    daemons.start(s, daemons.daemon(s, name))


def start_containerd(s: Settings) -> None:
    if daemons.running(s, "containerd"):
        return
    if len(str(s.containerd_socket)) > SOCKET_PATH_MAX:
        raise ClusterError(
            f"socket path too long ({len(str(s.containerd_socket))} bytes, unix limit is 107): "
            f"{s.containerd_socket} — set SANDBOX_RUN_DIR to a shorter directory"
        )
    s.containerd_state.mkdir(parents=True, exist_ok=True)
    prune_runsc_logs(s)
    start(s, "containerd")


def start_kubelet(s: Settings) -> None:
    if daemons.running(s, "kubelet"):
        return
    host.save_sysctls(s.sysctl_saved)
    host.make_cgroup_root()
    for directory in (s.kubelet_root, s.pod_logs_dir, s.volume_plugin_dir):
        directory.mkdir(parents=True, exist_ok=True)
    start(s, "kubelet")


def wait_node_ready(s: Settings, seconds: float, what: str) -> None:
    if not supervise.wait_until(seconds, lambda: health.node_ready(s)):
        raise daemons.failure(s, "kubelet", f"node {NODE_NAME} {what}")


def up(s: Settings) -> None:
    require_root("up")
    t0 = time.monotonic()
    for directory in (s.cluster_dir, s.cluster_run_dir, s.logs_dir):
        directory.mkdir(parents=True, exist_ok=True)
    s.cluster_dir.chmod(0o700)
    s.cluster_run_dir.chmod(0o700)
    with locked(s):
        ensure_pki(s)
        ensure_kubeconfigs(s)
        ensure_node_configs(s)
        # a run that stopped half-way (or any component that died) redoes the waits and the objects below
        if not daemons.all_running(s):
            s.up_done.unlink(missing_ok=True)
            supervise.say(f"starting the cluster (logs in {s.logs_dir})")
        start(s, "etcd")
        start(s, "kube-apiserver")
        start_containerd(s)
        images.ensure_images(s)
        images.ensure_seccomp_profiles(s)
        start_kubelet(s)
        start(s, "kube-controller-manager")
        start(s, "kube-scheduler")
        network.ensure_egress_attachment(s)

        if s.up_done.exists():
            if not health.node_ready(s):
                wait_node_ready(s, 60, "is not Ready")
            return
        # the client library: only when objects are applied
        from kubernetes.client.exceptions import ApiException

        from . import gvisor, objects

        try:
            with objects.api_client(s) as api:
                objects.apply(api, objects.kubelet_api_binding())
                wait_node_ready(s, 90, "did not become Ready")
                if not supervise.wait_until(60, lambda: health.default_service_account(s)):
                    raise daemons.failure(s, "kube-controller-manager", "the default ServiceAccount did not appear")
                gvisor.ensure(s, api)
        except ApiException as exc:
            raise ClusterError(f"the API server refused a request: {exc.status} {exc.reason}: {exc.body}") from exc
        s.up_done.touch()
        supervise.say(f"up in {time.monotonic() - t0:.0f} s: {API_SERVER} (KUBECONFIG={s.admin_kubeconfig})")


# --- down ----------------------------------------------------------------------------------------------


def delete_pods(s: Settings) -> None:
    """Pods go through the kubelet while it runs, so it unmounts their volumes and tears their sandboxes down."""
    if not (health.api_ready(s) and daemons.running(s, "kubelet")):
        return
    if health.no_pods(s):
        return  # nothing to delete: no client library to load
    from . import objects

    try:
        with objects.api_client(s) as api:
            gone = objects.delete_all_pods(api)
    except Exception as exc:  # whatever is left is removed by force below
        supervise.warn(f"deleting the pods failed ({exc}); removing what is left by force")
        return
    if not gone:
        supervise.warn("not every pod was deleted in 60 s; removing what is left by force")


def remove_containers(s: Settings) -> None:
    """Whatever containerd still runs in the Kubernetes namespace: killed, its tasks and containers removed."""
    if not health.containerd_answers(s):
        return

    def ids(*what: str) -> list[str]:
        proc = subprocess.run(images.ctr(s, *what, "ls", "-q"), capture_output=True, text=True, check=False)
        return proc.stdout.split()

    def each(ids_: list[str], *command: str) -> None:
        for ident in ids_:
            subprocess.run(images.ctr(s, *command, ident), capture_output=True, check=False)

    each(ids("tasks"), "tasks", "kill", "-s", "SIGKILL")
    each(ids("tasks"), "tasks", "rm", "-f")
    each(ids("containers"), "containers", "rm")


def down(s: Settings) -> None:
    require_root("down")
    if not s.cluster_dir.is_dir():
        return
    s.cluster_run_dir.mkdir(parents=True, exist_ok=True)
    with locked(s):
        s.up_done.unlink(missing_ok=True)
        # nothing recreates or places pods while they are deleted
        daemons.stop(s, "kube-controller-manager")
        daemons.stop(s, "kube-scheduler")
        delete_pods(s)
        daemons.stop(s, "kubelet")
        remove_containers(s)
        daemons.stop(s, "containerd", 20)
        host.kill_leftovers(s)
        # the API server's graceful shutdown waits up to a minute for its clients' open watches (anyone's
        # kubectl wait or informer): a few seconds, then it is killed; its state goes with etcd's below
        daemons.stop(s, "kube-apiserver", 3, quiet=True)
        daemons.stop(s, "etcd")
        host.unmount_ours(s)
        network.remove_network(s)
        host.remove_cgroups()
        host.restore_sysctls(s.sysctl_saved)
        # the cluster's objects go with it (the next up starts from an empty etcd); binaries, PKI, logs and
        # the imported images stay
        host.remove_tree(s.etcd_data, s.kubelet_root, s.pod_logs_dir, s.cluster_run_dir)
        left = host.our_mounts(s)
        if left:
            supervise.warn(f"mounts left: {' '.join(left)}")
