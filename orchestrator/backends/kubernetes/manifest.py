"""The pod for one LaunchSpec: every hardening setting of the profile, explicit. Pure: no I/O.

What is sent is exactly what is reviewed and tested (``tests/k8s`` reads each value back from the API
server). Decisions beyond a one-to-one mapping of the resolved profile (the table is ``PROFILE_MAPPING``):

* ``restartPolicy: Never`` and a fresh pod per execution: never reused, never restarted.
* ``activeDeadlineSeconds`` = the wall timeout plus a small grace: the controller kills at the timeout
  itself; the kubelet's deadline is the backstop if the controller is gone.
* rlimits (nofile, fsize) have no pod field: the command runs through ``prlimit`` (util-linux, in every
  image of ours), which sets both hard and soft limits and ``exec``s it, so the command is still PID 1.
* the kubelet adds the API server's Service variables (``KUBERNETES_SERVICE_HOST``, ``KUBERNETES_PORT_443_TCP``,
  ...) to every container, ``enableServiceLinks`` or not: ``env -u`` removes them before ``prlimit`` (``env``
  first: its ``NAME=VALUE`` operands never meet the command's argv), so the command gets exactly the spec's env.
* the kubelet bind-mounts a file of its own, world-writable, on the node's disk, at ``terminationMessagePath``
  (no pod field turns it off; outside ephemeral-storage accounting): it goes below ``/root``, which the
  sandbox user cannot enter in our images (0700 root), so the sandbox cannot write there.
* pids: no per-pod field either; the node's ``podPidsLimit`` applies (``sandboxctl doctor`` reports it).
* ``dnsPolicy: None`` with a nameserver on the pod's own loopback (nothing listens): names never resolve
  through the cluster's DNS, and ``enableServiceLinks: false`` keeps the cluster's services out of env.
* tmpfs mounts are ``emptyDir`` with ``medium: Memory`` and ``sizeLimit`` (their pages count against the
  memory limit); a read-only root always gets a /tmp (an empty 4 KiB one if the profile has none:
  ``_support.tmp_rule``).
* requests = limits for cpu, memory and ephemeral-storage (Guaranteed QoS): ephemeral storage bounds what
  the pod may write outside memory, its log included (past it the kubelet evicts the pod).
* ``terminationGracePeriodSeconds: 0``: when we stop a pod nothing waits for the workload's consent.
* a pre-started pod (a ``PooledLaunch``) runs our init behind the same barrier, ``env -u`` and
  ``prlimit`` (its rlimits pass to the command it execs); the launch message brings argv, env and working
  directory, so its container has neither; its deadline counts its wait in the pool (pvc mode only).
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import time
from typing import Any

from orchestrator.backends._support.labels import LABEL_OWNER, LABEL_PROFILE_HASH, sandbox_name
from orchestrator.backends._support.launch_message import INIT_PATH
from orchestrator.backends._support.spec_checks import check_spec
from orchestrator.backends._support.tmp_rule import TMP, needs_empty_tmp
from orchestrator.backends.base import LaunchSpec
from orchestrator.backends.kubernetes.egress import LABEL_EGRESS
from orchestrator.backends.kubernetes.settings import KubernetesSettings
from orchestrator.backends.kubernetes.start_barrier import (
    SIDECAR,
    STDIO_DIR,
    STDIO_VOLUME,
    barrier_command,
    idle_command,
    pooled_barrier_command,
    sidecar_command,
)
from orchestrator.backends.kubernetes.workspace_copy import wait_for_copy_command
from orchestrator.domain.canonical import sha256_hex
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.profiles import ResolvedProfile

CONTAINER = "sandbox"
HOSTNAME = "sandbox"
EMPTY_TMP_SIZE = "4Ki"
DEADLINE_GRACE_S = 5
PRLIMIT = "/usr/bin/prlimit"
ENV = "/usr/bin/env"
#: what the kubelet adds to every container for the API server's Service (``kubernetes`` in ``default``, port
#: 443 named https), whatever ``enableServiceLinks`` says
API_SERVICE_ENV = (
    "KUBERNETES_SERVICE_HOST",
    "KUBERNETES_SERVICE_PORT",
    "KUBERNETES_SERVICE_PORT_HTTPS",
    "KUBERNETES_PORT",
    "KUBERNETES_PORT_443_TCP",
    "KUBERNETES_PORT_443_TCP_PROTO",
    "KUBERNETES_PORT_443_TCP_PORT",
    "KUBERNETES_PORT_443_TCP_ADDR",
)
#: the kubelet's termination-message file: below a directory the sandbox user cannot enter (0700 root)
TERMINATION_MESSAGE_PATH = "/root/.termination-log"
#: where a node keeps our seccomp profiles, relative to the kubelet's seccomp root
LOCALHOST_PROFILE_DIR = "sandbox-orchestrator"
ANNOTATION_OWNER = "org.sandbox-orchestrator/owner"
ANNOTATION_DEADLINE = "org.sandbox-orchestrator/deadline"
WORKSPACE_VOLUME = "workspace"
COPY_IN_CONTAINER = "workspace-in"
#: the sidecar relays the command's stdio and, in copy mode, takes its workspace back out
COPY_OUT_CONTAINER = SIDECAR
#: what the helper containers may use (cat, tar and a shell) besides cpu: small, requests = limits like the command's
HELPER_RESOURCES = {"memory": "32Mi", "ephemeral-storage": "16Mi"}
HELPER_MEMORY_BYTES = 32 * 1024 * 1024  # HELPER_RESOURCES' memory, counted into the pod's
#: the sidecar's cpu comes out of the profile's (at most this many millicores, a tenth of a small profile):
#: a pod asks the node for exactly the profile's cpu, so as many sandboxes fit as on Docker
SIDECAR_CPU_MILLI = 50
#: the pipes' volume holds three named pipes, nothing else
STDIO_VOLUME_SIZE = "64Ki"
#: gVisor's mount hints (pod annotations its containerd shim reads): without them each container of a gVisor
#: pod sees the emptyDir through its own gofer, and a pipe one makes never appears to the other
GVISOR_MOUNT_HINT = "dev.gvisor.spec.mount.sandbox-io"
GVISOR_SHARED_TMPFS = {"share": "pod", "type": "tmpfs", "options": "rw"}

# Every resolved-profile field and where each backend puts it: the documentation's table and the test
# that both backends apply every built-in profile's hardening read the same rows.
PROFILE_MAPPING: tuple[tuple[str, str, str], ...] = (
    ("image", "Image", "containers[].image (imagePullPolicy from the backend config)"),
    ("runtime", "HostConfig.Runtime", "runtimeClassName (runtime_classes; runc: the cluster default)"),
    ("uid", "User", "securityContext.runAsUser, runAsNonRoot: true"),
    ("gid", "User", "securityContext.runAsGroup, pod fsGroup"),
    ("read_only_root", "HostConfig.ReadonlyRootfs", "securityContext.readOnlyRootFilesystem"),
    ("network", "HostConfig.NetworkMode: none", "default-deny NetworkPolicy required; dnsPolicy: None"),
    (
        "egress_allow",
        "the egress proxy, served on the sandbox's own 127.0.0.1 (its network namespace); HTTP(S)_PROXY",
        "the egress proxy's route for the pod's IP; NetworkPolicy egress to the proxy only; HTTP(S)_PROXY",
    ),
    ("workspace", "HostConfig.Mounts (bind)", "volume: the claim's sub-path (pvc) or an emptyDir (copy)"),
    (
        "read_only_mounts",
        "HostConfig.Mounts (bind, read-only, non-recursive)",
        "the claim's sub-path, read-only (a CI runner's externals, beside its work directory); refused in copy mode"
        " (SANDBOX.UNAVAILABLE)",
    ),
    ("tmpfs", "HostConfig.Tmpfs", "emptyDir medium: Memory, sizeLimit"),
    ("cpus", "HostConfig.NanoCpus", "resources.requests/limits.cpu, the pod's total (the stdio sidecar's share in it)"),
    ("memory_bytes", "HostConfig.Memory", "resources.requests/limits.memory"),
    ("memory_swap_bytes", "HostConfig.MemorySwap (= Memory)", "no swap (the kubelet's default)"),
    ("pids_limit", "HostConfig.PidsLimit", "the node's podPidsLimit (no per-pod field)"),
    ("wall_timeout_s", "killed by the controller", "killed by the controller; activeDeadlineSeconds backstop"),
    ("stdout_max_bytes", "attach stream, capped", "a named pipe, relayed by exec from the sidecar, capped"),
    ("stderr_max_bytes", "attach stream, capped", "a named pipe, relayed by exec from the sidecar, capped"),
    ("nofile", "HostConfig.Ulimits nofile", "prlimit --nofile"),
    ("fsize_bytes", "HostConfig.Ulimits fsize", "prlimit --fsize; requests/limits.ephemeral-storage"),
    ("workspace_write_bytes", "workspace meter", "workspace meter (pvc) / copy-out bound (copy)"),
    ("workspace_write_files", "workspace meter", "workspace meter (pvc) / copy-out bound (copy)"),
    ("seccomp", "HostConfig.SecurityOpt seccomp=<json>", "seccompProfile Localhost or RuntimeDefault"),
    ("cap_add", "HostConfig.CapAdd: none", "capabilities.add: none"),
    ("cap_drop", "HostConfig.CapDrop: ALL", "capabilities.drop: [ALL]"),
    ("no_new_privileges", "SecurityOpt no-new-privileges", "allowPrivilegeEscalation: false"),
    ("env", "Env", "containers[].env; the kubelet's API server variables removed (env -u)"),
    ("env_allowlist", "(checked before launch)", "(checked before launch)"),
    ("sessions_enabled", "(checked before launch)", "(checked before launch)"),
    ("pool_enabled", "(checked before launch)", "(checked before launch)"),
    ("interactive_shells", "(checked before launch)", "(checked before launch)"),
    ("session_idle_timeout_s", "closed by the controller", "closed by the controller"),
    ("session_lifetime_s", "a session's wall_timeout_s", "a session's wall_timeout_s"),
)


def label_value(text: str) -> str:
    """A label-safe stand-in for a value labels cannot hold (owners have ':' and '~'): its hash."""
    return sha256_hex(text.encode("utf-8"))[:40]


def seccomp_profile(profile: ResolvedProfile, settings: KubernetesSettings) -> dict[str, str]:
    if settings.seccomp == "localhost":
        return {"type": "Localhost", "localhostProfile": f"{LOCALHOST_PROFILE_DIR}/{profile.seccomp}.json"}
    return {"type": "RuntimeDefault"}


def runtime_class(profile: ResolvedProfile, settings: KubernetesSettings) -> str | None:
    if profile.runtime == "runc":
        return None
    name = settings.runtime_classes.get(profile.runtime)
    if name is None:
        raise SandboxUnavailable(
            f"profile {profile.name!r} needs runtime {profile.runtime!r} and the backend config maps it to no"
            " RuntimeClass (backend.kubernetes.runtime_classes); it is never replaced by another",
            details={"runtime": profile.runtime},
        )
    return name


def workspace_volume(spec: LaunchSpec, settings: KubernetesSettings) -> tuple[dict[str, Any], str | None]:
    """The workspace volume, and the sub-path pods mount (pvc mode)."""
    if settings.workspace.mode == "copy":
        return {"name": WORKSPACE_VOLUME, "emptyDir": {}}, None
    relative = claim_sub_path(spec.workspace.local_path, settings, "workspace")
    claim = {"claimName": settings.workspace.claim, "readOnly": spec.profile.workspace.mode == "ro"}
    return {"name": WORKSPACE_VOLUME, "persistentVolumeClaim": claim}, relative


def claim_sub_path(local_path: str, settings: KubernetesSettings, what: str) -> str:
    """The sub-path of the workspace claim a directory the controller sees below its root is (pvc mode)."""
    root = posixpath.normpath(settings.workspace.root)
    path = posixpath.normpath(local_path)
    relative = posixpath.relpath(path, root)
    if relative in {".", ".."} or relative.startswith("../"):
        raise SandboxUnavailable(
            f"{what} {path} is not below the claim's root {root} (backend.kubernetes.workspace.root):"
            " a pod can only mount a sub-path of the claim",
            details={what: path, "root": root},
        )
    return relative


def _quantity_bytes(value: int) -> str:
    return str(value)


def split_cpu(cpus: float, *, pod_level: bool = False) -> tuple[int, int | None]:
    """The profile's cpu as (command, sidecar) millicores. ``pod_level``: the pod's own limit is the
    profile's (``pod_resources``), the command's limit is the whole of it too, and the sidecar has none of
    its own: the relays exec'd in it share the pod's cpu (with a limit of its own, 50m, every exec's start
    was throttled to ~0.5 s, and four at once to ~2 s). Else the pod's total is the sum: the sidecar's share
    comes out of the command's."""
    total = max(2, round(cpus * 1000))
    if pod_level:
        return total, None
    sidecar = max(1, min(SIDECAR_CPU_MILLI, total // 10))
    return total - sidecar, sidecar


def pod_resources(profile: ResolvedProfile) -> dict[str, Any]:
    """The pod-level resources (``spec.resources``, PodLevelResources: beta, on by default since 1.34): cpu
    the profile's, memory the command's and the sidecar's; requests = limits (Guaranteed QoS)."""
    sidecar_memory = 32 * 1024 * 1024
    assert HELPER_RESOURCES["memory"] == "32Mi"
    quantities = {
        "cpu": f"{split_cpu(profile.cpus, pod_level=True)[0]}m",
        "memory": str(profile.memory_bytes + sidecar_memory),
    }
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _add_helpers(
    pod_spec: dict[str, Any],
    command: dict[str, Any],
    profile: ResolvedProfile,
    *,
    copy: bool,
    with_stdin: bool,
    with_status: bool,
    pod_level: bool,
) -> None:
    """The sidecar (beside the command, idle: the stdio relays and the workspace's copy back are exec'd
    in it) and, in copy mode, ``workspace-in`` (an init container: the command starts only once the
    workspace is in); both with the command's hardening."""
    path = profile.workspace.container_path
    stdio: dict[str, Any] = {"name": STDIO_VOLUME, "mountPath": STDIO_DIR}

    def helper(name: str, argv: list[str], mounts: list[dict[str, Any]], cpu_milli: int | None) -> dict[str, Any]:
        resources = {**HELPER_RESOURCES, **({} if cpu_milli is None else {"cpu": f"{cpu_milli}m"})}
        return {
            "name": name,
            "image": profile.image,
            "imagePullPolicy": command["imagePullPolicy"],
            "command": argv,
            "args": [],
            "workingDir": "/",
            "env": [],
            "resources": {"requests": dict(resources), "limits": dict(resources)},
            "volumeMounts": mounts,
            "securityContext": {**command["securityContext"], "readOnlyRootFilesystem": True},
            "stdin": False,
            "tty": False,
        }

    workspace: dict[str, Any] = {"name": WORKSPACE_VOLUME, "mountPath": path}
    idle = pod_spec["activeDeadlineSeconds"] + 60  # the deadline stops it; this is only a bound
    sidecar_mounts = [stdio, {**workspace, "readOnly": True}] if copy else [stdio]
    cpu = split_cpu(profile.cpus, pod_level=pod_level)
    pipes = sidecar_command(idle, with_stdin=with_stdin, with_status=with_status)
    sidecar = helper(SIDECAR, pipes, sidecar_mounts, cpu[1])
    pod_spec["containers"].append(sidecar)
    if copy:
        # it runs before the others, alone: the pod's whole cpu (an init container's request is not added)
        whole = cpu[0] + (cpu[1] or 0)
        init = helper(COPY_IN_CONTAINER, wait_for_copy_command(path), [{**workspace, "readOnly": False}], whole)
        pod_spec["initContainers"] = [init]


def pod_labels(spec: LaunchSpec) -> dict[str, str]:
    """The sandbox's labels, label-safe (at most 63 characters, no ':' or '~'): the owner (host:pid:start or
    a pod name) as its hash, kept whole in an annotation; and the egress label where the profile has egress."""
    labels = spec.labels
    labels[LABEL_PROFILE_HASH] = labels[LABEL_PROFILE_HASH][:63]
    if spec.owner:
        labels[LABEL_OWNER] = label_value(spec.owner)
    if spec.profile.network == "allowlist":  # the NetworkPolicy that lets it reach the egress proxy, and only that
        labels[LABEL_EGRESS] = "proxy"
    return labels


def sandbox_argv(spec: LaunchSpec) -> list[str]:
    """The command as it runs in the container: exactly the spec's env, its rlimits, then its argv."""
    profile = spec.profile
    unset = [arg for name in API_SERVICE_ENV if name not in spec.env for arg in ("-u", name)]
    # the barrier's shell exports PWD (its own view of the working directory): gone, or the caller's
    pwd = [f"PWD={spec.env['PWD']}"] if "PWD" in spec.env else ["-u", "PWD"]
    return [
        ENV,
        *unset,
        *pwd,
        PRLIMIT,
        f"--nofile={profile.nofile}:{profile.nofile}",
        f"--fsize={profile.fsize_bytes}:{profile.fsize_bytes}",
        "--",
        *spec.argv,
    ]


def check_poolable(settings: KubernetesSettings) -> None:
    """A pre-started pod runs a one-shot command on the workspace itself: copy mode would give it the
    workspace as it was when the pod was filled."""
    if settings.workspace.mode != "pvc":
        raise SandboxUnavailable(
            "pre-started pods need the workspace mounted (backend.kubernetes.workspace.mode: pvc); in copy"
            " mode the workspace goes in as the pod starts",
            details={"field": "pooled"},
        )


def pod_manifest(
    spec: LaunchSpec,
    settings: KubernetesSettings,
    now: float | None = None,
    *,
    waiting: bool = False,
    pod_level: bool = True,
) -> dict[str, Any]:
    """The pod for ``spec`` (validated: argv, workdir, env); ``now`` (unix time) places a pooled pod's
    deadline. ``waiting``: a one-shot command started as a pre-started pod is, its init waiting for the
    launch the backend sends at once (its end then reported by the init; its argv, env and stdin never in
    the pod's spec); a pooled spec always waits. ``pod_level``: the pod's cpu and memory bounded at the
    pod's level (``pod_resources``; the backend turns it off for a cluster that drops the field)."""
    waiting = waiting or spec.pooled
    profile = spec.profile
    now = time.time() if now is None else now
    check_spec(spec)
    if spec.tty and not spec.session:
        raise SandboxUnavailable(
            "the Kubernetes backend runs one-shot commands without a terminal (a session can have one)",
            details={"field": "tty"},
        )
    if profile.read_only_mounts and settings.workspace.mode != "pvc":
        raise SandboxUnavailable(
            "a CI runner's externals reach a pod only from the workspace claim (backend.kubernetes.workspace.mode"
            " pvc): in copy mode a JavaScript action is refused",
            details={"field": "externals"},
        )
    if spec.pooled:
        check_poolable(settings)
    volume, sub_path = workspace_volume(spec, settings)
    volumes: list[dict[str, Any]] = [volume]
    mounts: list[dict[str, Any]] = [
        {
            "name": WORKSPACE_VOLUME,
            "mountPath": profile.workspace.container_path,
            "readOnly": profile.workspace.mode == "ro",
            **({"subPath": sub_path} if sub_path else {}),
        }
    ]
    for extra in profile.read_only_mounts:  # a CI runner's externals: on the same claim, beside its work directory
        relative = claim_sub_path(extra.source, settings, "externals")
        mounts.append({"name": WORKSPACE_VOLUME, "mountPath": extra.target, "subPath": relative, "readOnly": True})
    volumes.append({"name": STDIO_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": STDIO_VOLUME_SIZE}})
    # its pipes only: read-only, but under gVisor, which refuses to open a pipe for writing on a read-only
    # mount (Linux does not): there the command can write up to STDIO_VOLUME_SIZE beside its pipes
    gvisor = profile.runtime == "runsc"
    mounts.append({"name": STDIO_VOLUME, "mountPath": STDIO_DIR, "readOnly": not gvisor})
    tmpfs = {t.path: t for t in profile.tmpfs}
    for index, path in enumerate(sorted(tmpfs)):
        name = f"tmpfs-{index}"
        volumes.append({"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": str(tmpfs[path].size_bytes)}})
        mounts.append({"name": name, "mountPath": path})
    if needs_empty_tmp(profile):
        volumes.append({"name": "tmp-empty", "emptyDir": {"medium": "Memory", "sizeLimit": EMPTY_TMP_SIZE}})
        mounts.append({"name": "tmp-empty", "mountPath": TMP, "readOnly": True})
    resources = {
        "cpu": f"{split_cpu(profile.cpus, pod_level=pod_level)[0]}m",
        "memory": _quantity_bytes(profile.memory_bytes),
        "ephemeral-storage": _quantity_bytes(profile.fsize_bytes),
    }
    deadline_s = math.ceil(profile.wall_timeout_s) + DEADLINE_GRACE_S
    if spec.pooled:  # it waits in the pool first: the kubelet's backstop is the pool's deadline
        deadline_s = max(deadline_s, math.ceil(spec.deadline_unix - now))
    elif waiting:  # the controller's clock starts at the launch, after the relays opened (seconds at a small cpu)
        deadline_s += math.ceil(settings.start_timeout_s)
    if waiting:  # our init, its rlimits and env set as a command's would be; launch() brings the rest
        init = dataclasses.replace(spec, argv=(INIT_PATH,), env={})
        main = pooled_barrier_command(sandbox_argv(init))
    elif spec.session:  # a session with a terminal: its command is exec'd into it (pod_session)
        main = idle_command(deadline_s + 60)
    else:
        main = barrier_command(sandbox_argv(spec), with_stdin=spec.stdin is not None)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": profile.image,
        "imagePullPolicy": settings.image_pull_policy,
        "command": main,
        "args": [],
        # pooled: the launch message brings the working directory and the variables
        "workingDir": profile.workspace.container_path if waiting else spec.workdir,
        "env": [] if waiting else [{"name": key, "value": value} for key, value in spec.env.items()],
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "volumeMounts": mounts,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": profile.uid,
            "runAsGroup": profile.gid,
            "readOnlyRootFilesystem": profile.read_only_root,
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "capabilities": {"drop": list(profile.cap_drop), "add": []},
            "seccompProfile": seccomp_profile(profile, settings),
            "procMount": "Default",
        },
        "stdin": False,  # the command's stdio are the sidecar's pipes (start_barrier)
        "tty": False,
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "File",
    }
    spec_body: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": deadline_s,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "shareProcessNamespace": False,
        "hostname": HOSTNAME,
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": ["127.0.0.1"], "searches": [], "options": []},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": profile.uid,
            "runAsGroup": profile.gid,
            "fsGroup": profile.gid,
            "supplementalGroups": [],
            "seccompProfile": seccomp_profile(profile, settings),
        },
        "containers": [container],
        "volumes": volumes,
    }
    with_stdin = spec.stdin is not None or waiting
    copy = settings.workspace.mode == "copy"
    _add_helpers(
        spec_body, container, profile, copy=copy, with_stdin=with_stdin, with_status=waiting, pod_level=pod_level
    )
    if pod_level:
        spec_body["resources"] = pod_resources(profile)
    klass = runtime_class(profile, settings)
    if klass is not None:
        spec_body["runtimeClassName"] = klass
    annotations: dict[str, str] = {
        ANNOTATION_OWNER: spec.owner,
        ANNOTATION_DEADLINE: f"{spec.deadline_unix:.0f}",
    }
    if gvisor:  # the pipes' volume as one tmpfs inside the gVisor sandbox, shared by its containers
        annotations.update({f"{GVISOR_MOUNT_HINT}.{key}": value for key, value in GVISOR_SHARED_TMPFS.items()})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": sandbox_name(spec.execution_id),
            "namespace": settings.namespace,
            "labels": pod_labels(spec),
            "annotations": dict(annotations),
        },
        "spec": spec_body,
    }
