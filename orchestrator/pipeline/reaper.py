"""Orphan collection: sandboxes with our labels whose owner is gone or whose deadline passed."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from dataclasses import dataclass

from orchestrator.backends.base import ManagedSandbox, SandboxBackend, SandboxHandle
from orchestrator.evidence import EventType, EvidenceEvent, EvidenceWriter
from orchestrator.pipeline.this_process import THIS_PROCESS, owner_alive, owner_label

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Reaped:
    sandbox: ManagedSandbox
    reason: str


def orphan_reason(sandbox: ManagedSandbox, now: float) -> str | None:
    """Why a sandbox with our labels is an orphan, or None: its owner is gone, or its deadline (the
    wall timeout plus a grace period, set before it was created) passed, or it belongs to this very
    process but no execution here runs it any more (its removal failed, e.g. while the engine was down)."""
    if sandbox.owner is None:
        return "no owner label"
    if sandbox.deadline_unix is not None and sandbox.deadline_unix < now:
        return "deadline passed"
    if sandbox.owner == owner_label():
        if THIS_PROCESS.is_active(sandbox.execution_id):
            return None
        return "its controller (this process) no longer runs it"
    # a process of this host is asked directly (a killed one's Lease may not have expired yet); any other
    # owner by what the backend knows (its Lease on a cluster)
    alive = owner_alive(sandbox.owner)
    if alive is None:
        alive = sandbox.owner_alive
    if alive is False:
        return f"owner {sandbox.owner} is gone"
    return None


async def collect_orphans(
    backend: SandboxBackend, evidence: EvidenceWriter, *, ended: Collection[str] = ()
) -> list[Reaped]:
    """Remove every orphan and record an ``execution_abandoned`` record for each — or, for an execution in
    ``ended`` (its end record already written, e.g. by a restarted service), ``sandbox_collected``."""
    now = time.time()
    reaped: list[Reaped] = []
    for sandbox in await backend.list_managed():
        reason = orphan_reason(sandbox, now)
        if reason is None:
            continue
        handle = SandboxHandle(
            execution_id=sandbox.execution_id or "", sandbox_id=sandbox.sandbox_id, name=sandbox.name
        )
        await backend.destroy(handle)
        await evidence.append(
            EvidenceEvent(
                event=EventType.SANDBOX_COLLECTED if sandbox.execution_id in ended else EventType.EXECUTION_ABANDONED,
                execution_id=sandbox.execution_id or f"unknown:{sandbox.sandbox_id[:12]}",
                tenant="unknown",
                subject="reaper",
                status="abandoned",
                reason=f"orphan removed: {reason}",
                data={
                    "sandbox_id": sandbox.sandbox_id,
                    "name": sandbox.name,
                    "state": sandbox.state,
                    "owner": sandbox.owner,
                },
            ),
            durable=True,
        )
        log.info("removed orphan sandbox %s (%s)", sandbox.name, reason)
        reaped.append(Reaped(sandbox, reason))
    return reaped
