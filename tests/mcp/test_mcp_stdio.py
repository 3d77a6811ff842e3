"""`sandboxctl mcp` over stdio, driven by the official SDK's client as an agent host starts it, against the real
engine: in process with a config (the governed path in the server's own process, asks in the config's store,
answered with `sandboxctl approvals`), and forwarding to a running service with a token. Every call is an
ordinary execution on the record, with its MCP context; the host going away cancels what waits, on the record.
The server's stderr is kept (never a traceback there) and so is, for the raw-host test, its exit status."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.session import DEFAULT_CLIENT_INFO
from mcp.client.stdio import stdio_client
from mcp_types import CallToolResult, Implementation

from tests.support.evidence import record_dicts
from tests.support.mcp import SANDBOXCTL, Mode, stdio_parameters, text_of
from tests.support.service import start_service, token_of, write_config

pytestmark = pytest.mark.integration
HOST = Implementation(name="stdio-test-host", version="1.2.3")
WAITING = re.compile(r"^waiting for approval (ex-[0-9a-f-]+) \((.+), (\d+) s left\)$")
SESSION_ID = re.compile(r"^stdio-[0-9a-f]{16}$")


def config_of(tmp_path: Path) -> Path:
    """write_config's tokens, store and evidence, with file tools allowed in the workspace (a .env denied)."""
    return write_config(
        tmp_path,
        safety={
            "mode": "ask",
            "allowlist": ["echo", "true", "printf", "sleep", "cat", "ls"],
            "approval_timeout_s": 30,
            "rules": [
                {"name": "no-env-files", "tool": ["files"], "paths": ["*.env"], "action": "deny"},
                {"name": "workspace-files", "tool": ["files"], "action": "allow"},
            ],
        },
    )


@contextlib.asynccontextmanager
async def host(
    *args: str, stderr: Path, mode: Mode = "auto", client_info: Implementation | None = HOST
) -> AsyncIterator[Client]:
    """The SDK's client starting `sandboxctl mcp ARGS`, the server's stderr written to ``stderr``."""
    with stderr.open("w") as errlog:
        transport = stdio_client(stdio_parameters(*args), errlog=errlog)
        async with Client(transport, mode=mode, client_info=client_info, read_timeout_seconds=60) as client:
            yield client


def clean(stderr: Path) -> str:
    text = stderr.read_text()
    assert "Traceback" not in text and "INTERNAL" not in text, text
    return text


