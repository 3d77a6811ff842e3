"""The official SDK's client over Streamable HTTP against a running service's /mcp, on the real engine, judged as
a model and its host would judge it: every tool's result, a REPL kept across calls, asks that wait (with
progress), are approved, denied or time out, a restricted run and its escalation retry, a call the client
cancels, who may connect and call, arguments the server refuses before anything runs, fifty calls at once on one
MCP session, and each call on the record as an ordinary execution whose evidence verifies.

``auto`` speaks the 2026-07-28 envelope (stateless: no Mcp-Session-Id), ``legacy`` the initialize handshake of
2025-11-25 (an MCP session); the tests run both where the two differ on the wire and it is cheap."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from orchestrator.domain.wire import ExecutionState, ExecutionView, PendingApprovalView
from orchestrator.pipeline.this_process import owner_label
from tests.support.engine import engine_or_skip, list_managed, managed_sandboxes
from tests.support.mcp import SANDBOXCTL, Mode, http_client, text_of
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

MODES: list[Mode] = ["auto", "legacy"]
CLIENT = mcp_types.Implementation(name="mcp-http-test", version="1.2")
LEGACY_VERSION = "2025-11-25"
#: the policy of write_config, with the file tools allowed (their paths are the workspace's) and `touch` allowed:
#: a touch of the read-only root is the restricted run (tests/integration/test_egress.py writes there too)
SAFETY: dict[str, Any] = {
    "mode": "ask",
    "allowlist": ["echo", "true", "printf", "sleep", "cat", "ls"],
    "approval_timeout_s": 30,
    "rules": [
        {"name": "mcp-files", "tool": ["files"], "action": "allow"},
        {"name": "touch", "argv_prefix": "touch", "action": "allow"},
    ],
}
WAITING = re.compile(r"^waiting for approval (?P<id>ex-\S+) \((?P<why>.+), (?P<left>\d+) s left\)$")


# --- the service, the client and what they answer --------------------------------------------------------------
@pytest.fixture(scope="module")
def engine() -> Any:
    """Skips without an engine; at the end, no sandbox this process launched may remain."""
    engine_or_skip()
    yield
    left = [s for s in list_managed() if s.owner == owner_label()]
    assert not left, f"sandboxes of this test run left on the engine: {[s.name for s in left]}"


def config(tmp_path: Path, *, approval_timeout_s: float = 30, **overrides: Any) -> Path:
    return write_config(tmp_path, safety={**SAFETY, "approval_timeout_s": approval_timeout_s}, **overrides)


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, **overrides: Any) -> AsyncIterator[Harness]:
    harness = await start_service(config(tmp_path, **overrides))
    try:
        yield harness
    finally:
        await harness.stop()


@pytest.fixture
async def harness(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    async with serving(tmp_path) as h:
        yield h


def client(harness: Harness, mode: Mode, subject: str = "agent-a") -> contextlib.AbstractAsyncContextManager[Client]:
    """The SDK's client (tests/support/mcp.py) for ``subject``'s token, naming itself CLIENT."""
    return http_client(harness.url, token_of(subject), mode=mode, client_info=CLIENT)


@contextlib.asynccontextmanager
async def watched_client(
    url: str, token: str | None, mode: Mode, failures: list[tuple[int, dict[str, Any]]]
) -> AsyncIterator[Client]:
    """The SDK's client, its HTTP answers of 400 and above kept in ``failures`` (status, JSON body): the SDK
    itself tells its caller only that the server answered with an error."""

    async def keep(response: httpx2.Response) -> None:
        if response.status_code >= 400:
            await response.aread()
            failures.append((response.status_code, json.loads(response.content)))

    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    http = create_mcp_http_client(headers=headers)
    http.event_hooks["response"].append(keep)
    transport = streamable_http_client(f"{url}/mcp", http_client=http)
    async with http, Client(transport, mode=mode, client_info=CLIENT) as connected:
        yield connected


def structured(result: mcp_types.CallToolResult) -> dict[str, Any]:
    content = result.structured_content
    assert isinstance(content, dict), text_of(result)
    return dict(content)


def error_code(result: mcp_types.CallToolResult) -> str:
    assert result.is_error is True, text_of(result)
    code = structured(result)["error"]["code"]
    assert isinstance(code, str)
    return code


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions an (anyio) exception group holds, however deep."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


async def asked(harness: Harness, approver: str = "approver-a", *, count: int = 1) -> list[PendingApprovalView]:
    """The asks pending for ``approver`` once there are ``count`` of them."""
    client_ = harness.client(approver)
    for _ in range(400):
        items = (await client_.approvals()).items
        if len(items) >= count:
            return items
        await asyncio.sleep(0.05)
    raise AssertionError(f"no {count} asks pending for {approver}")


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0.05)


def mcp_of(view: ExecutionView) -> dict[str, Any]:
    context = view.request["context"]
    assert isinstance(context, dict)
    mcp = context["mcp"]
    assert isinstance(mcp, dict)
    return mcp


async def verify_evidence(harness: Harness) -> None:
    """`sandboxctl evidence verify` on the service's evidence file: every record, the chain, every end."""
    await harness.service.orchestrator.evidence.flush()
    path = harness.service.orchestrator.evidence.path
    proc = await asyncio.create_subprocess_exec(
        SANDBOXCTL, "evidence", "verify", "--path", str(path), "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate()
    assert proc.returncode == 0, (out, err)
    report = json.loads(out)
    assert report["complete"] is True, report


# --- 1. every tool --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_every_tool_answers_as_a_model_reads_it_and_each_call_is_an_execution_on_the_record(
    harness: Harness, mode: Mode
) -> None:
    results: dict[str, mcp_types.CallToolResult] = {}
    async with client(harness, mode) as mcp:
        # run, argv: a non-zero exit is the command's answer, not an error; stdout and stderr apart
        ran = results["run"] = await mcp.call_tool("run", {"argv": ["ls", ".", "nope"]})
        got = structured(ran)
        assert ran.is_error is False, text_of(ran)
        assert got["exit_code"] == 2 and got["stdout"] == ".:\n"
        assert got["stderr"] == "ls: cannot access 'nope': No such file or directory\n"
        assert got["side_effects"]["complete"] is True and got["side_effects"]["created"] == 0
        assert "exit code 2" in text_of(ran) and "stderr:\nls: cannot access 'nope'" in text_of(ran)
        # run, command: a shell string (bash -c)
        shell = await mcp.call_tool("run", {"command": "echo $((6*7))"})
        assert shell.is_error is False and structured(shell)["stdout"] == "42\n", text_of(shell)

        wrote = results["write_file"] = await mcp.call_tool(
            "write_file", {"path": "src/notes.txt", "content": "one\ntwo\nthree\n"}
        )
        assert wrote.is_error is False and structured(wrote)["exit_code"] == 0, text_of(wrote)
        effects = structured(wrote)["side_effects"]
        assert (effects["created"], effects["bytes_written"]) == (2, 14)  # the directory and the file

        read = results["read_file"] = await mcp.call_tool("read_file", {"path": "src/notes.txt"})
        assert read.is_error is False and text_of(read) == "one\ntwo\nthree\n"  # the content alone

        patch = "--- a/src/notes.txt\n+++ b/src/notes.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n"
        patched = results["apply_patch"] = await mcp.call_tool("apply_patch", {"patch": patch})
        assert patched.is_error is False and structured(patched)["exit_code"] == 0, text_of(patched)
        assert structured(patched)["side_effects"]["modified"] == 1
        assert text_of(await mcp.call_tool("read_file", {"path": "src/notes.txt"})) == "one\n2\nthree\n"

        # the same patch again no longer applies: the tool failed (git's words), and nothing changed
        again = await mcp.call_tool("apply_patch", {"patch": patch})
        assert again.is_error is True, text_of(again)
        assert structured(again)["exit_code"] == 1 and "patch does not apply" in structured(again)["stderr"]
        assert structured(again)["side_effects"]["modified"] == 0

        missing = await mcp.call_tool("read_file", {"path": "no/such.txt"})
        assert missing.is_error is True and structured(missing)["exit_code"] == 1
        assert "No such file or directory" in structured(missing)["stderr"]
        # a file where a directory is: the writer fails, and the tool with it
        onto_dir = await mcp.call_tool("write_file", {"path": "src", "content": "x"})
        assert onto_dir.is_error is True and structured(onto_dir)["exit_code"] != 0, text_of(onto_dir)
        assert structured(onto_dir)["side_effects"]["modified"] == 0

    # each call an ordinary execution of this tenant and subject, its request carrying the MCP context
    admin = harness.client("admin")
    sessions = set()
    for tool, result in results.items():
        view = await admin.get(structured(result)["execution_id"])
        ended = ExecutionState.FAILED if tool == "run" else ExecutionState.SUCCEEDED  # ls exited 2
        assert view.state is ended and (view.tenant, view.subject) == ("team-a", "agent-a")
        context = mcp_of(view)
        assert {k: v for k, v in context.items() if k != "session"} == {
            "transport": "streamable-http",
            "client": "mcp-http-test/1.2",
            "tool": tool,
        }
        sessions.add(context.get("session"))
        call_id = view.request["context"]["call_id"]
        assert isinstance(call_id, str) and call_id.startswith(f"{context.get('session') or 'mcp-'}")
    if mode == "legacy":  # one MCP session (its Mcp-Session-Id) for every call of the client
        [session] = sessions
        assert isinstance(session, str) and re.fullmatch(r"[0-9a-f]{32}", session)
    else:  # the 2026-07-28 envelope has no session: none is claimed
        assert sessions == {None}
    # the evidence says so too (the request as received, its context with it), and the whole file verifies
    for tool, result in results.items():
        ident = structured(result)["execution_id"]
        received = (await harness.client("agent-a").evidence(ident)).records[0]
        assert received["event"] == "request_received"
        context = received["data"]["sanitized"]["context"]
        assert context["mcp"] == mcp_of(await admin.get(ident)) and context["mcp"]["tool"] == tool
        assert received["call_id"] == context["call_id"]
    await verify_evidence(harness)


