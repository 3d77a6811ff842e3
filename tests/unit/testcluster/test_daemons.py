"""The six daemons' command lines and environments, as data: each one on loopback, with our cluster directory
on its command line (what tells our process from a stale pid's), and the settings the cluster relies on."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from scripts.testcluster import daemons, supervise
from scripts.testcluster.settings import API_PORT, COMPONENTS, ETCD_PORT, NODE_NAME, Settings


def flags(argv: tuple[str, ...]) -> dict[str, str]:
    """--name=value and --name value pairs; a bare flag maps to ''."""
    out: dict[str, str] = {}
    i = 1
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]
            i += 1
        out[name] = value
        i += 1
    return out


@pytest.mark.parametrize("name", COMPONENTS)
def test_every_daemon_is_recognisable_as_ours(settings: Settings, name: str) -> None:
    d = daemons.daemon(settings, name)
    assert d.name == name
    assert Path(d.argv[0]).name == name  # owned_pid checks the binary's name
    assert any(str(settings.cluster_dir) in arg for arg in d.argv)  # ... and our directory
    for flag, value in flags(d.argv).items():
        if any(word in flag for word in ("listen", "bind-address", "advertise", "etcd-servers", "initial-cluster")):
            assert all("127.0.0.1" in url for url in value.split(",")), f"{name} {flag}={value}: beyond loopback"


def test_etcd(settings: Settings) -> None:
    f = flags(daemons.daemon(settings, "etcd").argv)
    assert f["--listen-client-urls"] == f"https://127.0.0.1:{ETCD_PORT}"
    assert f["--listen-peer-urls"] == "https://127.0.0.1:23800"
    assert f["--data-dir"] == str(settings.etcd_data)
    assert "--client-cert-auth" in f and "--peer-client-cert-auth" in f
    assert f["--trusted-ca-file"] == str(settings.ca_cert)


def test_apiserver(settings: Settings) -> None:
    d = daemons.daemon(settings, "kube-apiserver")
    f = flags(d.argv)
    assert (f["--bind-address"], f["--secure-port"]) == ("127.0.0.1", str(API_PORT))
    assert f["--etcd-servers"] == f"https://127.0.0.1:{ETCD_PORT}"
    assert f["--authorization-mode"] == "Node,RBAC"
    assert f["--enable-admission-plugins"] == "NodeRestriction,PodSecurity"
    assert f["--allow-privileged"] == "false"
    assert f["--anonymous-auth"] == "false"
    assert f["--endpoint-reconciler-type"] == "none"
    assert f["--kubelet-preferred-address-types"] == "Hostname"
    assert f["--kubelet-client-certificate"] == str(settings.cert("apiserver-kubelet-client"))
    assert f["--service-cluster-ip-range"] == "10.254.0.0/24"
    assert d.ready is not None and d.ready_timeout_s == 60


def test_kubelet_controller_manager_scheduler(settings: Settings) -> None:
    kubelet = flags(daemons.daemon(settings, "kubelet").argv)
    assert kubelet == {
        "--config": str(settings.kubelet_config),
        "--kubeconfig": str(settings.kubeconfig("kubelet")),
        "--root-dir": str(settings.kubelet_root),
        "--hostname-override": NODE_NAME,
    }
    cm = flags(daemons.daemon(settings, "kube-controller-manager").argv)
    assert cm["--secure-port"] == "0" and cm["--leader-elect"] == "false"
    assert cm["--kubeconfig"] == str(settings.kubeconfig("controller-manager"))
    sched = flags(daemons.daemon(settings, "kube-scheduler").argv)
    assert sched == {
        "--kubeconfig": str(settings.kubeconfig("scheduler")),
        "--secure-port": "0",
        "--leader-elect": "false",
    }


def test_containerd_finds_its_shims_and_never_pulls(settings: Settings) -> None:
    d = daemons.daemon(settings, "containerd")
    assert d.argv == ("/usr/bin/containerd", "--config", str(settings.containerd_config))
    path = d.env["PATH"].split(":")
    assert path[:2] == ["/usr/bin", str(settings.bin_dir)]  # its own runc shim first, then gVisor's
    assert d.env["HTTP_PROXY"] == d.env["HTTPS_PROXY"] == "http://127.0.0.1:9"
    assert d.env["http_proxy"] == d.env["https_proxy"] == d.env["NO_PROXY"] == d.env["no_proxy"] == ""


def test_the_node_runs_the_containerd_it_is_given(tmp_path: Path) -> None:
    trixie = tmp_path / "containerd-trixie" / "usr" / "bin" / "containerd"
    s = Settings.from_env({"SANDBOX_STATE_DIR": str(tmp_path)}, bin_dir=tmp_path, containerd_bin=trixie)
    d = daemons.daemon(s, "containerd")
    assert d.argv[0] == str(trixie)
    assert d.env["PATH"].split(":")[0] == str(trixie.parent)


def test_a_daemon_that_does_not_run(settings: Settings) -> None:
    assert daemons.pid(settings, "etcd") is None
    assert not daemons.all_running(settings)
    assert daemons.executable(settings, "containerd") is None
    assert "(no log)" in str(daemons.failure(settings, "etcd", "etcd did not become healthy"))


def test_a_daemon_that_exits_fails_at_once(settings: Settings) -> None:
    d = daemons.Daemon(
        "etcd",
        (sys.executable, "-c", "import sys; print('port taken'); sys.exit(3)", str(settings.cluster_dir)),
        ready=lambda _s: False,
        ready_timeout_s=30,
        ready_what="become healthy",
    )
    settings.cluster_run_dir.mkdir(parents=True)
    t0 = time.monotonic()
    with pytest.raises(daemons.DaemonError, match="etcd exited with 3") as failed:
        daemons.start(settings, d)
    assert time.monotonic() - t0 < 10
    assert "port taken" in str(failed.value)  # the end of its log


def test_a_daemon_is_started_once_and_waited_for(settings: Settings) -> None:
    name = Path(sys.executable).name
    marker = str(settings.cluster_dir)
    calls: list[int] = []
    d = daemons.Daemon(
        "etcd",
        (sys.executable, "-c", "import time; time.sleep(60)", marker),
        ready=lambda _s: len(calls) > 0 or bool(calls.append(1)),
        ready_timeout_s=10,
    )
    settings.cluster_run_dir.mkdir(parents=True)
    try:
        daemons.start(settings, d)
        assert calls == [1]  # asked twice: the first answer was no
        pid = supervise.read_pid(settings.pid_file("etcd"))
        assert pid is not None and supervise.wait_until(5, lambda: marker in supervise.cmdline(pid))
        assert supervise.owned_pid(settings.pid_file("etcd"), name, marker) == pid
    finally:
        supervise.kill(supervise.pids_matching([marker]))
