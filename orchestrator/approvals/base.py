"""The approval provider protocol and the timeout that turns silence into a recorded denial.

A provider whose asks live in a store that others answer from (``SettlesInStore``: the queue) has
its timeout and cancellation settled there: the timeout and a late answer race for one
compare-and-set in the store, and the outcome the store kept is the one returned (so it is the one
acted upon and recorded). For the others (rules, terminal), silence past the timeout is TIMEOUT.
"""

from __future__ import annotations

import asyncio
import contextlib
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


@runtime_checkable
class SettlesInStore(Protocol):
    """A provider whose asks others decide through a shared store."""

    async def settle_timeout(self, request: ApprovalRequest) -> ApprovalResult:
        """Close the ask as timed out unless an answer was stored first; what the store kept."""
        ...

    async def withdraw(self, request: ApprovalRequest) -> None:
        """Close the ask because nobody waits for it any more (the caller was cancelled)."""
        ...


SUSPEND = "suspend: the service stops; the ask stays queued for its next start"
"""The ``Task.cancel(msg)`` that leaves an ask pending in its store (a service shutting down resumes
the wait when it starts again); any other cancellation withdraws it."""


def is_suspend(cancel: BaseException) -> bool:
    return bool(cancel.args) and cancel.args[0] == SUSPEND


async def decide(provider: ApprovalProvider, request: ApprovalRequest) -> ApprovalResult:
    """Ask ``provider``; silence past ``request.timeout_s`` is a TIMEOUT (a denial, recorded apart)."""
    try:
        async with asyncio.timeout(request.timeout_s):
            return await provider.request_approval(request)
    except TimeoutError:
        if isinstance(provider, SettlesInStore):
            return await _settled(provider, request)
        return ApprovalResult(
            outcome=ApprovalOutcome.TIMEOUT,
            approver=provider.name,
            reason=f"no answer within {request.timeout_s:g}s",
        )
    except asyncio.CancelledError as cancel:
        if isinstance(provider, SettlesInStore) and not is_suspend(cancel):
            # shielded: the ask is closed even though this task is being cancelled
            with contextlib.suppress(Exception):
                await asyncio.shield(provider.withdraw(request))
        raise
    except OrchestratorError:
        raise
    except Exception as err:
        raise _broken(provider, err) from err


async def _settled(provider: SettlesInStore, request: ApprovalRequest) -> ApprovalResult:
    try:
        return await asyncio.shield(provider.settle_timeout(request))
    except OrchestratorError:
        raise
    except Exception as err:
        raise _broken(provider, err) from err


def _broken(provider: object, err: Exception) -> InternalError:
    # fail closed: a broken provider never approves
    name = getattr(provider, "name", type(provider).__name__)
    log.exception("approval provider %s failed", name)
    return InternalError(f"approval provider {name!r} failed: {err.__class__.__name__}")