def error_of(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error is True, result
    assert result.structured_content is not None
    error: dict[str, Any] = result.structured_content["error"]
    assert text_of(result).startswith(f"refused: {error['code']}: "), text_of(result)
    return error


def verify(evidence: Path) -> None:
    """`sandboxctl evidence verify`: the chain intact, every execution that began ended (exit 0)."""
    proc = subprocess.run(
        [SANDBOXCTL, "evidence", "verify", "--path", str(evidence)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


async def approve(config: Path, execution_id: str) -> None:
    """An approver at a shell, as docs/cli.md shows it: the ask sits in the config's service.store."""
    proc = await asyncio.create_subprocess_exec(
        SANDBOXCTL, "approvals", "approve", execution_id, "--config", str(config), "--reason", "fine by me",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0 and out.decode() == f"{execution_id}: approved\n", (out, err)


class Approver:
    """A progress callback that reads the waits and, once ``after`` notes named the same ask, approves it."""

    def __init__(self, config: Path, after: int = 2) -> None:
        self.config, self.after = config, after
        self.notes: list[tuple[float, str]] = []
        self.approved: str | None = None

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.notes.append((progress, message or ""))
        asks = {w[1] for _, m in self.notes if (w := WAITING.match(m))}
        assert len(asks) <= 1, self.notes  # every note that names an ask names the one the call waits on
        if self.approved is None and sum(bool(WAITING.match(m)) for _, m in self.notes) >= self.after:
            self.approved = asks.pop()
            await approve(self.config, self.approved)

    def seconds_left(self) -> list[int]:
        return [int(w[3]) for _, m in self.notes if (w := WAITING.match(m))]


def mcp_requests(evidence: Path) -> dict[str, dict[str, Any]]:
    """Each execution's request context as recorded (request_received), by execution id."""
    return {
        r["execution_id"]: r["data"]["sanitized"]["context"] | {"call_id_field": r.get("call_id")}
        for r in record_dicts(evidence, event="request_received")
    }


# -- in process: `sandboxctl mcp --config CONFIG` ---------------------------------------------------------------
@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_in_process_runs_files_and_a_session_each_an_execution_on_the_record(tmp_path: Path, mode: Mode) -> None:
    config, stderr = config_of(tmp_path), tmp_path / "stderr"
    async with host("--config", str(config), stderr=stderr, mode=mode) as client:
        ran = await client.call_tool("run", {"argv": ["printf", "%s|", "a b", "c"]})
        assert ran.is_error is False and ran.structured_content is not None
        assert (ran.structured_content["exit_code"], ran.structured_content["stdout"]) == (0, "a b|c|")
        assert text_of(ran).startswith("exit code 0\nstdout:\na b|c|")

        wrote = await client.call_tool("write_file", {"path": "notes/todo.txt", "content": "one\ntwo ✓\n"})
        assert wrote.is_error is False and wrote.structured_content is not None, text_of(wrote)
        effects = wrote.structured_content["side_effects"]
        assert (effects["created"], effects["bytes_written"]) == (2, len("one\ntwo ✓\n".encode()))  # dir + file
        read = await client.call_tool("read_file", {"path": "notes/todo.txt"})
        assert (read.is_error, text_of(read)) == (False, "one\ntwo ✓\n")  # the content itself, for the model
        missing = await client.call_tool("read_file", {"path": "notes/none.txt"})
        assert missing.is_error is True and missing.structured_content is not None
        assert missing.structured_content["exit_code"] == 1 and "No such file" in missing.structured_content["stderr"]

        # one process across calls: cat echoes each line written to it, then ends at EOF (^D on a terminal)
        opened = await client.call_tool("exec_command", {"cmd": "cat", "yield_time_ms": 200})
        assert opened.is_error is False and opened.structured_content is not None, text_of(opened)
        session = opened.structured_content["session_id"]
        assert opened.structured_content["running"] is True
        assert f"Process running with session ID {session}" in text_of(opened)
        for line in ("first\n", "second\n"):
            echoed = await client.call_tool("write_stdin", {"session_id": session, "chars": line})
            assert echoed.structured_content is not None
            assert (echoed.structured_content["stdout"], echoed.structured_content["running"]) == (line, True)
        other = await client.call_tool("write_stdin", {"session_id": "ex-0-0", "chars": "x"})
        assert error_of(other)["code"] == "SESSION.NOT_FOUND"

    assert clean(stderr) == ""
    evidence = tmp_path / "evidence.jsonl"
    contexts = mcp_requests(evidence)
    tools = [c["mcp"]["tool"] for c in contexts.values()]
    # each write to the session is a request of its own, decided and recorded (the unknown session's never was)
    assert tools == ["run", "write_file", "read_file", "read_file", "exec_command", "write_stdin", "write_stdin"]
    sessions = {c["mcp"]["session"] for c in contexts.values()}
    assert len(sessions) == 1 and SESSION_ID.match(next(iter(sessions))), sessions
    for context in contexts.values():  # the caller: this process's user, for the default tenant
        assert context["mcp"]["transport"] == "stdio" and context["mcp"]["client"] == "stdio-test-host/1.2.3"
        assert context["tenant"] == "default" and context["subject"].startswith("mcp-stdio:")
        assert context["call_id"] == context["call_id_field"]  # on the record's own field too
        assert context["call_id"].startswith(context["mcp"]["session"] + ":")  # the session, then the JSON-RPC id
    assert len({c["call_id"] for c in contexts.values()}) == len(contexts)
    # the session's records: its input counted (never its content), closed when the host went away
    [opened_id] = [i for i, c in contexts.items() if c["mcp"]["tool"] == "exec_command"]
    assert len(record_dicts(evidence, opened_id, "session_input")) == 2
    [closed] = record_dicts(evidence, opened_id, "session_closed")
    assert closed["data"]["reason"] == "cancelled"
    verify(evidence)


async def test_a_denial_is_an_error_result_with_its_code_and_nothing_runs(tmp_path: Path) -> None:
    config, stderr = config_of(tmp_path), tmp_path / "stderr"
    async with host("--config", str(config), stderr=stderr) as client:
        started = time.monotonic()
        denied = await client.call_tool("run", {"command": "sudo id"})
        assert time.monotonic() - started < 5  # answered at once: nobody is asked
        error = error_of(denied)
        assert error["code"] == "POLICY.DENIED" and "sudo" in error["message"] and error["retryable"] is False
        secret = await client.call_tool("write_file", {"path": "prod.env", "content": "TOKEN=x\n"})
        assert error_of(secret)["code"] == "POLICY.DENIED"
        assert "no-env-files" in json.dumps(secret.structured_content) or "prod.env" in text_of(secret)
    assert clean(stderr) == ""
    evidence = tmp_path / "evidence.jsonl"
    assert {r["decision"] for r in record_dicts(evidence, event="decision_made")} == {"deny"}
    assert record_dicts(evidence, event="execution_started") == []
    assert not (tmp_path / "workspaces").exists() or not list((tmp_path / "workspaces").rglob("prod.env"))
    verify(evidence)


async def test_an_ask_waits_with_progress_until_approved_from_a_shell(tmp_path: Path) -> None:
    """The call stays open while the ask waits in the config's store; progress says for which approval and how
    long is left; `sandboxctl approvals approve` in another process lets it run, and the call answers."""
    config, stderr = config_of(tmp_path), tmp_path / "stderr"
    approver = Approver(config)
    async with host("--config", str(config), stderr=stderr, client_info=None) as client:
        result = await client.call_tool("run", {"argv": ["uname", "-s"]}, progress_callback=approver)
    assert result.is_error is False and result.structured_content is not None, text_of(result)
    assert result.structured_content["stdout"] == "Linux\n"
    assert approver.approved == result.structured_content["execution_id"]
    left = approver.seconds_left()
    assert len(left) >= 2 and all(0 < s <= 30 for s in left) and left == sorted(left, reverse=True), approver.notes
    # a run's ask is named from the first note on; once approved, a note may say it runs
    asked = [m for _, m in approver.notes if WAITING.match(m)]
    assert [m for _, m in approver.notes][: len(asked)] == asked, approver.notes
    assert all(m == f"running: {approver.approved}" for _, m in approver.notes[len(asked) :]), approver.notes
    assert "no rule or allowlist entry matched" in approver.notes[0][1]
    assert [p for p, _ in approver.notes] == sorted(p for p, _ in approver.notes)  # progress only grows
    assert clean(stderr) == ""
    evidence = tmp_path / "evidence.jsonl"
    [decided] = record_dicts(evidence, approver.approved, "approval_decided")
    assert decided["decision"] == "approved" and decided["approver"].startswith("queue:")
    # the SDK's own clientInfo when the host names none
    [context] = mcp_requests(evidence).values()
    assert context["mcp"]["client"] == f"{DEFAULT_CLIENT_INFO.name}/{DEFAULT_CLIENT_INFO.version}"
    verify(evidence)


async def test_a_session_asked_about_opens_once_approved_and_keeps_its_shell_state(tmp_path: Path) -> None:
    """exec_command of a program no rule allows: the open waits on the ask (progress names it), then the shell
    keeps a variable from one write_stdin to the next, and exits with the code it is told."""
    config, stderr = config_of(tmp_path), tmp_path / "stderr"
    approver = Approver(config, after=1)
    async with host("--config", str(config), stderr=stderr) as client:
        bash = {"cmd": "bash", "yield_time_ms": 200}
        opened = await client.call_tool("exec_command", bash, progress_callback=approver)
        assert opened.is_error is False and opened.structured_content is not None, text_of(opened)
        session = opened.structured_content["session_id"]
        assert session == approver.approved
        await client.call_tool("write_stdin", {"session_id": session, "chars": "answer=$((6 * 7))\n"})
        echoed = await client.call_tool("write_stdin", {"session_id": session, "chars": 'echo "answer=$answer"\n'})
        assert echoed.structured_content is not None and echoed.structured_content["stdout"] == "answer=42\n"
        ended = await client.call_tool(
            "write_stdin", {"session_id": session, "chars": "exit 3\n", "yield_time_ms": 5000}
        )
        assert ended.structured_content is not None
        assert (ended.structured_content["running"], ended.structured_content["exit_code"]) == (False, 3)
        assert "Process exited with code 3" in text_of(ended)
    assert clean(stderr) == ""
    evidence = tmp_path / "evidence.jsonl"
    [closed] = record_dicts(evidence, session, "session_closed")
    assert (closed["data"]["reason"], closed["data"]["exit_code"]) == ("exit", 3)
    verify(evidence)


# -- forwarding: `sandboxctl mcp --url URL --token-file F` -------------------------------------------------------
async def test_forwarding_to_a_service_acts_for_the_token(tmp_path: Path) -> None:
    config, stderr = config_of(tmp_path), tmp_path / "stderr"
    token = tmp_path / "token"
    token.write_text(token_of("agent-a") + "\n")
    harness = await start_service(config)
    try:
        async with host("--url", harness.url, "--token-file", str(token), stderr=stderr) as client:
            ran = await client.call_tool("run", {"command": "echo forwarded"})
            assert ran.structured_content is not None and ran.structured_content["stdout"] == "forwarded\n"
            opened = await client.call_tool("exec_command", {"cmd": "cat", "yield_time_ms": 200})
            assert opened.structured_content is not None, text_of(opened)
            session = opened.structured_content["session_id"]
            echoed = await client.call_tool("write_stdin", {"session_id": session, "chars": "over http\n"})
            assert echoed.structured_content is not None and echoed.structured_content["stdout"] == "over http\n"
            denied = await client.call_tool("run", {"command": "sudo id"})
            assert error_of(denied)["code"] == "POLICY.DENIED"
            # the session is the service's: the agent's own client sees it, another tenant's does not
            assert harness.service.sessions.owner(session) == ("team-a", "agent-a")
    finally:
        await harness.stop()
    assert clean(stderr) == ""
    contexts = list(mcp_requests(tmp_path / "evidence.jsonl").values())
    assert [c.get("mcp", {}).get("tool") for c in contexts] == ["run", "exec_command", None, "run"]
    assert contexts[2]["call_id_field"] is None  # the API's write_stdin takes characters only, no MCP context
    assert {(c["tenant"], c["subject"]) for c in contexts} == {("team-a", "agent-a")}
    for context in contexts[:2] + contexts[3:]:  # the token's tenant and subject; the context is the stdio server's
        assert context["mcp"]["transport"] == "stdio" and SESSION_ID.match(context["mcp"]["session"])
        assert context["mcp"]["client"] == "stdio-test-host/1.2.3"


async def test_forwarding_with_a_wrong_token_answers_each_call_with_the_services_code(tmp_path: Path) -> None:
    config, stderr = config_of(tmp_path), tmp_path / "stderr"
    token = tmp_path / "token"
    token.write_text("test-token-nobody-0123456789\n")
    harness = await start_service(config)
    try:
        async with host("--url", harness.url, "--token-file", str(token), stderr=stderr) as client:
            assert len((await client.list_tools()).tools) == 6  # the tools are listed: they need no token
            for name, args in (
                ("run", {"argv": ["true"]}),
                ("exec_command", {"cmd": "cat"}),
                ("write_stdin", {"session_id": "ex-0-0", "chars": "x"}),
            ):
                error = error_of(await client.call_tool(name, args))
                assert error["code"] == "AUTH.UNAUTHORIZED" and error["details"]["http_status"] == 401, (name, error)
    finally:
        await harness.stop()
    assert clean(stderr) == ""
    assert record_dicts(tmp_path / "evidence.jsonl") == []  # nothing reached the governed path


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--token-file", "{tmp}/missing"], "sandboxctl: INPUT.INVALID: --token-file: cannot read it"),
        ([], "sandboxctl: INPUT.INVALID: no token"),
    ],
)
async def test_forwarding_without_a_readable_token_fails_at_start_with_one_line(
    tmp_path: Path, args: list[str], said: str
) -> None:
    """No protocol at all: the host sees the server end (the SDK's connection closed) and its one line."""
    stderr = tmp_path / "stderr"
    argv = ["--url", "http://127.0.0.1:9", *(a.format(tmp=tmp_path) for a in args)]
    with pytest.raises(Exception) as failed:  # the SDK's connection error, in a group
        async with host(*argv, stderr=stderr):
            pass
    assert "Connection closed" in repr(failed.value)
    text = clean(stderr)
    assert text.startswith(said) and text.count("\n") == 1, text


# -- the host going away while a call waits ----------------------------------------------------------------------
async def test_the_host_closing_stdin_cancels_a_waiting_ask_on_the_record_and_exits_0(tmp_path: Path) -> None:
    """A host speaking JSON-RPC lines itself: initialize, a tools/call that asks, then stdin closed while the ask
    waits. The server withdraws the ask, records the execution's end as cancelled, and exits 0 quietly."""
    config, stderr = config_of(tmp_path), tmp_path / "stderr"
    params = stdio_parameters("--config", str(config))
    with stderr.open("wb") as errlog:
        proc = await asyncio.create_subprocess_exec(
            params.command, *params.args, env=params.env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=errlog,
        )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:

        async def send(message: dict[str, Any]) -> None:
            assert proc.stdin is not None
            proc.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
            await proc.stdin.drain()

        async def receive() -> dict[str, Any]:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert line, "the server closed stdout"
            message: dict[str, Any] = json.loads(line)
            return message

        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw-host", "version": "0"},
        }
        await send({"id": 1, "method": "initialize", "params": hello})
        assert (await receive())["result"]["serverInfo"]["name"] == "sandbox-orchestrator"
        await send({"method": "notifications/initialized"})
        call = {"name": "run", "arguments": {"argv": ["uname", "-a"]}, "_meta": {"progressToken": "p1"}}
        await send({"id": 2, "method": "tools/call", "params": call})
        note = await receive()
        assert note["method"] == "notifications/progress" and note["params"]["progressToken"] == "p1", note
        waiting = WAITING.match(note["params"]["message"])
        assert waiting is not None, note
        execution_id = waiting[1]
        proc.stdin.close()
        closed = time.monotonic()
        rest = await asyncio.wait_for(proc.stdout.read(), 30)
        rc = await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert rc == 0 and time.monotonic() - closed < 10
    # nothing but the call's answer, if the SDK still writes one to a closed connection: no result of a run
    assert all("result" not in json.loads(line) for line in rest.splitlines()), rest
    assert clean(stderr) == ""
    evidence = tmp_path / "evidence.jsonl"
    events = record_dicts(evidence, execution_id)
    assert [e["event"] for e in events] == [
        "request_received", "decision_made", "approval_requested", "cancel_requested", "run_failed"
    ]  # fmt: skip
    assert (events[-1]["status"], events[-1]["error_code"]) == ("cancelled", "EXECUTION.CANCELLED"), events[-1]
    assert events[0]["data"]["sanitized"]["context"]["mcp"]["client"] == "raw-host/0"
    verify(evidence)
    # the ask is gone from the queue: an approver finds nothing left to answer
    listing = subprocess.run(
        [SANDBOXCTL, "approvals", "list", "--config", str(config), "--json"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert json.loads(listing.stdout)["items"] == []
