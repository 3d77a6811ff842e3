"""What an execution leaves behind: its output (capped, secrets redacted) and its workspace side effects.

Pure functions over bytes and a workspace directory; no container engine, no evidence writer.
Layering: imports only ``orchestrator.domain`` (and the standard library and pydantic).
"""

from __future__ import annotations

from orchestrator.results.redact import (
    BUILTIN_KINDS,
    MIN_LITERAL_LENGTH,
    PATTERN_REACH,
    CappedOutput,
    RedactionResult,
    Redactor,
    cap,
)
from orchestrator.results.workspace import (
    Entry,
    EntryKind,
    FileChange,
    SideEffects,
    Snapshot,
    diff,
    snapshot,
)

__all__ = [
    "BUILTIN_KINDS",
    "MIN_LITERAL_LENGTH",
    "PATTERN_REACH",
    "CappedOutput",
    "Entry",
    "EntryKind",
    "FileChange",
    "RedactionResult",
    "Redactor",
    "SideEffects",
    "Snapshot",
    "cap",
    "diff",
    "snapshot",
]
