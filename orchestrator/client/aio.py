"""AsyncClient: the service's API over aiohttp."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Mapping
from typing import Any, Self

import aiohttp

from orchestrator.client import core
from orchestrator.domain.ci_jobs import CiJobRequest, CiJobView, CiStepRequest
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.grants import GrantChargePage, GrantList, GrantRequest, GrantView
from orchestrator.domain.profile_usage import (
    ProfileDistribution,
    ProfileList,
    Recommendation,
    UsageReport,
    WhatIfProposal,
    WhatIfReport,
)
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
    """The service's API on asyncio (aiohttp), one session reused: the same calls and answers as
    :class:`orchestrator.client.Client`. Close it (``async with``, or ``await close()``)."""

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
        """Close the HTTP connections (``async with`` does it)."""
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
        """Send ``request`` (``POST /v1/executions``, with ``?wait=`` when ``wait`` is given): a request model or
        its fields as a mapping (``tool``, ``command`` or ``argv``, ``profile``, ``env``, ``timeout_ms`` ...). The
        tenant and subject are an agent token's own (an admin's token may name them).

        Returns the execution once it is decided: ``pending_approval`` (an ask waits for an approver) or
        ``running``, or the finished one when it ends within ``wait`` seconds (the read timeout grows by
        ``wait``). A command that ran and failed is no exception: see ``.result`` and ``.error``.

        Raises the library's exceptions for refusals: ``PolicyDenied`` (403), ``InputInvalid`` (400, the
        fields named), ``Unauthorized``, ``Forbidden`` (an approver's token, another tenant), ``RequestTooLarge``,
        ``RateLimited``; ``SandboxUnavailable`` when the service does not answer.
        """
        status, body = await self._send(core.submit(request, wait), read_timeout=(wait or 0) + self._timeout)
        return core.decode(SubmitAnswer, status, body).execution

    async def get(self, execution_id: str, *, wait: float | None = None) -> ExecutionView:
        """One execution of the token's tenants (``GET /v1/executions/{id}``); with ``wait``, answered when it
        ends or after that many seconds. Raises ``NotFound`` (no such execution, or another tenant's)."""
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
        """Executions of the token's tenants, newest first (``GET /v1/executions``), ``limit`` at a time;
        ``next_cursor`` fetches the next page; ``state`` and ``tenant`` narrow it."""
        return core.decode(ExecutionPage, *await self._send(core.listing(state, tenant, limit, cursor)))

    async def cancel(self, execution_id: str) -> ExecutionView:
        """Cancel a run (``DELETE /v1/executions/{id}``): its sandbox is killed and removed; returns the
        execution. Raises ``ExecutionNotRunning`` (409) once it ended, ``NotFound``."""
        return core.decode(ExecutionView, *await self._send(core.cancel(execution_id)))

    async def approvals(self) -> ApprovalList:
        """The pending asks of the token's tenants (``GET /v1/approvals``), oldest first: each with its
        sanitized request, risk, the policy's reason, the rule that asked, the profile and the seconds left.

        Raises ``Forbidden`` for an agent's token, ``Unauthorized``; ``SandboxUnavailable`` when the service
        does not answer.
        """
        return core.decode(ApprovalList, *await self._send(core.approvals()))

    async def approve(self, approval_id: str, reason: str = "", *, for_session: bool = False) -> ApprovalAnswer:
        """Approve one ask (``POST /v1/approvals/{id}`` with ``approve``, or ``approve_for_session`` when
        ``for_session``: the same ask in that agent session is not asked again); ``reason`` is recorded in the
        evidence, the approver is the token's subject.

        Returns what the store kept: this approval. Raises ``ApprovalNotPending`` (409) when the ask had
        already timed out, been decided or withdrawn (its message says what the store kept), ``NotFound``
        for no such ask (or another tenant's: never told apart), ``Forbidden`` for an agent's token or an
        ask of one's own (unless the service allows self-approval), ``InputInvalid`` for a reason past 1000
        characters; ``SandboxUnavailable`` when the service does not answer.
        """
        decision = "approve_for_session" if for_session else "approve"
        return core.decode(ApprovalAnswer, *await self._send(core.decide(approval_id, decision, reason)))

    async def deny(self, approval_id: str, reason: str = "") -> ApprovalAnswer:
        """Deny one ask (``POST /v1/approvals/{id}`` with ``deny``): its run ends ``APPROVAL.DENIED``. Returns
        and raises as :meth:`approve` does."""
        return core.decode(ApprovalAnswer, *await self._send(core.decide(approval_id, "deny", reason)))

    async def whoami(self) -> Identity:
        """The token's subject, role and tenants (``GET /v1/whoami``); ``Unauthorized`` for a token the service
        does not know."""
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
        """One grant (``GET /v1/grants/{id}``); ``NotFound`` for no such grant or another tenant's."""
        return core.decode(GrantView, *await self._send(core.get_grant(grant_id)))

    async def revoke_grant(self, grant_id: str, reason: str = "") -> GrantView:
        """No new run is covered from now on; revoking again keeps the first revocation."""
        return core.decode(GrantView, *await self._send(core.revoke_grant(grant_id, reason)))

    async def grant_charges(
        self, grant_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> GrantChargePage:
        """The grant's ledger, oldest first (``next_cursor`` for the next page)."""
        return core.decode(GrantChargePage, *await self._send(core.grant_charges(grant_id, limit, cursor)))

    # -- profiles' usage (admin; an approver: its own tenants' runs) -------------------------------
    async def list_profiles(self) -> ProfileList:
        """The profiles in force (``GET /v1/profiles``): each one's limits as a run gets them now, or why it does
        not resolve. Raises ``Forbidden`` for an agent's token."""
        return core.decode(ProfileList, *await self._send(core.list_profiles()))

    async def profile_distribution(
        self, name: str, *, since: str | None = None, min_runs: int | None = None
    ) -> ProfileDistribution:
        """How ``name``'s runs of the window (``since``: 30m, 12h, 7d …; default 7d) spread against its limits
        (``GET /v1/profiles/{name}/distribution``): per measure a histogram, the limit now and the recommended
        value; the newest runs that ended at a limit. Raises ``Forbidden`` for an agent's token, ``InputInvalid``
        for a bad ``since``."""
        return core.decode(ProfileDistribution, *await self._send(core.profile_distribution(name, since, min_runs)))

    async def profile_usage(self, name: str, *, since: str | None = None, by: str | None = None) -> UsageReport:
        """What ``name``'s runs of the window (``since``: 30m, 12h, 7d …; default 7d) used against its limits,
        in one group or ``by`` tenant, tool or ci_repository."""
        return core.decode(UsageReport, *await self._send(core.profile_usage(name, since, by)))

    async def profile_recommendation(
        self, name: str, *, since: str | None = None, min_runs: int | None = None
    ) -> Recommendation:
        """Limits ``name``'s runs call for, each with its rule, inputs and confidence, and the patch."""
        return core.decode(Recommendation, *await self._send(core.profile_recommendation(name, since, min_runs)))

    async def profile_whatif(self, name: str, proposal: WhatIfProposal | Mapping[str, object]) -> WhatIfReport:
        """``name``'s recorded runs replayed under ``proposal`` (``{"set": {"memory": 536870912}, "since": "7d",
        "node": {"cpus": 8, "memory_bytes": ...}}``: values in bytes, cores, seconds)."""
        return core.decode(WhatIfReport, *await self._send(core.profile_whatif(name, proposal)))

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
        """Set a ``tty`` session's window size (``POST /v1/sessions/{id}/resize``); ``SessionNotFound`` once it
        ended."""
        core.raise_for(*await self._send(core.resize(session_id, rows, cols)))

    async def close_session(self, session_id: str) -> SessionAnswer:
        """Close a session (``DELETE /v1/sessions/{id}``): its sandbox is removed; returns its last output.
        ``SessionNotFound`` for one that ended (or another tenant's or subject's)."""
        return core.decode(SessionAnswer, *await self._send(core.close_session(session_id)))

    # -- CI jobs: what a runner's front door calls (orchestrator/ci, docs/ci.md) --------------------------
    async def open_ci_job(self, request: CiJobRequest | Mapping[str, object]) -> CiJobView:
        """Open a CI job (``POST /v1/ci/jobs``): its image checked against the caps now, its workspace made.
        Raises ``PolicyDenied`` for an image the caps do not name, ``CiUnsupported``, ``InputInvalid``."""
        return core.decode(CiJobView, *await self._send(core.open_ci_job(request)))

    async def get_ci_job(self, job_id: str) -> CiJobView:
        """One CI job of the token's tenants and its steps (``GET /v1/ci/jobs/{id}``)."""
        return core.decode(CiJobView, *await self._send(core.get_ci_job(job_id)))

    async def run_ci_step(
        self, job_id: str, request: CiStepRequest | Mapping[str, object], *, wait: float | None = None
    ) -> ExecutionView:
        """Submit one step of the job (``POST /v1/ci/jobs/{id}/steps``): the execution once decided, or ended
        within ``wait``; follow it with :meth:`stream`. Refusals raise as for :meth:`submit`."""
        call = core.run_ci_step(job_id, request, wait)
        status, body = await self._send(call, read_timeout=(wait or 0) + self._timeout)
        return core.decode(SubmitAnswer, status, body).execution

    async def close_ci_job(self, job_id: str) -> CiJobView:
        """Close the job (``DELETE /v1/ci/jobs/{id}``): steps still running cancelled, a workspace the job
        made removed; closing again answers the closed job. Raises ``NotFound`` for a job the controller
        does not know."""
        return core.decode(CiJobView, *await self._send(core.close_ci_job(job_id)))

    async def evidence(self, execution_id: str) -> EvidencePage:
        """The evidence records of one execution of the token's tenants (``GET /v1/evidence?execution_id=``),
        oldest first, as written (sanitized, hash-chained; at most 1000).

        Raises ``NotFound`` for no such execution (or another tenant's: never told apart),
        ``Unauthorized``; ``SandboxUnavailable`` when the service does not answer.
        """
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
