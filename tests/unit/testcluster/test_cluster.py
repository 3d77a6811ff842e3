"""Steps of up that need no cluster: configurations written and the components restarted only for a real
change, the PKI made when it is missing, runsc's logs pruned, the lock, gVisor's verdict key."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from scripts.testcluster import cluster, daemons, gvisor, pki
from scripts.testcluster.settings import COMPONENTS, Settings


@pytest.fixture
def stopped(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The components the step stopped (none runs here)."""
    names: list[str] = []
    monkeypatch.setattr(daemons, "stop", lambda _s, name, *_a, **_k: names.append(name))
    return names


def test_node_configs_restart_only_what_changed(settings: Settings, tmp_path: Path, stopped: list[str]) -> None:
    cluster.ensure_node_configs(settings)
    assert stopped == ["containerd", "kubelet"]  # written for the first time
    for path in (settings.containerd_config, settings.runsc_config, settings.cni_conflist, settings.kubelet_config):
        assert path.is_file(), path
    assert settings.runsc_logs_dir.is_dir() and settings.containerd_root.is_dir()

    stopped.clear()
    cluster.ensure_node_configs(settings)
    assert stopped == []  # idempotent: nothing changed, nothing restarted

    evented = Settings.from_env(
        {
            "SANDBOX_STATE_DIR": str(settings.state_dir),
            "SANDBOX_K8S_PLEG": "evented",
            "SANDBOX_RUNSC": str(settings.runsc),
        },
        bin_dir=settings.bin_dir,
        containerd_bin=settings.containerd_bin,
    )
    cluster.ensure_node_configs(evented)
    assert stopped == ["kubelet"]  # the kubelet's feature gate; containerd's configuration is the same

    stopped.clear()
    moved = Settings.from_env(
        {
            "SANDBOX_STATE_DIR": str(settings.state_dir),
            "SANDBOX_K8S_POD_SUBNET": "10.11.0.0/24",
            "SANDBOX_RUNSC": str(settings.runsc),
        },
        bin_dir=settings.bin_dir,
        containerd_bin=settings.containerd_bin,
    )
    cluster.ensure_node_configs(moved)  # the CNI network is read by containerd as it changes: no restart
    assert stopped == ["kubelet"]  # (back to generic PLEG)
    assert "10.11.0.0/24" in moved.cni_conflist.read_text()


def test_containerd_running_another_binary_is_restarted(
    settings: Settings, stopped: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.ensure_node_configs(settings)
    stopped.clear()
    monkeypatch.setattr(
        daemons, "executable", lambda _s, _name: Path("/var/lib/x/containerd-trixie/usr/bin/containerd")
    )
    cluster.ensure_node_configs(settings)
    assert stopped == ["containerd"]
    stopped.clear()
    monkeypatch.setattr(daemons, "executable", lambda _s, _name: Path("/usr/bin/containerd"))
    cluster.ensure_node_configs(settings)
    assert stopped == []


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl is not installed")
def test_pki_is_made_when_missing_and_kept_when_valid(settings: Settings, stopped: list[str]) -> None:
    cluster.ensure_pki(settings)
    assert stopped == list(COMPONENTS)  # components with the old certificates would not trust the new ones
    assert pki.valid(settings.pki_dir, pki.certificate_set())
    ca = settings.ca_cert.read_bytes()
    stopped.clear()
    cluster.ensure_pki(settings)
    assert stopped == [] and settings.ca_cert.read_bytes() == ca


def test_runsc_logs_keep_the_newest(settings: Settings) -> None:
    for i in range(7):
        directory = settings.runsc_logs_dir / f"c{i}"
        directory.mkdir(parents=True)
        os.utime(directory, (1000 + i, 1000 + i))
    cluster.prune_runsc_logs(settings, keep=3)
    assert sorted(p.name for p in settings.runsc_logs_dir.iterdir()) == ["c4", "c5", "c6"]


def test_the_lock_is_one_at_a_time(settings: Settings) -> None:
    settings.cluster_dir.mkdir(parents=True)
    with (
        cluster.locked(settings),
        pytest.raises(cluster.ClusterError, match="timed out waiting for"),
        cluster.locked(settings, timeout_s=0.3),
    ):
        pass
    with cluster.locked(settings, timeout_s=0.3):
        pass


def test_gvisors_verdict_key(settings: Settings, tmp_path: Path) -> None:
    settings.runsc.write_bytes(b"runsc binary")
    fake = tmp_path / "containerd"
    fake.write_text("#!/bin/sh\necho 'containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3'\n")
    fake.chmod(0o755)
    stamp = f"v0.0.0-x+oom-score-best-effort,kubelet-pods-dir={settings.kubelet_pods_dir}"
    (settings.gvisor_shim.parent / "containerd-shim-runsc-v1.version").write_text(stamp + "\n")
    s = Settings.from_env({"SANDBOX_STATE_DIR": str(settings.state_dir), "SANDBOX_RUNSC": str(settings.runsc)},
                          bin_dir=settings.bin_dir, containerd_bin=fake)  # fmt: skip
    runsc = hashlib.sha256(b"runsc binary").hexdigest()[:16]
    assert gvisor.key(s) == f"shim={stamp} runsc={runsc} containerd=1.6.20~ds1"
    assert gvisor.shim_points_at_our_kubelet(s)
    (settings.gvisor_shim.parent / "containerd-shim-runsc-v1.version").write_text(
        "v0+oom-score-best-effort,kubelet-pods-dir=/var/lib/kubelet/pods\n"
    )
    assert not gvisor.shim_points_at_our_kubelet(s)


def test_up_and_down_need_root(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    for step in (cluster.up, cluster.down):
        with pytest.raises(cluster.ClusterError, match="needs root"):
            step(settings)