# --- 2. a session -----------------------------------------------------------------------------------------------
async def test_a_repl_keeps_its_state_across_calls_and_ends_with_its_exit_code(harness: Harness) -> None:
    """python3 is not on the allowlist (and would be asked about if it were: an interpreter reading its code from
    its input is what the gate cannot see), so the open waits, with progress, until the approver says yes; then
    every write goes to the same interpreter, and its input is not asked about again."""
    notes: list[str] = []

    async def seen(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    async with client(harness, "auto") as mcp:
        opening = asyncio.create_task(
            mcp.call_tool("exec_command", {"cmd": "python3 -i -q", "yield_time_ms": 500}, progress_callback=seen)
        )
        [ask] = await asked(harness)
        assert ask.request["command"] == "python3 -i -q" and ask.policy_reason == "no rule or allowlist entry matched"

        async def told() -> bool:
            return bool(notes)

        await until(told, "a progress notification while the open waits")
        await harness.client("approver-a").approve(ask.execution_id, "a REPL for the agent")
        opened = await asyncio.wait_for(opening, 60)
        assert opened.is_error is False, text_of(opened)
        sid = structured(opened)["session_id"]
        assert structured(opened)["running"] is True and f"Process running with session ID {sid}" in text_of(opened)
        waiting = WAITING.match(notes[0])
        assert waiting is not None and waiting["id"] == ask.approval_id, notes

        set_x = await mcp.call_tool("write_stdin", {"session_id": sid, "chars": "x = 6 * 7\n", "yield_time_ms": 300})
        assert set_x.is_error is False and structured(set_x)["running"] is True
        # a later call, the same interpreter: x is still there
        printed = ""
        for chars in ("print(x, 'kept')\n", "", "", "", ""):
            answer = await mcp.call_tool("write_stdin", {"session_id": sid, "chars": chars, "yield_time_ms": 1000})
            printed += structured(answer)["stdout"]
            if "42 kept" in printed:
                break
        assert "42 kept\n" in printed
        assert (await harness.client("approver-a").approvals()).items == []  # the input was not asked about
        polled = await mcp.call_tool("write_stdin", {"session_id": sid, "chars": "", "yield_time_ms": 100})
        assert polled.is_error is False and structured(polled)["running"] is True
        assert structured(polled)["stdout"] == ""  # nothing new: "" only polls

        # another tenant's token never finds it
        async with client(harness, "auto", "agent-b") as other:
            stolen = await other.call_tool("write_stdin", {"session_id": sid, "chars": "print('hi')\n"})
        assert error_code(stolen) == "SESSION.NOT_FOUND"

        ended = await mcp.call_tool("write_stdin", {"session_id": sid, "chars": "exit(3)\n", "yield_time_ms": 5000})
        for _ in range(10):
            if structured(ended)["running"] is False:
                break
            ended = await mcp.call_tool("write_stdin", {"session_id": sid, "chars": "", "yield_time_ms": 1000})
        got = structured(ended)
        assert (got["running"], got["exit_code"]) == (False, 3), got
        assert "Process exited with code 3" in text_of(ended)
    view = await harness.client("admin").get(ask.execution_id)
    assert mcp_of(view)["tool"] == "exec_command" and view.approval is not None
    assert view.approval.approver == "api:approver-a"


# --- 3. an ask approved while the call waits ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_an_ask_approved_while_the_call_waits_is_reported_as_progress_then_runs(
    harness: Harness, mode: Mode
) -> None:
    notes: list[tuple[float, float, str]] = []
    started = time.monotonic()

    async def seen(progress: float, total: float | None, message: str | None) -> None:
        notes.append((time.monotonic() - started, progress, message or ""))

    async with client(harness, mode) as mcp:
        call = asyncio.create_task(mcp.call_tool("run", {"command": "uname -s"}, progress_callback=seen))
        [ask] = await asked(harness)
        await asyncio.sleep(max(0.0, 3.0 - (time.monotonic() - started)))  # the first progress comes after ~2 s
        assert not call.done()
        approved_at = time.monotonic() - started
        await harness.client("approver-a").approve(ask.execution_id, "fine")
        result = await asyncio.wait_for(call, 60)
    assert result.is_error is False and structured(result)["stdout"] == "Linux\n", text_of(result)
    assert structured(result)["execution_id"] == ask.execution_id
    before = [(at, message) for at, _, message in notes if at < approved_at]
    assert before, notes
    for _, message in before:
        waiting = WAITING.match(message)
        assert waiting is not None, message
        assert waiting["id"] == ask.approval_id and "no rule or allowlist entry matched" in waiting["why"]
        assert 20 <= int(waiting["left"]) <= 30
    assert [done for _, done, _ in notes] == sorted(done for _, done, _ in notes)  # progress only grows
    records = (await harness.client("agent-a").evidence(ask.execution_id)).records
    [decided] = [r for r in records if r["event"] == "approval_decided"]
    assert decided["approver"] == "api:approver-a" and decided["reason"] == "fine"


