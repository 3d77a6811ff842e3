"""The settings: paths derived from the state and runtime dirs as the engine's scripts derive theirs, the pods'
subnet (SANDBOX_K8S_POD_SUBNET) and what follows from it, and the validation of what the environment gives."""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from pathlib import Path

import pytest

from scripts.testcluster import settings as st
from scripts.testcluster.settings import Settings, SettingsError, parse_pod_subnet


def test_defaults_are_the_machines_directories() -> None:
    s = Settings.from_env({})
    assert s.state_dir == Path("/var/lib/sandbox-orchestrator")
    assert s.run_dir == Path("/run/sandbox-orchestrator")
    assert s.cluster_dir == Path("/var/lib/sandbox-orchestrator/k8s/cluster")
    assert s.cluster_run_dir == Path("/run/sandbox-orchestrator/k8s")
    assert s.admin_kubeconfig == Path("/var/lib/sandbox-orchestrator/k8s/cluster/admin.kubeconfig")
    assert s.containerd_socket == Path("/run/sandbox-orchestrator/k8s/containerd.sock")
    assert s.runsc == Path("/var/lib/sandbox-orchestrator/bin/runsc")
    assert s.pod_subnet == ipaddress.IPv4Network("10.253.0.0/24")
    assert s.pleg == "generic"


def test_the_fixed_facts() -> None:
    assert (st.API_PORT, st.ETCD_PORT, st.ETCD_PEER_PORT, st.KUBELET_PORT) == (16443, 23790, 23800, 16250)
    assert st.API_SERVER == "https://127.0.0.1:16443"
    assert st.NODE_NAME == "localhost"
    assert str(st.SERVICE_IP) == "10.254.0.1"
    assert st.COMPONENTS[0] == "etcd" and st.COMPONENTS[1] == "kube-apiserver"
    assert set(st.COMPONENTS) == {
        "etcd", "kube-apiserver", "containerd", "kubelet", "kube-controller-manager", "kube-scheduler",
    }  # fmt: skip
    assert st.PAUSE_IMAGE not in st.SANDBOX_IMAGES and st.MINIMAL_IMAGE in st.SANDBOX_IMAGES


def test_only_a_state_dir_puts_the_runtime_dir_inside_it(tmp_path: Path) -> None:
    s = Settings.from_env({"SANDBOX_STATE_DIR": str(tmp_path)})
    assert s.state_dir == tmp_path.resolve()
    assert s.run_dir == tmp_path.resolve() / "run"
    assert s.cluster_dir == tmp_path.resolve() / "k8s" / "cluster"
    assert s.pid_file("etcd") == tmp_path.resolve() / "run" / "k8s" / "etcd.pid"
    assert s.runsc == tmp_path.resolve() / "bin" / "runsc"


def test_a_runtime_dir_of_its_own(tmp_path: Path) -> None:
    s = Settings.from_env({"SANDBOX_STATE_DIR": str(tmp_path / "s"), "SANDBOX_RUN_DIR": str(tmp_path / "r")})
    assert s.cluster_run_dir == tmp_path.resolve() / "r" / "k8s"
    assert s.ipam_dir == tmp_path.resolve() / "r" / "k8s" / "ipam"
    assert s.runsc_root == tmp_path.resolve() / "r" / "k8s" / "runsc"


def test_empty_variables_count_as_unset() -> None:
    s = Settings.from_env(
        {"SANDBOX_STATE_DIR": "", "SANDBOX_RUN_DIR": "", "SANDBOX_K8S_POD_SUBNET": "", "SANDBOX_K8S_PLEG": ""}
    )
    assert s == Settings.from_env({})


def test_a_relative_state_dir_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "link")
    s = Settings.from_env({"SANDBOX_STATE_DIR": "link/./x/../state"})
    assert s.state_dir == tmp_path.resolve() / "real" / "state"  # as lib.sh's realpath -m: symlinks resolved


