"""Tamper-evident evidence: hash-chained JSONL records, an async writer, verification and readers.

The file format, the chain and the head anchor are described in :mod:`orchestrator.evidence.chain`;
the writer's batching, locking and torn-line policy in :mod:`orchestrator.evidence.writer`.
"""

from orchestrator.evidence.chain import HeadAnchor, head_path, read_head, record_hash
from orchestrator.evidence.paths import default_evidence_path
from orchestrator.evidence.reader import iter_raw, iter_records, records_of, tail, tail_raw
from orchestrator.evidence.records import (
    END_EVENTS,
    FORMAT_VERSION,
    GENESIS_HASH,
    MAX_RECORD_BYTES,
    EventType,
    EvidenceEvent,
    EvidenceRecord,
    format_ts,
)
from orchestrator.evidence.verify import Unended, VerifyReport, verify
from orchestrator.evidence.writer import EvidenceWriter

__all__ = [
    "END_EVENTS",
    "FORMAT_VERSION",
    "GENESIS_HASH",
    "MAX_RECORD_BYTES",
    "EventType",
    "EvidenceEvent",
    "EvidenceRecord",
    "EvidenceWriter",
    "HeadAnchor",
    "Unended",
    "VerifyReport",
    "default_evidence_path",
    "format_ts",
    "head_path",
    "iter_raw",
    "iter_records",
    "read_head",
    "record_hash",
    "records_of",
    "tail",
    "tail_raw",
    "verify",
]