# --- 4. refusals are results --------------------------------------------------------------------------------------
async def test_a_timeout_a_denial_and_a_policy_denial_are_tool_errors_with_their_codes(
    tmp_path: Path, engine: Any
) -> None:
    # 3 s: time enough to deny one ask (listed, then denied) before it times out, on a loaded machine too
    async with serving(tmp_path, approval_timeout_s=3) as harness, client(harness, "legacy") as mcp:
        waits = asyncio.create_task(mcp.call_tool("run", {"command": "uname -s"}))
        denied = asyncio.create_task(mcp.call_tool("run", {"command": "uname -r"}))
        pending = await asked(harness, count=2)
        [to_deny] = [p for p in pending if p.request["command"] == "uname -r"]
        await harness.client("approver-a").deny(to_deny.execution_id, "not today")
        refused = await mcp.call_tool("run", {"command": "sudo id"})
        timed_out, denial = await asyncio.wait_for(asyncio.gather(waits, denied), 30)

        assert error_code(timed_out) == "APPROVAL.TIMEOUT" and "no answer within 3s" in text_of(timed_out)
        assert error_code(denial) == "APPROVAL.DENIED" and structured(denial)["execution_id"] == to_deny.execution_id
        assert error_code(refused) == "POLICY.DENIED" and "denylisted: 'sudo'" in text_of(refused)
        admin = harness.client("admin")
        for result, code in ((timed_out, "APPROVAL.TIMEOUT"), (denial, "APPROVAL.DENIED"), (refused, "POLICY.DENIED")):
            ident = structured(result).get("execution_id") or structured(result)["error"]["details"]["execution_id"]
            view = await admin.get(ident)
            assert view.state is ExecutionState.REFUSED and view.error is not None and view.error.code == code
            assert view.result is None and mcp_of(view)["tool"] == "run"  # never ran
        await verify_evidence(harness)


