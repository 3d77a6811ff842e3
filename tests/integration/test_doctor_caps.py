"""``sandboxctl doctor --config`` on the Docker engine probes what a run under that config gets: with
``caps: {max_memory: 256m}`` the probe container of workspace-write (512 MiB of its own) has 256 MiB, and
the doctor holds it to that; sizes come with their units."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]


def test_the_probe_gets_and_expects_the_configs_caps(tmp_path: Path) -> None:
    config = tmp_path / "capped.yaml"
    config.write_text("caps:\n  max_memory: 256m\n")
    args = ["doctor", "--config", str(config), "--evidence", str(tmp_path / "e.jsonl"), "--json"]
    proc = subprocess.run([*SANDBOXCTL, *args], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    checks = {check["name"]: check for check in json.loads(proc.stdout)["checks"]}
    assert ", memory 256MiB," in checks["profile workspace-write"]["detail"]
    probe = checks["limits in force (workspace-write, runc)"]
    assert probe["ok"], probe
    assert "memory=256MiB" in probe["detail"] and "fsize=256MiB" in probe["detail"] and "nofile=1024" in probe["detail"]
    gvisor = checks["limits in force (untrusted, runsc)"]
    assert gvisor["ok"] and "fsize=64MiB" in gvisor["detail"], gvisor
    assert proc.returncode == 0, proc.stdout
