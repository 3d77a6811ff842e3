"""The command line: env's and status's output as the tests, the Makefile and the benchmarks read it, the
refusal of bad settings, and scripts/k8s-cluster.sh running it."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from scripts.testcluster import main
from scripts.testcluster.settings import EGRESS_NETNS_PATH, REPO_DIR, Settings
from tests.support.kube import env_value


def test_env_lines(settings: Settings) -> None:
    text = "\n".join(main.env_lines(settings))
    assert env_value(text, "KUBECONFIG") == str(settings.admin_kubeconfig)
    assert env_value(text, "PATH").split(":", 1)[0] == str(settings.bin_dir)
    assert text.splitlines()[2] == f'export PATH={settings.bin_dir}:"$PATH"'
    assert text.splitlines()[1] == (
        f"export SANDBOX_K8S_EGRESS_NETNS={EGRESS_NETNS_PATH} SANDBOX_K8S_EGRESS_ADDRESS={settings.egress_ip}"
    )


def test_env_quotes_for_the_shell(tmp_path: Path) -> None:
    s = Settings.from_env({"SANDBOX_STATE_DIR": str(tmp_path / "a dir")}, bin_dir=tmp_path / "b'in")
    out = subprocess.run(
        ["bash", "-c", "\n".join(main.env_lines(s)) + '\nprintf "%s\\n" "$KUBECONFIG" "${PATH%%:*}"'],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.splitlines() == [str(s.admin_kubeconfig), str(tmp_path / "b'in")]


def test_status_of_a_cluster_that_is_not_there(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    assert main.status(settings) is False
    assert capsys.readouterr().out == "down\n"


def run(
    args: list[str], env: dict[str, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    for key in ("SANDBOX_STATE_DIR", "SANDBOX_RUN_DIR", "SANDBOX_K8S_POD_SUBNET", "SANDBOX_K8S_PLEG"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code = main.main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_main_env_and_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"SANDBOX_STATE_DIR": str(tmp_path)}
    code, out, _ = run(["env", "--bin-dir", "/b"], env, capsys, monkeypatch)
    assert code == 0 and out.splitlines()[0] == f"export KUBECONFIG={tmp_path.resolve()}/k8s/cluster/admin.kubeconfig"
    code, out, _ = run(["status", "--bin-dir", "/b"], env, capsys, monkeypatch)
    assert (code, out) == (1, "down\n")


def test_bad_settings_are_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"SANDBOX_STATE_DIR": str(tmp_path), "SANDBOX_K8S_POD_SUBNET": "10.254.0.0/24"}
    code, out, err = run(["up", "--bin-dir", "/b"], env, capsys, monkeypatch)
    assert code == 1 and out == ""
    assert err.startswith("k8s-cluster: error: SANDBOX_K8S_POD_SUBNET 10.254.0.0/24 overlaps the service range")
    assert not (tmp_path / "k8s").exists()
    code, _, err = run(["up", "--bin-dir", "/b"], {"SANDBOX_K8S_PLEG": "evented"}, capsys, monkeypatch)
    assert code == 1 and "SANDBOX_K8S_PLEG=evented needs --containerd" in err


def test_an_unknown_command() -> None:
    with pytest.raises(SystemExit):
        main.main(["sideways"])


def test_the_entry_script_runs_it(tmp_path: Path) -> None:
    """scripts/k8s-cluster.sh env and status through bash: the bin dir from scripts/k8s-build.sh (asked,
    nothing built), the lines the tests and the Makefile read."""
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOX_RUN_DIR", "SANDBOX_K8S_POD_SUBNET")}
    env["SANDBOX_STATE_DIR"] = str(tmp_path)
    script = REPO_DIR / "scripts" / "k8s-cluster.sh"
    out = subprocess.run(["bash", str(script), "env"], capture_output=True, text=True, env=env, timeout=60, check=True)
    words = shlex.split(out.stdout.splitlines()[0])
    assert words == ["export", f"KUBECONFIG={tmp_path.resolve()}/k8s/cluster/admin.kubeconfig"]
    assert env_value(out.stdout, "PATH").startswith(f"{tmp_path.resolve()}/k8s/v1.")
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True, env=env, timeout=60)
    assert (status.returncode, status.stdout) == (1, "down\n")
    usage = subprocess.run(["bash", str(script), "nonsense"], capture_output=True, text=True, env=env, timeout=60)
    assert usage.returncode == 2 and "usage:" in usage.stderr
