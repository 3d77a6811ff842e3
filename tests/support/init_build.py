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


SANITIZERS = [
    "-g",
    "-fsanitize=address,undefined",
    "-fno-sanitize-recover=all",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wconversion",
]


def compile_init_asan(directory: Path, name: str = "sandbox-init") -> Path:
    """The init built in ``directory`` with AddressSanitizer and UBSan: a memory error fails its run loudly
    (skips without gcc, or where the sanitizers' runtime is missing)."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    binary = directory / name
    built = subprocess.run(["gcc", *SANITIZERS, "-o", str(binary), str(SOURCE)], capture_output=True, check=False)
    if built.returncode != 0:
        pytest.skip(f"no sanitizer build here: {built.stderr.decode()[-300:]}")
    return binary
