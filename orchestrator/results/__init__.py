"""What an execution leaves behind: its output (capped, secrets redacted) and its workspace side effects.

Pure functions over bytes and a workspace directory; no container engine, no evidence writer.
Layering: imports only ``orchestrator.domain`` (and the standard library and pydantic).

Workspace: :func:`snapshot` before the run, :class:`WorkspaceMeter` while it runs (the write budget),
:func:`collect` after it (the bounded :class:`SideEffects` record, set-id bits removed).
"""

from __future__ import annotations

from orchestrator.results.collect import CollectLimits, collect
from orchestrator.results.fstree import Entry, EntryKind
from orchestrator.results.record import FileChange, Problem, SideEffects
from orchestrator.results.redact import (
    BUILTIN_KINDS,
    MIN_LITERAL_LENGTH,
    PATTERN_REACH,
    CappedOutput,
    RedactionResult,
    Redactor,
    cap,
)
from orchestrator.results.workspace import Snapshot, snapshot

__all__ = [
    "BUILTIN_KINDS",
    "MIN_LITERAL_LENGTH",
    "PATTERN_REACH",
    "CappedOutput",
    "CollectLimits",
    "Entry",
    "EntryKind",
    "FileChange",
    "Problem",
    "RedactionResult",
    "Redactor",
    "SideEffects",
    "Snapshot",
    "cap",
    "collect",
    "snapshot",
]
