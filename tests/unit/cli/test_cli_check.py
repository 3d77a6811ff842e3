"""sandboxctl check as a user runs it: a real process, real exit codes, real output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SANDBOXCTL, *args], capture_output=True, text=True, cwd=cwd, timeout=60)


@pytest.mark.parametrize(
    ("args", "decision"),
    [
        (["--", "ls", "-la"], "allow"),
        (["--shell", "ls -la | wc -l"], "ask"),
        (["--", "sudo", "ls"], "deny"),
        (["--tool", "exec_command", "--shell", "rm -fr ~"], "deny"),
        (["--", "make"], "ask"),
    ],
)
def test_check_json_is_one_object_and_exit_0(args: list[str], decision: str) -> None:
    proc = run("check", "--json", *args)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # exactly one JSON document
    assert proc.stdout.count("\n") == 1
    assert out["decision"] == decision
    assert set(out) >= {"decision", "reason", "matched_rule", "risk", "intent", "approval_key", "sanitized"}
    assert set(out["risk"]) == {"risk_level", "reason"}
    assert set(out["intent"]) == {"argv", "is_complex", "reason", "unseen"}
    assert len(out["approval_key"]) == 64


def test_check_never_shows_env_values() -> None:
    proc = run("check", "--json", "--env", "TOKEN=sekrit-value", "--", "env")
    assert proc.returncode == 0
    assert "sekrit-value" not in proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["sanitized"]["env_keys"] == ["TOKEN"]


def test_human_output() -> None:
    proc = run("check", "--", "rm", "-r", "-f", "/")
    assert proc.returncode == 0
    assert "decision:     deny" in proc.stdout
    assert "denylist:rm -rf" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["check"], "INPUT.INVALID: nothing to decide"),
        (["check", "--shell", "ls", "--", "ls"], "INPUT.INVALID"),
        (["check", "--tool", "shell_command", "--", "ls"], "INPUT.INVALID"),
        (["check", "--env", "NOEQUALS", "--", "ls"], "INPUT.INVALID"),
        (["check", "--env", "BAD KEY=v", "--", "ls"], "INPUT.INVALID: env"),
        (["check", "--tool", "nope", "--", "ls"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args: list[str], needle: str) -> None:
    proc = run(*args)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_input_with_json_still_prints_one_object() -> None:
    proc = run("check", "--json", "--", "")
    assert proc.returncode == 2
    assert json.loads(proc.stdout)["error"]["code"] == "INPUT.INVALID"


def test_bad_config_names_file_line_field(tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text("safety:\n  mode: ask\n  rules:\n    - action: perhaps\n")
    proc = run("check", "--config", str(config), "--", "ls")
    assert proc.returncode == 2
    assert f"CONFIG.INVALID: {config}:4: safety.rules.0.action" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_config_file_applies(tmp_path: Path) -> None:
    config = tmp_path / "policy.yaml"
    config.write_text("safety:\n  mode: allow\n  denylist: [curl]\n")
    allowed = json.loads(run("check", "--json", "--config", str(config), "--shell", "make && make test").stdout)
    assert allowed["decision"] == "allow" and allowed["matched_rule"] == "mode:allow"
    denied = json.loads(run("check", "--json", "--config", str(config), "--", "/usr/bin/curl", "x").stdout)
    assert denied["decision"] == "deny"


def test_installed_entry_point_runs() -> None:
    exe = Path(sys.executable).parent / "sandboxctl"
    if not exe.exists():
        pytest.skip("console script not installed in this interpreter's bin")
    proc = subprocess.run([str(exe), "check", "--", "ls"], capture_output=True, text=True, env=os.environ)
    assert proc.returncode == 0 and "decision:     allow" in proc.stdout


def test_a_malformed_env_argument_is_never_echoed() -> None:
    proc = run("check", "--json", "--env", "TOKEN:hunter2-secret", "--", "ls")
    assert proc.returncode == 2
    assert "hunter2-secret" not in proc.stdout + proc.stderr
    assert "--env #1 is not of the form K=V" in proc.stderr


def test_human_output_escapes_control_characters() -> None:
    proc = run("check", "--shell", "echo 'hi\rrm -rf x\x1b[2K'")
    assert proc.returncode == 0
    assert "\r" not in proc.stdout and "\x1b" not in proc.stdout
    assert "\\x0d" in proc.stdout
