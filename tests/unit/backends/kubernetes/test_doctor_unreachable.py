"""``sandboxctl doctor --config`` with a cluster whose API server does not answer: one failure, the engine's,
with the cluster's fix (never Docker's `make setup`), and what needs the cluster said to be not checked.
Needs no cluster: the kubeconfig names a port nothing listens on (the real client, refused for real)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import yaml

from orchestrator.backends.kubernetes.remedies import DOCTOR_FIXES

SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the socket is: nothing listens there


def cluster_config(tmp_path: Path, **sections: object) -> Path:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{closed_port()}"}}],
                "users": [{"name": "u", "user": {"token": "nothing"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    config = tmp_path / "k8s.yaml"
    config.write_text(
        yaml.safe_dump({"backend": {"kind": "kubernetes", "kubernetes": {"kubeconfig": str(kubeconfig)}}, **sections})
    )
    return config


def doctor(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["doctor", "--config", str(cluster_config(tmp_path)), "--evidence", str(tmp_path / "e.jsonl"), *extra]
    return subprocess.run([*SANDBOXCTL, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_an_unreachable_api_server_is_one_failure_with_the_clusters_fix(tmp_path: Path) -> None:
    proc = doctor(tmp_path, "--json")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] is False
    failures = [c for c in report["checks"] if not c["ok"] and c["checked"]]
    assert [(c["name"], c["code"]) for c in failures] == [("engine", "DOCTOR.ENGINE")], failures
    (engine,) = failures
    assert "the Kubernetes API server does not answer" in engine["detail"]
    assert engine["fix"] == DOCTOR_FIXES.engine
    skipped = [c for c in report["checks"] if not c["checked"]]
    assert skipped and all(c["code"] == "DOCTOR.NOT_CHECKED" and not c["ok"] for c in skipped)
    assert {c["detail"] for c in skipped} == {"not checked: engine failed (above)"}
    assert any(c["name"].startswith("limits in force (") for c in skipped)
    assert "make setup" not in proc.stdout
    # the cluster's own checks are listed, skipped, right after the engine (not left out of the report)
    assert [c["name"] for c in report["checks"][1:6]] == [
        "namespace sandboxes",
        "PodSecurity restricted",
        "default-deny NetworkPolicy",
        "RuntimeClass gvisor (runtime runsc)",
        "permissions",
    ]
    assert all(not c["checked"] for c in report["checks"][1:6])
    # urllib3's retries are not shown: the failure is said once, as the engine's
    assert proc.stderr == ""


def test_the_text_report_says_fail_and_skip(tmp_path: Path) -> None:
    proc = doctor(tmp_path)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("FAIL engine: SANDBOX.UNAVAILABLE: the Kubernetes API server does not answer")
    assert lines[0].endswith("[DOCTOR.ENGINE]")
    assert lines[1] == f"     fix: {DOCTOR_FIXES.engine}"
    assert "skip runtime runsc for untrusted: not checked: engine failed (above)" in lines
    assert lines[2:7] == [
        "skip namespace sandboxes: not checked: engine failed (above)",
        "skip PodSecurity restricted: not checked: engine failed (above)",
        "skip default-deny NetworkPolicy: not checked: engine failed (above)",
        "skip RuntimeClass gvisor (runtime runsc): not checked: engine failed (above)",
        "skip permissions: not checked: engine failed (above)",
    ]
    assert "Retrying" not in proc.stderr and proc.stderr == ""
    assert "Traceback" not in proc.stdout + proc.stderr


def test_doctor_and_gc_use_the_configs_evidence(tmp_path: Path) -> None:
    """evidence.path (relative: from the config's directory) is the file doctor verifies and gc records in, as
    runs and the service under the config write it; --evidence still wins."""
    from orchestrator.cli.main import build_parser
    from orchestrator.cli.ops_cmd import _config_and_evidence

    (tmp_path / "conf").mkdir()
    config = cluster_config(tmp_path / "conf", evidence={"path": "ev/evidence.jsonl"})
    wanted = tmp_path / "conf" / "ev" / "evidence.jsonl"
    proc = subprocess.run(
        [*SANDBOXCTL, "doctor", "--config", str(config), "--json", "--no-probe"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    (evidence,) = [c for c in json.loads(proc.stdout)["checks"] if c["name"] == "evidence"]
    assert evidence == {
        "name": "evidence",
        "ok": True,
        "checked": True,
        "code": None,
        "detail": f"{wanted}: not created yet",
        "fix": None,
    }
    parser = build_parser()
    for command in ("doctor", "gc"):
        _, path = _config_and_evidence(parser.parse_args([command, "--config", str(config)]))
        assert path == wanted
        _, path = _config_and_evidence(parser.parse_args([command, "--config", str(config), "--evidence", "x.jsonl"]))
        assert path == Path("x.jsonl")


def test_a_profile_the_configs_caps_forbid_names_the_configs_choice(tmp_path: Path) -> None:
    """caps.allowed_runtimes: [runc] and a runsc profile: nothing in the profile's file to correct; the fix is the
    config's (before: "change the file and field the message names")."""
    config = cluster_config(tmp_path, caps={"allowed_runtimes": ["runc"]})
    proc = subprocess.run(
        [*SANDBOXCTL, "doctor", "--config", str(config), "--json", "--no-probe", "--evidence", str(tmp_path / "e")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    (untrusted,) = [c for c in json.loads(proc.stdout)["checks"] if c["name"] == "profile untrusted"]
    assert untrusted == {
        "name": "profile untrusted",
        "ok": False,
        "checked": True,
        "code": "DOCTOR.PROFILE",
        "detail": "CONFIG.INVALID: runtime: profile 'untrusted' needs runtime 'runsc', which the policy caps do not"
        " allow (allowed_runtimes: runc)",
        "fix": "allow runsc in caps.allowed_runtimes, or do not use this profile under this config",
    }
