"""Our pooled sandbox's init (images/init/sandbox-init.c), compiled for a test as the image build does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import ROOT

SOURCE = ROOT / "images" / "init" / "sandbox-init.c"
FLAGS = ["-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror", "-Wconversion"]  # as scripts/build-images.sh


def compile_init(directory: Path) -> Path:
    """The init built in ``directory`` (skips without gcc: ``make setup`` installs it)."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    binary = directory / "sandbox-init"
    subprocess.run(["gcc", *FLAGS, "-o", str(binary), str(SOURCE)], check=True, capture_output=True)
    return binary
