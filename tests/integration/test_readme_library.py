"""The README's library example, run as written (its policy file and workspace swapped for temporary ones)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

README = (Path(__file__).parents[2] / "README.md").read_text()


async def test_the_readme_library_example_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_sandboxes: Any
) -> None:
    section = README[README.index("## Library use") :]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    policy = tmp_path / "policy.yaml"
    policy.write_text(f"safety:\n  mode: ask\n  allowlist: [echo]\nevidence:\n  path: {tmp_path / 'evidence.jsonl'}\n")
    workspace = tmp_path / "repo"
    workspace.mkdir()
    source = code.group(1).replace('"policy.yaml"', repr(str(policy))).replace('"/work/repo"', repr(str(workspace)))
    namespace: dict[str, Any] = {}
    exec("async def example():\n" + textwrap.indent(source, "    "), namespace)
    await namespace["example"]()
    assert capsys.readouterr().out == "hi\n"
