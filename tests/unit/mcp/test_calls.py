"""A call never leaves what it started going on for nobody, whatever ends it (a wait that failed, progress that
could not be told), and what a client chose (its JSON-RPC id, its name, a session header) reaches the evidence
as a label: sanitized, never refused. With a controller in memory: no engine."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.mcp import McpContext
from orchestrator.domain.principal import Principal, Role
from orchestrator.domain.wire import ExecutionState, ExecutionView, SessionAnswer
from orchestrator.mcp import calls
from orchestrator.mcp.calls import CallContext
from orchestrator.mcp.controller import PendingAsk, ServiceController
from orchestrator.mcp.server import _call_id, _label
from orchestrator.mcp.tools import ExecCommandInput, RunInput


def _view(state: ExecutionState) -> ExecutionView:
    now = datetime.now(UTC)
    return ExecutionView(
        execution_id="ex-1",
        state=state,
        tenant="t",
        subject="s",
        tool="shell_exec",
        created_at=now,
        updated_at=now,
        request={},
    )


class Controller:
    """Submits into a running execution; each wait fails (a forwarding controller that did not answer)."""

    def __init__(self) -> None:
        self.cancelled: list[str] = []
        self.opened = asyncio.Event()
        self.open_cancelled = asyncio.Event()

    async def submit(self, raw: dict[str, Any], *, wait_s: float) -> ExecutionView:
        return _view(ExecutionState.RUNNING)

    async def wait(self, execution_id: str, *, wait_s: float) -> ExecutionView:
        raise SandboxUnavailable("the controller did not answer")

    async def cancel(self, execution_id: str) -> ExecutionView:
        self.cancelled.append(execution_id)
        return _view(ExecutionState.CANCELLED)

    async def open_session(self, raw: dict[str, Any]) -> SessionAnswer:
        self.opened.set()
        try:
            await asyncio.sleep(3600)  # an ask nobody answers
        except asyncio.CancelledError:
            self.open_cancelled.set()
            raise
        raise AssertionError("never answered")

    async def pending_ask(self, call_id: str) -> PendingAsk | None:
        return None


def _context(controller: Controller, progress: Any = None) -> CallContext:
    async def told(done: float, total: float | None, message: str) -> None:
        return None

    return CallContext(
        controller=controller,  # type: ignore[arg-type]
        mcp=McpContext(transport="stdio", session="stdio-1"),
        call_id="stdio-1:1",
        progress=progress or told,
    )


async def test_a_wait_that_failed_cancels_the_execution_it_waited_on() -> None:
    controller = Controller()
    answer = await calls.run(_context(controller), RunInput(argv=["sleep", "60"]))
    assert answer.is_error and answer.structured["error"]["code"] == "SANDBOX.UNAVAILABLE"
    assert controller.cancelled == ["ex-1"]  # not left running with nobody to read its result


async def test_a_session_open_whose_progress_failed_is_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calls, "ASK_TICK_S", 0.01)
    controller = Controller()

    async def broken(done: float, total: float | None, message: str) -> None:
        raise RuntimeError("the client's stream is gone")

    with pytest.raises(RuntimeError):
        await asyncio.wait_for(calls.exec_command(_context(controller, broken), ExecCommandInput(cmd="cat")), 5)
    assert controller.open_cancelled.is_set()  # the open (its ask, its session) is stopped, not left for nobody


def test_what_the_client_chose_is_a_printable_label() -> None:
    assert _label("ok\x1b[2J\x00\ud800é/1") == "ok?[2J???/1"
    assert len(_label("x" * 10_000)) == 256
    # a JSON-RPC id with a lone surrogate or a control character: recorded, sanitized (the request model would
    # refuse a lone surrogate as INPUT.INVALID: the call would fail on its id)
    assert _call_id("sess", "\ud800\x1b") == "sess:??"
    call_id = _call_id(None, 7)
    assert call_id is not None and call_id.startswith("mcp-") and call_id.endswith(":7")
    assert _call_id("s", None) is None
    McpContext(transport="streamable-http", session=_label("a\tb\x85"), client=_label("\udfff/1"))  # valid


async def test_pending_ask_is_only_ever_the_callers_own() -> None:
    """A call id is the client's word: an ask of the same call id by another subject of the tenant, or another
    tenant, is never told (its approval id, reason and deadline)."""

    def ask(tenant: str, subject: str, call_id: str) -> SimpleNamespace:
        context = {"tenant": tenant, "subject": subject, "call_id": call_id}
        return SimpleNamespace(
            id=f"ap-{tenant}-{subject}", tenant=tenant, subject=subject, sanitized={"context": context},
            policy_reason="not on the allowlist", deadline=0.0,
        )  # fmt: skip

    asks = [ask("team-a", "victim", "s:1"), ask("team-b", "agent-a", "s:1")]
    store = SimpleNamespace(approvals=SimpleNamespace(pending=lambda: asks))
    service: Any = SimpleNamespace(store=store)
    attacker = ServiceController(service, Principal("agent-a", Role.AGENT, frozenset({"team-a"})))
    assert await attacker.pending_ask("s:1") is None
    asks.append(ask("team-a", "agent-a", "s:1"))
    own = await attacker.pending_ask("s:1")
    assert own is not None and own.approval_id == "ap-team-a-agent-a"