# --- 5. a restricted run, retried with its escalation -----------------------------------------------------------
async def test_a_restricted_run_names_its_escalation_and_the_retry_is_asked_and_linked(harness: Harness) -> None:
    touch = {"argv": ["touch", "/home/sandbox/note"]}
    async with client(harness, "legacy") as mcp:
        first = await mcp.call_tool("run", touch)
        assert error_code(first) == "SANDBOX.RESTRICTED"
        got = structured(first)
        assert got["exit_code"] == 1 and "Read-only file system" in got["stderr"]
        details = got["error"]["details"]
        assert details["escalation"] == {"sandbox_permissions": {"writable_root": True}}
        assert details["retry_of"] == got["execution_id"]
        assert details["denied"] == [{"kind": "read_only_root", "source": "output"}]

        # the call the tool description tells the model to make: asked like any request, never automatic
        retry = {**touch, **details["escalation"], "retry_of": details["retry_of"]}
        call = asyncio.create_task(mcp.call_tool("run", retry))
        [ask] = await asked(harness)
        # the rule that allowed the first attempt does not cover the escalation: a person is asked
        assert ask.policy_reason == "matched rule:2:touch; but escalation asked: writable_root"
        assert ask.request["sandbox_permissions"]["writable_root"] is True
        await harness.client("approver-a").approve(ask.execution_id, "let it write there")
        second = await asyncio.wait_for(call, 60)
    assert second.is_error is False and structured(second)["exit_code"] == 0, text_of(second)
    records = (await harness.client("agent-a").evidence(ask.execution_id)).records
    [received] = [r for r in records if r["event"] == "request_received"]
    assert received["data"]["retry_of"] == {
        "execution_id": got["execution_id"],
        "known": True,
        "denied": [{"kind": "read_only_root", "source": "output"}],
    }


