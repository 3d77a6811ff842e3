"""One execution's records: every record of an execution carries the same identity (its id and, once the
gate decided, tenant, subject, tool, call id, inputs digest and policy hash), so a recorder is bound to
them once and the flow says only what happened."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.errors import OrchestratorError
from orchestrator.evidence import EventType, EvidenceWriter
from orchestrator.gate.gate import GateResult
from orchestrator.pipeline.observer import GuardedTelemetry


@dataclass(frozen=True, slots=True)
class Evidence:
    """The evidence log of an orchestrator and the timings of its durable writes."""

    writer: EvidenceWriter
    telemetry: GuardedTelemetry

    def of(self, execution_id: str, gate: GateResult | None = None, **identity: Any) -> ExecutionRecorder:
        """A recorder of ``execution_id``'s records; ``identity``: fields of every record where there is no
        gate to name them (a refusal of unparsable input, a pool's own records)."""
        return ExecutionRecorder(self, execution_id, gate, identity)


@dataclass(frozen=True, slots=True)
class ExecutionRecorder:
    evidence: Evidence
    execution_id: str
    gate: GateResult | None
    identity: dict[str, Any]

    def fields(self, event: EventType, fields: dict[str, Any]) -> dict[str, Any]:
        base: dict[str, Any] = {"event": event, "execution_id": self.execution_id, **self.identity}
        if self.gate is not None:
            ctx = self.gate.sanitized.context
            base.update(
                tenant=ctx.tenant,
                subject=ctx.subject,
                tool=self.gate.sanitized.tool,
                call_id=ctx.call_id,
                inputs_digest=self.gate.inputs_digest,
                policy_version_hash=self.gate.decision.policy_version_hash,
            )
        base.update(fields)
        return base

    async def record(self, event: EventType, *, durable: bool = False, **fields: Any) -> None:
        """Append one record; ``durable``: wait until it (and everything queued before it) is fsynced.

        A mapping, not an EvidenceEvent: the writer fits it to one record before validating it, so a record
        is never lost to the size or the text of what a workload put in it."""
        base = self.fields(event, fields)
        if durable:
            began = time.monotonic()
            await self.evidence.writer.append(base, durable=True)
            self.evidence.telemetry.durable_write(time.monotonic() - began)
        else:
            self.evidence.writer.append_nowait(base)

    def record_nowait(self, event: EventType, **fields: Any) -> None:
        """A record queued in order, not awaited (what the proxy reports of a run's connections)."""
        self.evidence.writer.append_nowait(self.fields(event, fields))

    async def refuse(self, err: OrchestratorError, *, status: str = "refused", **fields: Any) -> OrchestratorError:
        """Record why the execution ends without finishing (durable), and return the error to raise."""
        err.details.setdefault("execution_id", self.execution_id)
        if self.gate is not None:
            err.details.setdefault("decision", self.gate.decision.decision.value)
        await self.record(
            EventType.RUN_FAILED, durable=True, status=status, error_code=err.code, reason=err.message, **fields
        )
        return err
