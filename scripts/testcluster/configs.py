"""The node's and the clients' configuration files, as data: containerd's and gVisor's shim's (TOML), the CNI
network (JSON), the kubelet's (YAML) and the kubeconfigs (YAML), each a dict built from the settings and
rendered by a serializer. ``ConfigFile.write`` writes one only when its data differ from what the file holds
(read back and compared as data, not as text): a running component is restarted only for a real change.
"""

from __future__ import annotations

import base64
import json
import os
import re
import tempfile
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .settings import (
    API_SERVER,
    BRIDGE,
    CGROUP_ROOT,
    CLUSTER_DOMAIN,
    CNI_BIN_DIR,
    CNI_NETWORK,
    KUBELET_PORT,
    LOOPBACK,
    NODE_POD_PIDS_LIMIT,
    PAUSE_IMAGE,
    RUNTIME_HANDLER,
    Settings,
)

Data = dict[str, Any]
HEADER = "written by scripts/k8s-cluster.sh (scripts/testcluster/configs.py)"

# --- serializers ---------------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))  # a JSON string is a TOML basic string
    if isinstance(value, Sequence):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def render_toml(data: Mapping[str, Any], comments: Sequence[str] = ()) -> str:
    """TOML for nested dicts of strings, paths, booleans, integers and lists of them: a table's plain keys,
    then its sub-tables, each under its full dotted header (a table with no plain key gets no header)."""
    lines = [f"# {c}" for c in comments]

    def table(path: tuple[str, ...], node: Mapping[str, Any]) -> None:
        plain = [(k, v) for k, v in node.items() if not isinstance(v, Mapping)]
        if path and plain:
            lines.extend(["", "[" + ".".join(_toml_key(p) for p in path) + "]"])
        lines.extend(f"{'  ' if path else ''}{_toml_key(k)} = {_toml_value(v)}" for k, v in plain)
        for key, value in node.items():
            if isinstance(value, Mapping):
                table((*path, key), value)

    table((), data)
    return "\n".join(lines) + "\n"


def _yaml_dump(data: Mapping[str, Any]) -> str:
    return yaml.safe_dump(dict(data), sort_keys=False, default_flow_style=False, width=1000)


def render_yaml(data: Mapping[str, Any], comments: Sequence[str] = ()) -> str:
    return "".join(f"# {c}\n" for c in comments) + _yaml_dump(data)


def render_json(data: Mapping[str, Any], comments: Sequence[str] = ()) -> str:
    del comments  # JSON has none
    return json.dumps(data, indent=2) + "\n"


_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_SafeLoader)  # a safe loader (libyaml's when present)


PARSERS: dict[str, Callable[[str], Any]] = {"toml": tomllib.loads, "yaml": _parse_yaml, "json": json.loads}
RENDERERS: dict[str, Callable[[Mapping[str, Any], Sequence[str]], str]] = {
    "toml": render_toml,
    "yaml": render_yaml,
    "json": render_json,
}