# --- 6. a call the client cancels ------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "waits_on"), [("auto", "run"), ("legacy", "ask")])
async def test_a_call_the_client_cancels_ends_its_execution_cancelled_on_the_record(
    harness: Harness, mode: Mode, waits_on: str
) -> None:
    """The host gives up a call (its task cancelled, as when its user stops a turn). run: `sleep 30`, cancelled as
    soon as its sandbox runs, as soon as it was decided; ask: cancelled
    after the first progress notification, while the call polls. Either way the execution ends cancelled, on
    the record, and nothing is left of it: no sandbox, no pending ask."""
    admin = harness.client("admin")
    request = {"argv": ["sleep", "30"]} if waits_on == "run" else {"command": "uname -n"}
    notes: list[str] = []

    async def seen(progress: float, total: float | None, message: str | None) -> None:
        notes.append(message or "")

    async with client(harness, mode) as mcp:
        call = asyncio.create_task(mcp.call_tool("run", request, progress_callback=seen))
        execution: list[str] = []

        async def under_way() -> bool:
            if waits_on == "ask":
                execution[:] = [p.execution_id for p in (await harness.client("approver-a").approvals()).items]
                return bool(execution and notes)
            execution[:] = [v.execution_id for v in (await admin.list(state="running")).items]
            return any(s.execution_id in execution for s in await managed_sandboxes())

        await until(under_way, f"the call's {waits_on} under way")
        [ident] = execution
        assert not call.done()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call

        async def cancelled() -> bool:
            return (await admin.get(ident)).state is ExecutionState.CANCELLED

        await until(cancelled, "the execution cancelled")
        # the MCP connection outlives the call it gave up
        after = await mcp.call_tool("run", {"argv": ["echo", "after"]})
        assert structured(after)["stdout"] == "after\n"
    view = await admin.get(ident)
    assert view.cancelled_by == "api:agent-a" and mcp_of(view)["tool"] == "run"
    records = (await admin.evidence(ident)).records
    events = [r["event"] for r in records]
    assert "cancel_requested" in events and records[-1]["status"] == "cancelled", events
    if waits_on == "run":
        assert "container_started" in events and records[-1]["event"] == "run_failed"
    else:
        assert "container_started" not in events
        assert (await harness.client("approver-a").approvals()).items == []  # the ask is gone
    assert not [s.name for s in await managed_sandboxes() if s.execution_id == ident]  # no sandbox left
    await verify_evidence(harness)


