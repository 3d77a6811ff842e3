"""An agent loop over the sandbox orchestrator's MCP tools, with a script in place of the model: it lists the
tools, then picks one call after another (write code, run its tests, read the report, use a REPL session) and
reacts to each result as the tool descriptions tell a model to: SANDBOX.RESTRICTED is retried once with the
escalation it names and retry_of; POLICY.DENIED gives that step up (never retried as is). Asks wait for a person,
their progress printed. Replace `Agent.plan` with your model's choices and keep `step`.

    python docs/examples/mcp_agent.py --url http://127.0.0.1:8080 --token-file token.txt   # Streamable HTTP
    python docs/examples/mcp_agent.py --stdio -- sandboxctl mcp --config policy.yaml       # a local server

Prints a transcript; exits 0 when every step of the plan completed or was given up on a denial, else 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp_types import Implementation

ME = Implementation(name="mcp-agent-example", version="1.0")
CODE = "def add(a: int, b: int) -> int:\n    return a + b\n"
TEST = "from calc import add\n\n\ndef test_add() -> None:\n    assert add(2, 3) == 5\n"


@contextlib.asynccontextmanager
async def connect(args: argparse.Namespace) -> AsyncIterator[Client]:
    if args.stdio:  # the server inherits this environment (the engine's DOCKER_HOST, SANDBOX_* settings)
        server = StdioServerParameters(command=args.command[0], args=args.command[1:], env=dict(os.environ))
        async with Client(server, client_info=ME) as client:
            yield client
        return
    token = Path(args.token_file).read_text().strip()
    # a call that waits on an ask holds its response open: read timeout longer than the policy's approval timeout
    timeout = httpx2.Timeout(30, read=900)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=timeout) as http,
        Client(streamable_http_client(f"{args.url}/mcp", http_client=http), client_info=ME) as client,
    ):
        yield client


class Agent:
    def __init__(self, client: Client) -> None:
        self.client = client
        self.outcomes: dict[str, str] = {}  # step -> done | given up | failed

    async def waiting(self, progress: float, total: float | None, message: str | None) -> None:
        print(f"    ... {message}")  # e.g. "waiting for approval ex-... (why it asks, 290 s left)"

    async def call(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """One tool call: its structured content and, for a refusal (isError with a code), the error."""
        print(f"  -> {tool} {json.dumps(arguments)[:110]}")
        result = await self.client.call_tool(tool, arguments, progress_callback=self.waiting)
        content: dict[str, Any] = result.structured_content or {}
        error = content.get("error") if result.is_error else None
        if error is not None:
            print(f"  <- {error['code']}: {error['message']}")
        else:
            output = (content.get("stdout") or "").strip().splitlines()
            state = "running" if content.get("running") else f"exit {content.get('exit_code')}"
            print(f"  <- {state}" + (f": {output[-1][:100]}" if output else ""))
        return content, error

    async def step(self, name: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any] | None:
        """A step of the plan: its result when it succeeded, None when it was given up or failed."""
        print(f"* {name}")
        content, error = await self.call(tool, arguments)
        if error is not None and error["code"] == "SANDBOX.RESTRICTED":  # ask for what it needed, linked
            escalation, retry_of = error["details"]["escalation"], error["details"]["retry_of"]
            print(f"    retrying with {json.dumps(escalation)}, retry_of {retry_of}")
            content, error = await self.call(tool, {**arguments, **escalation, "retry_of": retry_of})
        if error is not None and error["code"] == "POLICY.DENIED":
            self.outcomes[name] = "given up"  # the policy said no: do not retry the same thing
            return None
        ok = error is None and content.get("exit_code") in (0, None)  # None: a session still running
        self.outcomes[name] = "done" if ok else "failed"
        return content if ok else None

    async def plan(self) -> None:
        tools = (await self.client.list_tools()).tools
        print("tools: " + ", ".join(tool.name for tool in tools))
        await self.step("write the code", "write_file", {"path": "calc/calc.py", "content": CODE})
        await self.step("write its test", "write_file", {"path": "calc/test_calc.py", "content": TEST})
        pytest = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=report.xml"]
        await self.step("run the tests", "run", {"argv": pytest, "workdir": "calc"})
        report = await self.step("read the report", "read_file", {"path": "calc/report.xml"})
        if report is not None:
            print(f"    the report lists {report['stdout'].count('<testcase ')} test case(s)")
        keep = "mkdir -p /home/sandbox/lib && cp calc.py /home/sandbox/lib/"  # the root is read-only: restricted
        await self.step("keep a copy outside the workspace", "run", {"command": keep, "workdir": "calc"})
        await self.step("install it system-wide", "run", {"command": "sudo make install"})  # denied: given up
        repl = await self.step("start a REPL", "exec_command", {"cmd": "python3 -u -q -i", "workdir": "calc"})
        if repl is None or "session_id" not in repl:
            return
        session = repl["session_id"]
        await self.step("import the code", "write_stdin", {"session_id": session, "chars": "from calc import add\n"})
        used = await self.step("use it", "write_stdin", {"session_id": session, "chars": "print(add(40, 2))\n"})
        if used is None or used["stdout"] != "42\n":
            self.outcomes["use it"] = "failed"
        await self.step("quit", "write_stdin", {"session_id": session, "chars": "exit()\n", "yield_time_ms": 5000})


async def main(args: argparse.Namespace) -> int:
    async with connect(args) as client:
        agent = Agent(client)
        await agent.plan()
    print("plan: " + "; ".join(f"{name}: {outcome}" for name, outcome in agent.outcomes.items()))
    return 0 if len(agent.outcomes) == 10 and "failed" not in agent.outcomes.values() else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="a controller (its /mcp), with --token-file")
    where.add_argument("--stdio", action="store_true", help="start the server given after --")
    parser.add_argument("--token-file", help="a file holding the bearer token")
    parser.add_argument("command", nargs="*", help="with --stdio: the server's command line")
    arguments = parser.parse_args()
    if (arguments.url and not arguments.token_file) or (arguments.stdio and not arguments.command):
        parser.error("--url needs --token-file; --stdio needs the server's command after --")
    sys.exit(asyncio.run(main(arguments)))
