"""Each run's usage (``domain.usage.RunUsage``) as its end record says it: built by the runner from the end
record it has just written, and read back from an evidence file by ``sandboxctl profiles usage --evidence``
— one function for both, so the store, the metrics and the evidence never disagree.

An end record (``execution_finished``, or ``run_failed`` after a begin record) carries ``data.limits``
(the limits the run had) and ``data.end_cause`` from this version on; records written before have neither
and are skipped (what they were held against is not on the record). Reading a file does not verify its
chain (``sandboxctl evidence verify`` does): this is a statistic, never a proof.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from orchestrator.domain.usage import EndCause, RunLimits, RunUsage
from orchestrator.evidence.reader import iter_lines, open_snapshot, tail

# the lines worth parsing, found in the raw bytes first (canonical JSON: sorted keys, no spaces); most of a
# file is lifecycle, session and output records that say nothing about usage
_BEGIN = b'"event":"execution_started"'
_ENDS = (b'"event":"execution_finished"', b'"event":"run_failed"', b'"event":"execution_abandoned"')


@dataclass(frozen=True, slots=True)
class RunContext:
    """What the begin record says of a run, besides its usage."""

    profile: str
    tenant: str
    tool: str
    ci_repository: str | None
    limits: Mapping[str, Any] | None = None  # data.limits of the begin record, when it has them


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stream_bytes(stream: Any) -> int | None:
    return _int(stream.get("bytes")) if isinstance(stream, Mapping) else None


def _workspace(data: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """Bytes and entries the run wrote in its workspace: the write meter's peaks (what it watched as the run
    went; a read-only workspace has no meter, so nothing written: 0, as it was refused every write)."""
    effects = data.get("side_effects")
    if not isinstance(effects, Mapping):
        return None, None
    budget = effects.get("write_budget")
    if isinstance(budget, Mapping) and not budget.get("blind"):
        return _int(budget.get("peak_bytes")), _int(budget.get("peak_files"))
    if effects.get("complete") is True:  # no meter: the record of what changed is the figure
        files = sum(_int(effects.get(f"{kind}_count")) or 0 for kind in ("created", "modified"))
        return _int(effects.get("bytes_written")), files
    return None, None


def usage_from_end(
    execution_id: str, context: RunContext, data: Mapping[str, Any], *, ended_at: float
) -> RunUsage | None:
    """The usage of one run from its end record's ``data``; None when the record has no limits (written
    before this version) or an end cause this version does not know."""
    limits_json, cause_text = data.get("limits"), data.get("end_cause")
    if not isinstance(limits_json, Mapping) or not isinstance(cause_text, str):
        return None
    try:
        limits = RunLimits.from_json(limits_json)
        cause = EndCause(cause_text)
    except (KeyError, TypeError, ValueError):
        return None
    usage = data.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    cpu_ns = _int(usage.get("cpu_total_ns"))
    duration_ms = _int(data.get("duration_ms"))
    written_bytes, written_files = _workspace(data)
    source = usage.get("source")
    return RunUsage(
        execution_id=execution_id,
        profile=context.profile,
        ended_at=ended_at,
        cause=cause,
        limits=limits,
        cpu_seconds=None if cpu_ns is None else cpu_ns / 1e9,
        memory_peak_bytes=_int(usage.get("memory_peak_bytes")),
        pids_peak=_int(usage.get("pids_peak")),
        wall_seconds=None if duration_ms is None else duration_ms / 1000,
        stdout_bytes=_stream_bytes(data.get("stdout")),
        stderr_bytes=_stream_bytes(data.get("stderr")),
        workspace_bytes_written=written_bytes,
        workspace_files_written=written_files,
        source=source if isinstance(source, str) else None,
        tenant=context.tenant,
        tool=context.tool,
        ci_repository=context.ci_repository,
    )


def _context(record: Mapping[str, Any]) -> RunContext | None:
    data = record.get("data")
    if not isinstance(data, Mapping) or not isinstance(data.get("profile"), str):
        return None
    ci = data.get("ci")
    repository = ci.get("repository") if isinstance(ci, Mapping) else None
    limits = data.get("limits")
    return RunContext(
        profile=data["profile"],
        tenant=str(record.get("tenant") or ""),
        tool=str(record.get("tool") or ""),
        ci_repository=repository if isinstance(repository, str) else None,
        limits=limits if isinstance(limits, Mapping) else None,
    )


def abandoned_usage(execution_id: str, context: RunContext, *, ended_at: float) -> RunUsage | None:
    """The usage of a run whose controller died before its end record (``execution_abandoned``): its limits from
    its begin record, its end ``failed``, every measure unknown. None without limits on the begin record."""
    if context.limits is None:
        return None
    return usage_from_end(execution_id, context, {"limits": context.limits, "end_cause": "failed"}, ended_at=ended_at)


def abandoned_run(path: str | os.PathLike[str], execution_id: str, *, ended_at: float) -> RunUsage | None:
    """The usage of ``execution_id``, abandoned (``abandoned_usage``), from its begin record in the evidence file
    at ``path`` (read from the end: the restart that abandons it comes soon after); None without one."""
    begun = tail(path, 1, execution_id=execution_id, event="execution_started")
    context = _context(begun[0].fields()) if begun else None
    return None if context is None else abandoned_usage(execution_id, context, ended_at=ended_at)


def _unix(ts: Any) -> float | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def read_usage(
    path: str | os.PathLike[str], *, profile: str | None = None, since: float | None = None
) -> Iterator[RunUsage]:
    """Every run of the evidence file at ``path`` with a usage on its end record, oldest first; of one
    profile, ended at or after ``since`` (unix seconds), where asked. A line that is not JSON is skipped:
    the file is verified elsewhere."""
    begun: dict[str, RunContext] = {}
    with open_snapshot(Path(path)) as snap:
        for raw in iter_lines(snap.file, snap.size):
            is_begin = _BEGIN in raw
            if not is_begin and not any(end in raw for end in _ENDS):
                continue
            try:
                record = json.loads(raw)
            except ValueError:
                continue
            if not isinstance(record, dict) or not isinstance(record.get("execution_id"), str):
                continue
            execution_id, event = record["execution_id"], record.get("event")
            is_begin = event == "execution_started"
            if not is_begin and event not in ("execution_finished", "run_failed", "execution_abandoned"):
                continue  # the bytes matched inside some other field
            if is_begin:
                context = _context(record)
                if context is not None and (profile is None or context.profile == profile):
                    begun[execution_id] = context
                continue
            context = begun.pop(execution_id, None)
            ended_at = _unix(record.get("ts"))
            if context is None or ended_at is None or (since is not None and ended_at < since):
                continue
            data = record.get("data")
            if event == "execution_abandoned":
                usage = abandoned_usage(execution_id, context, ended_at=ended_at)
            else:
                usage = usage_from_end(
                    execution_id, context, data if isinstance(data, Mapping) else {}, ended_at=ended_at
                )
            if usage is not None:
                yield usage
