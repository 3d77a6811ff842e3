"""A client that is not ours: the MCP Inspector's command-line client (scripts/mcp-inspector.sh, on the project's
node 20), one method a run, over stdio (it starts `sandboxctl mcp --config`) and over Streamable HTTP (a running
service's /mcp with a bearer token). What it prints is the JSON of the MCP result: the same six tools with the
schemas of our tool table, a run's structured content, a refusal as an isError result with its code."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator.mcp.tools import TOOLS
from tests.support.evidence import record_dicts
from tests.support.kube import host_env
from tests.support.mcp import SANDBOXCTL, stdio_parameters
from tests.support.paths import ROOT
from tests.support.service import start_service, token_of, write_config

pytestmark = pytest.mark.integration
SCRIPT = ROOT / "scripts" / "mcp-inspector.sh"
CLIENT = "inspector-cli/1.0.3"  # how it names itself (clientInfo), as the evidence records it
TIMEOUT_S = 120  # one run: node's start, the server's (stdio), the call


@pytest.fixture(scope="session")
def inspector() -> Path:
    """The wrapper the script prints: installed into the machine's state dir on a fresh machine (npm ci, ~8 s),
    found at once afterwards."""
    proc = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=900, env=host_env(), check=False
    )
    if proc.returncode != 0:
        pytest.fail(f"{SCRIPT.name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    wrapper = Path(proc.stdout.strip().splitlines()[-1])
    assert wrapper.is_file() and os.access(wrapper, os.X_OK), wrapper
    return wrapper


async def inspect(wrapper: Path, *args: str, cwd: Path, ok: bool = True) -> tuple[Any, str]:
    """One run of the CLI: its JSON (None when it failed) and its stderr. Its own process group, killed whole
    (node and the server it started) if it outlives TIMEOUT_S. Asynchronous: a service of this test answers it."""
    proc = await asyncio.create_subprocess_exec(
        str(wrapper), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=cwd, env=stdio_parameters().env, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    stderr = err.decode()
    assert "Traceback" not in stderr, stderr
    assert (proc.returncode == 0) is ok, (proc.returncode, out, stderr)
    return (json.loads(out) if ok else None), stderr


def check_tool_list(listed: dict[str, Any]) -> None:
    """The six tools, in order, each with exactly the input schema of our table and its annotations."""
    tools = listed["tools"]
    assert [t["name"] for t in tools] == [t.name for t in TOOLS]
    for got, spec in zip(tools, TOOLS, strict=True):
        assert got["inputSchema"] == spec.input_schema(), spec.name
        assert got["title"] == spec.title and got["description"] == spec.description
        assert got["annotations"]["readOnlyHint"] is spec.read_only, spec.name
    run_schema = tools[0]["inputSchema"]
    assert run_schema["additionalProperties"] is False and run_schema["oneOf"] == [
        {"required": ["argv"]}, {"required": ["command"]}
    ]  # fmt: skip


def check_ran(result: dict[str, Any], stdout: str) -> str:
    assert result["isError"] is False, result
    structured = result["structuredContent"]
    assert (structured["exit_code"], structured["stdout"], structured["stderr"]) == (0, stdout, ""), structured
    assert result["content"][0]["type"] == "text" and f"stdout:\n{stdout}" in result["content"][0]["text"]
    execution_id: str = structured["execution_id"]
    return execution_id


async def test_inspector_over_stdio_lists_our_tools_runs_and_is_refused(inspector: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    server = [SANDBOXCTL, "mcp", "--config", str(config)]  # the target first: --tool-arg takes every word after it
    listed, _ = await inspect(inspector, *server, "--method", "tools/list", cwd=tmp_path)
    check_tool_list(listed)

    call = [*server, "--method", "tools/call", "--tool-name", "run"]
    # --tool-arg values are JSON first: a quoted string, a number, an array
    ran, _ = await inspect(inspector, *call, "--tool-arg", 'command="echo hi"', "timeout_ms=10000", cwd=tmp_path)
    first = check_ran(ran, "hi\n")
    ran, _ = await inspect(inspector, *call, "--tool-arg", 'argv=["printf", "%s,", "a b", "7"]', cwd=tmp_path)
    second = check_ran(ran, "a b,7,")
    refused, _ = await inspect(inspector, *call, "--tool-arg", 'command="sudo id"', cwd=tmp_path)
    assert refused["isError"] is True and refused["structuredContent"]["error"]["code"] == "POLICY.DENIED"
    assert refused["content"][0]["text"].startswith("refused: POLICY.DENIED: ")

    evidence = tmp_path / "evidence.jsonl"
    contexts = [r["data"]["sanitized"]["context"] for r in record_dicts(evidence, event="request_received")]
    assert len(contexts) == 3
    for context in contexts:  # each run of the CLI a server process of its own: an MCP session each
        assert (context["mcp"]["transport"], context["mcp"]["client"]) == ("stdio", CLIENT)
    assert len({c["mcp"]["session"] for c in contexts}) == 3
    for execution_id in (first, second):
        assert record_dicts(evidence, execution_id)[-1]["event"] == "execution_finished"


async def test_inspector_over_streamable_http_with_a_bearer_token(inspector: Path, tmp_path: Path) -> None:
    config = write_config(tmp_path)
    harness = await start_service(config)
    try:
        url = f"{harness.url}/mcp"
        bearer = ["--transport", "http", "--header", f"Authorization: Bearer {token_of('agent-a')}"]
        listed, _ = await inspect(inspector, url, *bearer, "--method", "tools/list", cwd=tmp_path)
        check_tool_list(listed)
        ran, _ = await inspect(
            inspector, url, *bearer, "--method", "tools/call", "--tool-name", "run",
            "--tool-arg", 'argv=["echo", "over http"]', cwd=tmp_path,
        )  # fmt: skip
        execution_id = check_ran(ran, "over http\n")
        refused, _ = await inspect(
            inspector, url, *bearer, "--method", "tools/call", "--tool-name", "run",
            "--tool-arg", 'command="sudo id"', cwd=tmp_path,
        )  # fmt: skip
        assert refused["isError"] is True and refused["structuredContent"]["error"]["code"] == "POLICY.DENIED"
        # a token the service does not know: the CLI fails at connect, with the service's code, in one line
        wrong = ["--transport", "http", "--header", "Authorization: Bearer test-token-nobody-0123456789"]
        _, said = await inspect(inspector, url, *wrong, "--method", "tools/list", cwd=tmp_path, ok=False)
        assert "AUTH.UNAUTHORIZED" in said and said.count("\n") == 1, said
    finally:
        await harness.stop()
    [received] = record_dicts(tmp_path / "evidence.jsonl", execution_id, "request_received")
    context = received["data"]["sanitized"]["context"]
    assert (context["tenant"], context["subject"]) == ("team-a", "agent-a")
    assert (context["mcp"]["transport"], context["mcp"]["client"], context["mcp"]["tool"]) == (
        "streamable-http", CLIENT, "run"
    )  # fmt: skip
