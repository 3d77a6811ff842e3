"""The configuration files, generated from data: each file's structure and key values, read back as its
component reads it (TOML, JSON, YAML), and written only when its data change."""

from __future__ import annotations

import base64
import json
import stat
import tomllib
from pathlib import Path

import pytest
import yaml

from scripts.testcluster import configs
from scripts.testcluster.configs import ConfigFile, render_toml
from scripts.testcluster.settings import (
    API_SERVER,
    BRIDGE,
    CGROUP_ROOT,
    CNI_NETWORK,
    KUBELET_PORT,
    NODE_POD_PIDS_LIMIT,
    PAUSE_IMAGE,
    RUNTIME_HANDLER,
    Settings,
)

CRI = "io.containerd.grpc.v1.cri"


def read_back(file: ConfigFile) -> dict:
    assert file.write()
    return file.current()


def test_containerd_config_is_the_clusters_own(settings: Settings) -> None:
    data = read_back(configs.containerd_config(settings))
    assert data["version"] == 2
    assert data["root"] == str(settings.containerd_root)
    assert data["state"] == str(settings.containerd_state)
    assert data["grpc"]["address"] == str(settings.containerd_socket)
    assert data["ttrpc"]["address"] == data["debug"]["address"] == data["metrics"]["address"] == ""
    assert "io.containerd.snapshotter.v1.devmapper" in data["disabled_plugins"]
    cri = data["plugins"][CRI]
    assert cri["sandbox_image"] == PAUSE_IMAGE
    assert cri["restrict_oom_score_adj"] is True  # no CAP_SYS_RESOURCE for the kubelet's -998
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["containerd"]["default_runtime_name"] == "runc"
    assert cri["containerd"]["runtimes"]["runc"]["options"] == {"SystemdCgroup": False}
    runsc = cri["containerd"]["runtimes"][RUNTIME_HANDLER]
    assert runsc["runtime_type"] == "io.containerd.runsc.v1"
    assert runsc["options"]["ConfigPath"] == str(settings.runsc_config)
    assert runsc["pod_annotations"] == ["dev.gvisor.spec.mount.*"]
    assert cri["cni"] == {"bin_dir": "/usr/lib/cni", "conf_dir": str(settings.cni_conf_dir), "max_conf_num": 1}
    assert data["plugins"]["io.containerd.internal.v1.opt"]["path"] == str(settings.containerd_root / "opt")


def test_containerd_config_headers_are_dotted_and_quoted(settings: Settings) -> None:
    text = configs.containerd_config(settings).render()
    assert text.startswith("# written by scripts/k8s-cluster.sh")
    assert f'\n[plugins."{CRI}".containerd.runtimes.runsc.options]\n' in text
    assert "\n[plugins]\n" not in text  # a table with only sub-tables gets no header of its own


def test_runsc_config(settings: Settings) -> None:
    data = read_back(configs.runsc_config(settings))
    assert data["binary_name"] == str(settings.runsc)
    assert data["root"] == str(settings.runsc_root)
    assert data["log_path"] == f"{settings.runsc_logs_dir}/%ID%/shim.log"
    assert data["runsc_config"] == {
        "network": "none",
        "oci-seccomp": "true",
        "debug-log": f"{settings.runsc_logs_dir}/%ID%/",
    }


def test_cni_network_has_no_gateway_and_stops_at_250(settings: Settings) -> None:
    file = configs.cni_config(settings)
    assert file.path.name == f"10-{CNI_NETWORK}.conflist"
    data = read_back(file)
    assert data["name"] == CNI_NETWORK
    (bridge,) = data["plugins"]
    assert bridge["type"] == "bridge" and bridge["bridge"] == BRIDGE
    assert bridge["isGateway"] is False and bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.253.0.0/24", "rangeEnd": "10.253.0.250"}]]
    assert bridge["ipam"]["dataDir"] == str(settings.ipam_dir)


def test_cni_network_follows_the_pod_subnet(tmp_path: Path) -> None:
    s = Settings.from_env({"SANDBOX_STATE_DIR": str(tmp_path), "SANDBOX_K8S_POD_SUBNET": "10.77.0.0/24"})
    (bridge,) = configs.cni_config(s).data["plugins"]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.77.0.0/24", "rangeEnd": "10.77.0.250"}]]


