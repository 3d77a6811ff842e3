"""docs/profiles.md's examples, run as written: each ```sh block in bash (a fresh HOME and working directory,
sandboxctl of this checkout on PATH), its output compared with the ```text block that follows it. Change an
example and this test changes with it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.profiles.paths import ENV_VAR
from tests.support.paths import DOCS

EXAMPLE = re.compile(r"```sh\n(.*?)```\s*```text\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    text = (DOCS / "profiles.md").read_text(encoding="utf-8")
    found = [(m.group(1), m.group(2)) for m in EXAMPLE.finditer(text)]
    assert len(found) >= 3, "docs/profiles.md: the override recipe, the --config example, the diff of a proposal"
    return found


@pytest.mark.parametrize(
    ("script", "expected"), examples(), ids=["override-a-builtin", "resolved-under-caps", "diff-a-proposal"]
)
def test_the_example_prints_what_the_doc_shows(tmp_path: Path, script: str, expected: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    env |= {"HOME": str(home), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (proc.returncode, proc.stderr) == (0, ""), proc.stderr
    assert proc.stdout == expected
