"""Settings rooted in a temporary state dir, for the test cluster's unit tests (no cluster, no root needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.testcluster.settings import Settings


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {"SANDBOX_STATE_DIR": str(tmp_path / "state"), "SANDBOX_RUNSC": str(tmp_path / "runsc")}
    return Settings.from_env(env, bin_dir=bin_dir, containerd_bin=Path("/usr/bin/containerd"))
