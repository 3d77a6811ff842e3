"""The approval provider protocol and the timeout that turns silence into a recorded denial."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, runtime_checkable

from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.errors import InternalError, OrchestratorError

log = logging.getLogger(__name__)


@runtime_checkable
class ApprovalProvider(Protocol):
    """Decides one ask. Sees only the sanitized request. May take as long as it likes: the caller
    enforces the timeout and cancels it."""

    @property
    def name(self) -> str: ...

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult: ...


async def decide(provider: ApprovalProvider, request: ApprovalRequest) -> ApprovalResult:
    """Ask ``provider``; silence past ``request.timeout_s`` is a TIMEOUT (a denial, recorded apart)."""
    try:
        async with asyncio.timeout(request.timeout_s):
            return await provider.request_approval(request)
    except TimeoutError:
        return ApprovalResult(
            outcome=ApprovalOutcome.TIMEOUT,
            approver=provider.name,
            reason=f"no answer within {request.timeout_s:g}s",
        )
    except OrchestratorError:
        raise
    except Exception as err:
        # fail closed: a broken provider never approves
        log.exception("approval provider %s failed", provider.name)
        raise InternalError(f"approval provider {provider.name!r} failed: {err.__class__.__name__}") from err