def _plain(data: Any) -> Any:
    """Data as its file holds it once read back: paths become strings, tuples lists."""
    if isinstance(data, Mapping):
        return {str(k): _plain(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_plain(v) for v in data]
    if isinstance(data, Path):
        return str(data)
    return data


@dataclass(frozen=True)
class ConfigFile:
    path: Path
    data: Data
    form: str  # toml | yaml | json
    mode: int = 0o644
    comments: tuple[str, ...] = (HEADER,)

    def render(self) -> str:
        return RENDERERS[self.form](_plain(self.data), self.comments)

    def current(self) -> Any:
        """What the file holds now, as data; None when it is missing or unreadable."""
        try:
            return PARSERS[self.form](self.path.read_text())
        except (OSError, ValueError, yaml.YAMLError):
            return None

    def up_to_date(self) -> bool:
        return bool(self.current() == _plain(self.data))

    def write(self) -> bool:
        """Writes the file unless it already holds these data; True when it wrote (a running component then
        needs a restart to read it). Written to a temporary file first, then renamed: never half a file."""
        if self.up_to_date():
            return False
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f"{self.path.name}.", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(self.render())
            os.chmod(tmp, self.mode)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return True


# --- containerd, gVisor's shim, CNI, kubelet --------------------------------------------------------------

CRI = "io.containerd.grpc.v1.cri"


def containerd_config(s: Settings) -> ConfigFile:
    """The test cluster's own containerd (not the Docker engine's): its own root, state and socket."""
    data: Data = {
        "version": 2,
        "root": s.containerd_root,
        "state": s.containerd_state,
        "disabled_plugins": [f"io.containerd.snapshotter.v1.{name}" for name in ("aufs", "btrfs", "devmapper", "zfs")],
        "grpc": {"address": s.containerd_socket},
        "ttrpc": {"address": ""},
        "debug": {"address": ""},
        "metrics": {"address": ""},
        "plugins": {
            "io.containerd.internal.v1.opt": {"path": s.containerd_root / "opt"},
            CRI: {
                "sandbox_image": PAUSE_IMAGE,
                # no CAP_SYS_RESOURCE here: runc cannot lower oom_score_adj as the kubelet asks (-998 for the
                # pod sandbox)
                "restrict_oom_score_adj": True,
                # network namespaces under our state dir, not /var/run/netns
                "netns_mounts_under_state_dir": True,
                "enable_unprivileged_ports": False,
                "enable_unprivileged_icmp": False,
                "containerd": {
                    "snapshotter": "overlayfs",
                    "default_runtime_name": "runc",
                    "runtimes": {
                        "runc": {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": False}},
                        # RuntimeClass gvisor (handler runsc): gVisor's own shim, which finds runsc through
                        # its config; gVisor's mount hints: a pod's annotations may share an in-memory
                        # emptyDir across its containers
                        RUNTIME_HANDLER: {
                            "runtime_type": "io.containerd.runsc.v1",
                            "pod_annotations": ["dev.gvisor.spec.mount.*"],
                            "options": {"TypeUrl": "io.containerd.runsc.v1.options", "ConfigPath": s.runsc_config},
                        },
                    },
                },
                "cni": {"bin_dir": CNI_BIN_DIR, "conf_dir": s.cni_conf_dir, "max_conf_num": 1},
            },
        },
    }
    comments = (f"{HEADER}: the test cluster's own containerd (not the Docker engine's)",)
    return ConfigFile(s.containerd_config, data, "toml", comments=comments)


def runsc_config(s: Settings) -> ConfigFile:
    """gVisor's containerd shim: runsc with the flags of the Docker engine's runsc runtime (no network, the
    OCI seccomp profile applied inside the sandbox too); a log directory per container."""
    logs = s.runsc_logs_dir / "%ID%"
    data: Data = {
        "binary_name": s.runsc,
        "root": s.runsc_root,
        "log_level": "info",
        "log_path": logs / "shim.log",
        "runsc_config": {"network": "none", "oci-seccomp": "true", "debug-log": f"{logs}/"},
    }
    comments = (f"{HEADER}: gVisor's containerd shim (containerd-shim-runsc-v1)",)
    return ConfigFile(s.runsc_config, data, "toml", comments=comments)


def cni_config(s: Settings) -> ConfigFile:
    """A bridge without an address (isGateway false) and no masquerading: pods get an eth0 in their own
    subnet and no default route, so nothing outside the pod subnet is reachable."""
    data: Data = {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(s.pod_subnet), "rangeEnd": str(s.pod_range_end)}]],
                    "dataDir": s.ipam_dir,
                },
            }
        ],
    }
    return ConfigFile(s.cni_conflist, data, "json")


def kubelet_config(s: Settings) -> ConfigFile:
    data: Data = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": LOOPBACK,
        "port": KUBELET_PORT,
        "readOnlyPort": 0,
        "healthzPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": s.ca_cert},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": s.cert("kubelet-serving"),
        "tlsPrivateKeyFile": s.key("kubelet-serving"),
        "containerRuntimeEndpoint": f"unix://{s.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": CGROUP_ROOT,
        "failSwapOn": False,
        "podPidsLimit": NODE_POD_PIDS_LIMIT,
        # evented: the runtime's container events instead of a relist every second (alpha; containerd >= 1.7)
        **({"featureGates": {"EventedPLEG": True}} if s.pleg == "evented" else {}),
        # no cluster DNS: pods get an empty resolv.conf (they have no route to any server anyway)
        "resolvConf": "",
        "clusterDomain": CLUSTER_DOMAIN,
        "podLogsDir": s.pod_logs_dir,
        "volumePluginDir": s.volume_plugin_dir,
        # the imported images cannot be pulled again: the kubelet must never garbage-collect them
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        # lowering the kubelet's own oom_score_adj needs CAP_SYS_RESOURCE, which root lacks here
        "oomScoreAdj": 0,
        # no KUBE-FIREWALL / KUBE-IPTABLES-HINT chains in the host's iptables (they serve kube-proxy; none here)
        "makeIPTablesUtilChains": False,
        # a container without a seccomp profile gets the runtime's default, never Unconfined
        "seccompDefault": True,
        # these hosts are cgroup v1 (hybrid); 1.34 still runs there when told so
        "failCgroupV1": False,
    }
    return ConfigFile(s.kubelet_config, data, "yaml")


def node_configs(s: Settings) -> dict[str, ConfigFile]:
    return {
        "containerd": containerd_config(s),
        "runsc": runsc_config(s),
        "cni": cni_config(s),
        "kubelet": kubelet_config(s),
    }


# --- kubeconfigs ---------------------------------------------------------------------------------------

CLUSTER_NAME = "sandbox-orchestrator"


def kubeconfig_data(server: str, user: str, ca: bytes, cert: bytes, key: bytes) -> Data:
    """A kubeconfig with the CA and the client certificate inline (a copy works anywhere)."""

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority-data": b64(ca)}}],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": CLUSTER_NAME, "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": CLUSTER_NAME,
    }


def kubeconfig(s: Settings, name: str, cert_name: str) -> ConfigFile:
    data = kubeconfig_data(
        API_SERVER, cert_name, s.ca_cert.read_bytes(), s.cert(cert_name).read_bytes(), s.key(cert_name).read_bytes()
    )
    return ConfigFile(s.kubeconfig(name), data, "yaml", mode=0o600, comments=())