def test_kubelet_config(settings: Settings) -> None:
    data = read_back(configs.kubelet_config(settings))
    assert data["kind"] == "KubeletConfiguration"
    assert (data["address"], data["port"], data["readOnlyPort"], data["healthzPort"]) == (
        "127.0.0.1",
        KUBELET_PORT,
        0,
        0,
    )
    assert data["authentication"] == {
        "anonymous": {"enabled": False},
        "webhook": {"enabled": True},
        "x509": {"clientCAFile": str(settings.ca_cert)},
    }
    assert data["authorization"] == {"mode": "Webhook"}
    assert data["tlsCertFile"] == str(settings.cert("kubelet-serving"))
    assert data["containerRuntimeEndpoint"] == f"unix://{settings.containerd_socket}"
    assert (data["cgroupDriver"], data["cgroupRoot"]) == ("cgroupfs", CGROUP_ROOT)
    assert data["podPidsLimit"] == NODE_POD_PIDS_LIMIT
    assert data["resolvConf"] == ""
    assert data["seccompDefault"] is True
    assert data["failCgroupV1"] is False and data["failSwapOn"] is False
    assert data["imageGCHighThresholdPercent"] == 100
    assert data["makeIPTablesUtilChains"] is False
    assert data["podLogsDir"] == str(settings.pod_logs_dir)
    assert "featureGates" not in data


def test_evented_pleg_turns_the_feature_gate_on(tmp_path: Path) -> None:
    s = Settings.from_env({"SANDBOX_STATE_DIR": str(tmp_path), "SANDBOX_K8S_PLEG": "evented"})
    assert configs.kubelet_config(s).data["featureGates"] == {"EventedPLEG": True}


def test_kubeconfig_holds_the_certificates_inline(settings: Settings) -> None:
    settings.pki_dir.mkdir(parents=True)
    for name, content in (("ca.crt", b"CA"), ("admin.crt", b"CERT"), ("admin.key", b"KEY")):
        (settings.pki_dir / name).write_bytes(content)
    file = configs.kubeconfig(settings, "admin", "admin")
    assert file.path == settings.admin_kubeconfig
    data = read_back(file)
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o600
    (cluster,) = data["clusters"]
    assert cluster["cluster"]["server"] == API_SERVER
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == b"CA"
    (user,) = data["users"]
    assert user["name"] == "admin"
    assert base64.b64decode(user["user"]["client-certificate-data"]) == b"CERT"
    assert base64.b64decode(user["user"]["client-key-data"]) == b"KEY"
    assert data["current-context"] == data["contexts"][0]["name"]
    assert data["contexts"][0]["context"] == {"cluster": cluster["name"], "user": "admin"}


def test_a_file_is_written_only_when_its_data_change(settings: Settings) -> None:
    file = configs.kubelet_config(settings)
    assert file.write() is True
    assert file.write() is False
    # the same data in another form (no comments, other order, flow style) is no change
    file.path.write_text(json.dumps(dict(reversed(list(file.current().items())))))
    assert file.write() is False
    changed = configs.kubelet_config(
        Settings.from_env({"SANDBOX_STATE_DIR": str(settings.state_dir), "SANDBOX_K8S_PLEG": "evented"})
    )
    assert changed.path == file.path
    assert changed.write() is True
    assert yaml.safe_load(file.path.read_text())["featureGates"] == {"EventedPLEG": True}
    assert stat.S_IMODE(file.path.stat().st_mode) == 0o644
    assert [p.name for p in file.path.parent.iterdir() if p.name.startswith("kubelet.yaml.")] == []


def test_an_unreadable_file_is_rewritten(settings: Settings) -> None:
    file = configs.containerd_config(settings)
    file.path.parent.mkdir(parents=True)
    file.path.write_text("this is [not TOML")
    assert file.current() is None
    assert file.write() is True
    assert tomllib.loads(file.path.read_text())["version"] == 2


def test_render_toml() -> None:
    text = render_toml(
        {"a": 1, "b": 'x"y', "c": [True, "z"], "t": {"k.k": Path("/p"), "u": {"v": False}}, "e": {"only": {"x": 1}}},
        ["hello"],
    )
    assert text.splitlines()[0] == "# hello"
    assert tomllib.loads(text) == {
        "a": 1, "b": 'x"y', "c": [True, "z"], "t": {"k.k": "/p", "u": {"v": False}}, "e": {"only": {"x": 1}},
    }  # fmt: skip
    assert "\n[e]\n" not in text and "\n[e.only]\n" in text
    with pytest.raises(TypeError):
        render_toml({"f": 1.5})
