"""The GitHub runner's externals for the CI tests: node 20 as the runner ships it (``externals/node20/bin/node``),
from ``scripts/ci-externals.sh`` (the official linux-x64 build, cached by version in the machine's state
directory: fetched once, then found at once)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

from tests.support.kube import host_env
from tests.support.paths import ROOT

SCRIPT = ROOT / "scripts" / "ci-externals.sh"
NODE_VERSION = "v20.20.2"


@functools.cache
def runner_externals() -> Path:
    """The externals directory (``node20/bin/node`` in it)."""
    proc = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=900, env=host_env(), check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{SCRIPT.name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    directory = Path(proc.stdout.strip().splitlines()[-1])
    node = directory / "node20" / "bin" / "node"
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert version.stdout.strip() == NODE_VERSION, version
    return directory
