"""AsyncClient: the service's API over aiohttp."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Mapping
from typing import Any, Self

import aiohttp

from orchestrator.client import core
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.grants import GrantChargePage, GrantList, GrantRequest, GrantView
from orchestrator.domain.wire import (
    ApprovalAnswer,
    ApprovalList,
    EvidencePage,
    ExecutionPage,
    ExecutionView,
    Identity,
    OutputChunk,
    SessionAnswer,
    SubmitAnswer,
)


class AsyncClient:
    def __init__(self, base_url: str, token: str, *, timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        return self._session

    async def _send(self, call: core.Call, *, read_timeout: float | None = None) -> tuple[int, bytes]:
        try:
            async with self._http().request(
                call.method,
                self.base_url + call.target(),
                data=call.payload(),
                headers={**core.headers(self._token), "Content-Type": "application/json"},
                timeout=aiohttp.ClientTimeout(total=read_timeout or self._timeout),
            ) as response:
                return response.status, await response.read()
        except (aiohttp.ClientError, TimeoutError) as err:
            raise SandboxUnavailable(f"the service at {self.base_url} did not answer: {type(err).__name__}") from None

    async def submit(self, request: Any, *, wait: float | None = None) -> ExecutionView:
        status, body = await self._send(core.submit(request, wait), read_timeout=(wait or 0) + self._timeout)
        return core.decode(SubmitAnswer, status, body).execution

    async def get(self, execution_id: str, *, wait: float | None = None) -> ExecutionView:
        status, body = await self._send(core.get(execution_id, wait), read_timeout=(wait or 0) + self._timeout)
        return core.decode(ExecutionView, status, body)

    async def run(self, request: Any, *, timeout_s: float | None = None) -> ExecutionView:
        """Submit and wait for the end (approvals included). Refusals raise; a command that ran returns
        its execution (``.result``: exit code, output, side effects)."""
        deadline = None if timeout_s is None else asyncio.get_running_loop().time() + timeout_s
        view = await self.submit(request, wait=core.POLL_S)
        while not view.state.final:
            left = core.POLL_S if deadline is None else min(core.POLL_S, deadline - asyncio.get_running_loop().time())
            if left <= 0:
                return view
            view = await self.get(view.execution_id, wait=left)
        return view

    async def list(
        self, *, state: str | None = None, tenant: str | None = None, limit: int = 50, cursor: str | None = None
    ) -> ExecutionPage:
        return core.decode(ExecutionPage, *await self._send(core.listing(state, tenant, limit, cursor)))

    async def cancel(self, execution_id: str) -> ExecutionView:
        return core.decode(ExecutionView, *await self._send(core.cancel(execution_id)))

    async def approvals(self) -> ApprovalList:
        return core.decode(ApprovalList, *await self._send(core.approvals()))

    async def approve(self, approval_id: str, reason: str = "", *, for_session: bool = False) -> ApprovalAnswer:
        decision = "approve_for_session" if for_session else "approve"
        return core.decode(ApprovalAnswer, *await self._send(core.decide(approval_id, decision, reason)))

    async def deny(self, approval_id: str, reason: str = "") -> ApprovalAnswer:
        return core.decode(ApprovalAnswer, *await self._send(core.decide(approval_id, "deny", reason)))

    async def whoami(self) -> Identity:
        return core.decode(Identity, *await self._send(core.whoami()))

    # -- grants (admin; approver for its own tenants) ----------------------------------------------
    async def create_grant(self, request: GrantRequest | Mapping[str, object]) -> GrantView:
        """Issue a grant: the tenant's requests matching its conditions run without asking, until its expiry,
        within its budgets."""
        return core.decode(GrantView, *await self._send(core.create_grant(request)))

    async def list_grants(self, *, state: str | None = None, tenant: str | None = None) -> builtins.list[GrantView]:
        """The grants of the token's tenants (or ``tenant``'s), oldest first; ``state``: active, revoked,
        exhausted or expired."""
        return core.decode(GrantList, *await self._send(core.list_grants(state, tenant))).items

    async def get_grant(self, grant_id: str) -> GrantView:
        return core.decode(GrantView, *await self._send(core.get_grant(grant_id)))

    async def revoke_grant(self, grant_id: str, reason: str = "") -> GrantView:
        """No new run is covered from now on; revoking again keeps the first revocation."""
        return core.decode(GrantView, *await self._send(core.revoke_grant(grant_id, reason)))

    async def grant_charges(
        self, grant_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> GrantChargePage:
        """The grant's ledger, oldest first (``next_cursor`` for the next page)."""
        return core.decode(GrantChargePage, *await self._send(core.grant_charges(grant_id, limit, cursor)))

    # -- interactive sessions (exec_command / write_stdin) ----------------------------------------
    async def open_session(self, request: Any) -> SessionAnswer:
        """Open a session: ``request`` is an exec_command request (``cmd``, ``tty``, ``yield_time_ms``,
        ``max_output_bytes``, ``profile`` ...); answers with its ``session_id`` and first output."""
        call = core.open_session(request)
        return core.decode(SessionAnswer, *await self._send(call, read_timeout=core.yield_timeout(call, self._timeout)))

    async def write_stdin(
        self, session_id: str, chars: str = "", *, yield_time_ms: int = 1000, max_output_bytes: int = 65536
    ) -> SessionAnswer:
        """Send ``chars`` (empty: only poll); answers with the output produced within ``yield_time_ms``."""
        call = core.write_stdin(session_id, chars, yield_time_ms, max_output_bytes)
        return core.decode(SessionAnswer, *await self._send(call, read_timeout=core.yield_timeout(call, self._timeout)))

    async def resize_session(self, session_id: str, rows: int, cols: int) -> None:
        core.raise_for(*await self._send(core.resize(session_id, rows, cols)))

    async def close_session(self, session_id: str) -> SessionAnswer:
        return core.decode(SessionAnswer, *await self._send(core.close_session(session_id)))

    async def evidence(self, execution_id: str) -> EvidencePage:
        return core.decode(EvidencePage, *await self._send(core.evidence(execution_id)))

    async def stream(self, execution_id: str) -> AsyncIterator[OutputChunk | ExecutionView]:
        """Output chunks as the command produces them, then the finished execution. A dropped connection
        is resumed from the last event received (no chunk lost or repeated)."""
        parser = core.OutputReader()
        for _attempt in range(5):
            try:
                async with self._http().get(
                    self.base_url + core.output_path(execution_id),
                    headers=core.headers(self._token, sse=True, last_event_id=parser.last_id),
                    timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
                ) as response:
                    if response.status >= 400:
                        core.raise_for(response.status, await response.read())
                    async for raw in response.content:
                        item = parser.item(raw)
                        if item is not None:
                            yield item
                        if parser.done:
                            return
            except (aiohttp.ClientError, TimeoutError):
                await asyncio.sleep(0.2)
        raise SandboxUnavailable(f"the output stream of {execution_id} kept breaking off")
