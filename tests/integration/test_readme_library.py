"""The README's library example, run as written (its policy file and workspace swapped for temporary ones), and
its service and client example: the config served, the client code run as written."""

from __future__ import annotations

import asyncio
import re
import secrets
import socket
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

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


def _block(section: str, language: str) -> str:
    code = re.search(rf"```{language}\n(.*?)```", section, re.S)
    assert code is not None, language
    return code.group(1)


async def test_the_readme_service_and_client_example_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, run_sandboxes: Any
) -> None:
    """The README's service config, served as `sandboxctl serve` serves it (its store, workspaces and evidence
    swapped for temporary ones, a free loopback port for 8700), and its client code run as written."""
    from orchestrator.api.app import start_site
    from orchestrator.service.hosting import Service

    section = README[README.index("## Service and client") :]
    config = yaml.safe_load(_block(section, "yaml"))
    config["service"] |= {"store": str(tmp_path / "service.db"), "workspaces": str(tmp_path / "workspaces")}
    config["evidence"] = {"path": str(tmp_path / "evidence.jsonl")}
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("SANDBOX_TOKEN", secrets.token_hex(16))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    service = await Service.open(path)
    runner, guard = await start_site(service, "127.0.0.1", port)
    try:
        source = _block(section, "python").replace("http://127.0.0.1:8700", f"http://127.0.0.1:{port}")
        await asyncio.to_thread(exec, source, {})  # the blocking client, beside the service's event loop
    finally:
        await guard.stop()
        await runner.cleanup()
    assert capsys.readouterr().out == "hi\n"
