"""An evidence file's records as the tests read them: the project's own reader, filtered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.evidence import EvidenceRecord, iter_records


def records(evidence: Path, execution_id: str | None = None, event: str | None = None) -> list[EvidenceRecord]:
    """The records of ``evidence`` (one execution's, one event's, when given), in order."""
    return list(iter_records(evidence, execution_id=execution_id, event=event))


def record_dicts(evidence: Path, execution_id: str | None = None, event: str | None = None) -> list[dict[str, Any]]:
    """The same records as JSON objects, without the fields a record leaves out."""
    return [r.model_dump(mode="json", exclude_none=True) for r in records(evidence, execution_id, event)]