# --- 7. who may connect and call --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_without_a_valid_token_the_client_cannot_connect(harness: Harness, mode: Mode) -> None:
    for token in (token_of("nobody"), None):
        failures: list[tuple[int, dict[str, Any]]] = []
        with pytest.raises(ExceptionGroup) as refused:  # the SDK's task groups raise what failed in them
            async with watched_client(harness.url, token, mode, failures):
                raise AssertionError("connected without a valid token")
        # the SDK says only that the server answered with an error; the answer itself is our 401
        assert [type(e) for e in leaves(refused.value)] == [MCPError], refused.value
        message = "unknown token" if token else "send 'Authorization: Bearer <token>'"
        unauthorized = (401, {"error": {"code": "AUTH.UNAUTHORIZED", "message": message, "retryable": False}})
        # auto: server/discover refused, then the initialize it falls back on; legacy: the initialize
        assert failures == [unauthorized] * (2 if mode == "auto" else 1)
    assert (await harness.client("admin").list()).items == []


async def test_an_approver_cannot_run_and_an_mcp_session_is_its_tokens_alone(harness: Harness) -> None:
    async with client(harness, "legacy", "approver-a") as mcp:
        run = await mcp.call_tool("run", {"argv": ["true"]})
        opened = await mcp.call_tool("exec_command", {"cmd": "cat"})
    assert error_code(run) == "AUTH.FORBIDDEN" and "approver token cannot submit" in text_of(run)
    assert error_code(opened) == "AUTH.FORBIDDEN"
    assert (await harness.client("admin").list()).items == []

    async with client(harness, "legacy") as mcp:
        ran = await mcp.call_tool("run", {"argv": ["true"]})
        session = mcp_of(await harness.client("admin").get(structured(ran)["execution_id"]))["session"]

        async def list_tools(subject: str, session: str = session) -> tuple[int, str]:
            """tools/list in the MCP session, as a raw request: the SDK's client keeps its session id to itself."""
            headers = {
                "Authorization": f"Bearer {token_of(subject)}",
                "Mcp-Session-Id": session,
                "MCP-Protocol-Version": LEGACY_VERSION,
                "Accept": "application/json, text/event-stream",
            }
            body = {"jsonrpc": "2.0", "id": 99, "method": "tools/list"}
            async with (
                aiohttp.ClientSession() as http,
                http.post(f"{harness.url}/mcp", json=body, headers=headers) as response,
            ):
                return response.status, await response.text()

        assert (await list_tools("agent-a"))[0] == 200  # the session is there, for its own token
        status, text = await list_tools("agent-b")
        assert status == 404 and '"run"' not in text, text  # another token's request for it: not found,
        assert (status, text) == await list_tools("agent-b", "0" * 32)  # as one that does not exist
        # and the owner's session is still whole
        assert (await mcp.call_tool("run", {"argv": ["echo", "mine"]})).is_error is False