def test_every_path_of_the_state_lies_below_the_cluster_dir(settings: Settings) -> None:
    paths = [
        settings.pki_dir, settings.logs_dir, settings.etcd_data, settings.containerd_root, settings.containerd_config,
        settings.runsc_config, settings.cni_conflist, settings.kubelet_root, settings.kubelet_config,
        settings.seccomp_dir, settings.image_stamps, settings.sysctl_saved, settings.gvisor_stamp,
        settings.gvisor_reason, settings.lock_file, settings.test_sessions_dir, settings.kubeconfig("scheduler"),
        settings.log_file("kubelet"), settings.cert("admin"), settings.key("admin"), settings.pod_logs_dir,
    ]  # fmt: skip
    for path in paths:
        assert settings.cluster_dir in path.parents, path
    runtime = [settings.containerd_state, settings.containerd_socket, settings.up_done, settings.pid_file("kubelet")]
    for path in runtime:
        assert settings.cluster_run_dir in path.parents, path
    assert settings.kubelet_pods_dir == settings.kubelet_root / "pods"
    assert settings.seccomp_dir == settings.kubelet_root / "seccomp" / "sandbox-orchestrator"
    assert settings.gvisor_shim == settings.bin_dir / "containerd-shim-runsc-v1"  # type: ignore[operator]


def test_the_pod_subnet_and_what_follows_from_it() -> None:
    s = Settings.from_env({"SANDBOX_K8S_POD_SUBNET": "10.99.7.0/24"})
    assert s.pod_subnet == ipaddress.IPv4Network("10.99.7.0/24")
    assert str(s.pod_range_end) == "10.99.7.250"
    assert str(s.egress_ip) == "10.99.7.254"
    assert s.egress_listen == "10.99.7.254:3128"
    default = Settings.from_env({})
    assert (str(default.pod_range_end), str(default.egress_ip)) == ("10.253.0.250", "10.253.0.254")


def test_a_wider_pod_subnet_keeps_its_first_24() -> None:
    s = Settings.from_env({"SANDBOX_K8S_POD_SUBNET": "172.20.0.0/16"})
    assert (str(s.pod_range_end), str(s.egress_ip)) == ("172.20.0.250", "172.20.0.254")


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("nonsense", "IPv4 network such as"),
        ("10.253.0.1/24", "has host bits set"),
        ("fd00::/64", "must be an IPv4 network"),
        ("10.253.0.0/25", "/16 to /24"),
        ("10.0.0.0/8", "/16 to /24"),
        ("8.8.8.0/24", "private network"),
        ("127.0.0.0/24", "private network"),
        ("169.254.1.0/24", "private network"),
        ("10.254.0.0/24", "overlaps the service range"),
        ("10.254.0.0/16", "overlaps the service range"),
    ],
)
def test_a_bad_pod_subnet_is_refused(value: str, complaint: str) -> None:
    with pytest.raises(SettingsError, match="SANDBOX_K8S_POD_SUBNET") as refused:
        Settings.from_env({"SANDBOX_K8S_POD_SUBNET": value})
    assert complaint in str(refused.value)


def test_a_pod_subnet_with_spaces_around_is_taken() -> None:
    assert parse_pod_subnet(" 192.168.50.0/24\n") == ipaddress.IPv4Network("192.168.50.0/24")


def test_pleg() -> None:
    assert Settings.from_env({"SANDBOX_K8S_PLEG": "evented"}).pleg == "evented"
    with pytest.raises(SettingsError, match="SANDBOX_K8S_PLEG must be evented or generic \\(got 'fast'\\)"):
        Settings.from_env({"SANDBOX_K8S_PLEG": "fast"})


def test_runsc_from_the_environment() -> None:
    assert Settings.from_env({"SANDBOX_RUNSC": "/opt/runsc"}).runsc == Path("/opt/runsc")


def test_settings_are_frozen_and_binaries_need_a_bin_dir() -> None:
    s = Settings.from_env({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.pleg = "evented"  # type: ignore[misc]
    with pytest.raises(SettingsError, match=r"k8s-build\.sh"):
        s.binary("kubectl")
    assert Settings.from_env({}, bin_dir=Path("/b")).binary("kubectl") == Path("/b/kubectl")
