"""What an MCP tool call runs on: the controller's executions and sessions, for one caller. In the controller
(``/mcp``) and in ``sandboxctl mcp`` without ``--url`` that is this process's ``Service``, acting for the
caller's principal exactly as the HTTP routes do; with ``--url`` it is a controller reached with the Python
client and a token. Both raise the same ``OrchestratorError``s, so a call is shaped once (``calls``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Protocol

from orchestrator.client.aio import AsyncClient
from orchestrator.domain.principal import Principal
from orchestrator.domain.wire import ExecutionView, SessionAnswer
from orchestrator.service.hosting import Service, evidence_of, open_session_for, write_stdin_for


class Controller(Protocol):
    """The calls a tool needs, for one caller (its tenant and subject are the caller's, never an argument)."""

    async def submit(self, raw: dict[str, Any], *, wait_s: float) -> ExecutionView: ...

    async def wait(self, execution_id: str, *, wait_s: float) -> ExecutionView: ...

    async def cancel(self, execution_id: str) -> ExecutionView: ...

    async def open_session(self, raw: dict[str, Any]) -> SessionAnswer: ...

    async def write_stdin(
        self, session_id: str, chars: str, *, yield_ms: int, max_bytes: int, context: dict[str, Any]
    ) -> SessionAnswer:
        """``context``: the call's ``mcp`` and ``call_id``, recorded with the write where the controller takes them."""
        ...

    async def pending_ask(self, call_id: str) -> PendingAsk | None:
        """The ask a call's request waits on (a session's open has no execution view to poll), when known."""
        ...

    async def evidence(self, execution_id: str) -> list[dict[str, Any]]:
        """The evidence records of one of the caller's executions, oldest first (NotFound otherwise)."""
        ...


@dataclass(frozen=True, slots=True)
class PendingAsk:
    approval_id: str
    policy_reason: str
    deadline_unix: float


class ServiceController:
    """This process's service, for ``principal`` (the token's on ``/mcp``; the local user's over stdio)."""

    def __init__(self, service: Service, principal: Principal) -> None:
        self.service = service
        self.principal = principal

    async def submit(self, raw: dict[str, Any], *, wait_s: float) -> ExecutionView:
        return await self.service.manager.submit(raw, self.principal, wait_s=wait_s)

    async def wait(self, execution_id: str, *, wait_s: float) -> ExecutionView:
        return await self.service.manager.wait(execution_id, self.principal, wait_s)

    async def cancel(self, execution_id: str) -> ExecutionView:
        return await self.service.manager.cancel(execution_id, self.principal)

    async def open_session(self, raw: dict[str, Any]) -> SessionAnswer:
        return (await open_session_for(self.service, raw, self.principal)).to_wire()

    async def write_stdin(
        self, session_id: str, chars: str, *, yield_ms: int, max_bytes: int, context: dict[str, Any]
    ) -> SessionAnswer:
        reply = await write_stdin_for(
            self.service,
            session_id,
            self.principal,
            chars=chars,
            yield_ms=yield_ms,
            max_bytes=max_bytes,
            context=context,
        )
        return reply.to_wire()

    async def pending_ask(self, call_id: str) -> PendingAsk | None:
        # the caller's own ask only: a call id is the client's word (its JSON-RPC id), so another caller's ask of
        # the same id, in this tenant or another, is never told
        for ask in await asyncio.to_thread(self.service.store.approvals.pending):
            context = ask.sanitized.get("context")
            if (
                isinstance(context, dict)
                and context.get("call_id") == call_id
                and self.principal.sees(ask.tenant)
                and ask.subject == self.principal.subject
            ):
                return PendingAsk(ask.id, ask.policy_reason, ask.deadline)
        return None

    async def evidence(self, execution_id: str) -> list[dict[str, Any]]:
        return await evidence_of(self.service, execution_id, self.principal)


class RemoteController:
    """A controller over HTTP (``sandboxctl mcp --url``): the token decides the tenant and subject there."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def submit(self, raw: dict[str, Any], *, wait_s: float) -> ExecutionView:
        return await self.client.submit(raw, wait=wait_s)

    async def wait(self, execution_id: str, *, wait_s: float) -> ExecutionView:
        return await self.client.get(execution_id, wait=wait_s)

    async def cancel(self, execution_id: str) -> ExecutionView:
        return await self.client.cancel(execution_id)

    async def open_session(self, raw: dict[str, Any]) -> SessionAnswer:
        return await self.client.open_session({**raw, "tool": "exec_command"})

    async def write_stdin(
        self, session_id: str, chars: str, *, yield_ms: int, max_bytes: int, context: dict[str, Any]
    ) -> SessionAnswer:
        # the API's write_stdin takes characters only: the controller records the write without the MCP context
        return await self.client.write_stdin(session_id, chars, yield_time_ms=yield_ms, max_output_bytes=max_bytes)

    async def evidence(self, execution_id: str) -> list[dict[str, Any]]:
        return (await self.client.evidence(execution_id)).records

    async def pending_ask(self, call_id: str) -> PendingAsk | None:
        return None  # an agent's token may not list asks: the caller is told it waits, not for how long