# --- 8. arguments refused before anything runs ----------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
async def test_oversized_and_malformed_arguments_are_protocol_errors_and_nothing_runs(
    tmp_path: Path, engine: Any, mode: Mode
) -> None:
    limits = {"limits": {"max_body_bytes": 64 * 1024}}
    async with serving(tmp_path, service=limits) as harness:
        failures: list[tuple[int, dict[str, Any]]] = []
        async with watched_client(harness.url, token_of("agent-a"), mode, failures) as mcp:
            with pytest.raises(MCPError):
                await mcp.call_tool("write_file", {"path": "big.txt", "content": "x" * (100 * 1024)})
            # refused by the API's body limit, in our shape, before the SDK saw a byte of it
            assert [(status, body["error"]["code"]) for status, body in failures] == [(413, "REQUEST.TOO_LARGE")]
            assert failures.pop()[1]["error"]["details"]["limit"] == 64 * 1024

            refused: list[MCPError] = []
            for tool, arguments in (
                ("run", {"argv": ["true"], "command": "true"}),  # both
                ("run", {"argv": ["true"], "shell": True}),  # a property the schema does not have
                ("run", {}),  # neither
                ("exec_command", {"cmd": "cat", "yield_time_ms": 300_001}),  # over the maximum
                ("write_stdin", {"session_id": "s", "chars": 1}),  # not a string
                ("nope", {}),  # no such tool
            ):
                with pytest.raises(MCPError) as error:
                    await mcp.call_tool(tool, arguments)
                refused.append(error.value)
            assert [e.code for e in refused] == [mcp_types.INVALID_PARAMS] * 6, [str(e) for e in refused]
            assert "give exactly one of argv or command" in refused[0].message
            assert "shell: Extra inputs are not permitted" in refused[1].message
            assert "yield_time_ms: Input should be less than or equal to 300000" in refused[3].message
            # the connection is fine after them, and the calls that were refused never ran
            ok = await mcp.call_tool("run", {"argv": ["echo", "ok"]})
        assert structured(ok)["stdout"] == "ok\n"
        assert [v.execution_id for v in (await harness.client("admin").list()).items] == [
            structured(ok)["execution_id"]
        ]
        # the 2026-07-28 envelope answers a JSON-RPC error with HTTP 400 (the handshake era in its 200 stream)
        assert [(status, body["error"]["code"]) for status, body in failures] == (
            [(400, mcp_types.INVALID_PARAMS)] * 6 if mode == "auto" else []
        )


# --- 9. many calls at once on one MCP session ----------------------------------------------------------------
async def test_fifty_concurrent_calls_on_one_session_each_get_their_own_answer(harness: Harness) -> None:
    async with client(harness, "legacy") as mcp:
        results = await asyncio.gather(*(mcp.call_tool("run", {"argv": ["echo", f"call {n}"]}) for n in range(50)))
    for n, result in enumerate(results):
        assert result.is_error is False and structured(result)["stdout"] == f"call {n}\n", text_of(result)
    ids = {structured(r)["execution_id"] for r in results}
    assert len(ids) == 50
    views = (await harness.client("admin").list(limit=100)).items
    assert {v.execution_id for v in views} == ids
    assert all(v.state is ExecutionState.SUCCEEDED for v in views)
    [session] = {mcp_of(v)["session"] for v in views}  # one MCP session, fifty calls, fifty call ids
    assert len({v.request["context"]["call_id"] for v in views}) == 50
    assert all(v.request["context"]["call_id"].startswith(f"{session}:") for v in views)
    await verify_evidence(harness)
