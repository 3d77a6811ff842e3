"""The host's side: the sysctls the kubelet overwrites (saved once, written back), and which mounts and cgroup
hierarchies are ours, read from /proc/mounts."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.testcluster import host
from scripts.testcluster.settings import KUBELET_SYSCTLS, Settings


@pytest.fixture
def proc_sys(tmp_path: Path) -> Path:
    root = tmp_path / "proc-sys"
    for key in KUBELET_SYSCTLS:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_text("7\n")
    return root


def test_sysctls_are_saved_once_and_written_back(tmp_path: Path, proc_sys: Path) -> None:
    saved = tmp_path / "sysctl.saved"
    host.save_sysctls(saved, proc_sys=proc_sys)
    assert saved.read_text().splitlines() == [f"{key} 7" for key in KUBELET_SYSCTLS]
    for key in KUBELET_SYSCTLS:  # the kubelet overwrites them
        (proc_sys / key).write_text("1\n")
    host.save_sysctls(saved, proc_sys=proc_sys)  # a second up keeps the host's own values
    assert saved.read_text().splitlines()[0] == f"{KUBELET_SYSCTLS[0]} 7"
    host.restore_sysctls(saved, proc_sys=proc_sys)
    assert all((proc_sys / key).read_text() == "7\n" for key in KUBELET_SYSCTLS)
    assert not saved.exists()
    host.restore_sysctls(saved, proc_sys=proc_sys)  # nothing saved: nothing to do


def test_a_sysctl_that_cannot_be_written_back_is_a_warning(
    tmp_path: Path, proc_sys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "sysctl.saved"
    saved.write_text("kernel/panic 10\nno/such/key 1\n")
    host.restore_sysctls(saved, proc_sys=proc_sys)
    assert (proc_sys / "kernel/panic").read_text() == "10\n"
    assert "could not restore no/such/key to 1" in capsys.readouterr().err


def test_our_mounts_deepest_first(settings: Settings, tmp_path: Path) -> None:
    cluster, run = settings.cluster_dir, settings.cluster_run_dir
    mounts = tmp_path / "mounts"
    mounts.write_text(
        f"overlay {run}/containerd/io.containerd.runtime.v2.task/k8s.io/abc/rootfs overlay rw 0 0\n"
        f"shm {run}/containerd/io.containerd.grpc.v1.cri/sandboxes/abc/shm tmpfs rw 0 0\n"
        f"tmpfs {cluster}/kubelet/pods/uid/volumes/kubernetes.io~empty-dir/x tmpfs rw 0 0\n"
        f"tmpfs {cluster}/kubelet/pods/uid/volumes/my\\040volume tmpfs rw 0 0\n"
        f"tmpfs {cluster}-other/kubelet tmpfs rw 0 0\n"  # a sibling directory, not ours
        "proc /proc proc rw 0 0\n"
        "cgroup /sys/fs/cgroup/memory cgroup rw,memory 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n"
    )
    ours = host.our_mounts(settings, mounts)
    assert len(ours) == 4
    assert f"{cluster}/kubelet/pods/uid/volumes/my volume" in ours
    assert [len(p) for p in ours] == sorted((len(p) for p in ours), reverse=True)
    assert host.cgroup_mounts(mounts) == [Path("/sys/fs/cgroup/memory"), Path("/sys/fs/cgroup/unified")]


def test_below() -> None:
    roots = [Path("/a/b")]
    assert host.below("/a/b", roots) and host.below("/a/b/c", roots)
    assert not host.below("/a/bc", roots) and not host.below("/a", roots)


def test_remove_tree_stays_on_its_file_system(tmp_path: Path) -> None:
    (tmp_path / "x" / "y").mkdir(parents=True)
    (tmp_path / "x" / "y" / "f").write_text("f")
    host.remove_tree(tmp_path / "x", tmp_path / "missing")
    assert not (tmp_path / "x").exists()
