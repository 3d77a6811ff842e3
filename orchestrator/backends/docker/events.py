"""Engine JSON → protocol values: lifecycle events, exit state, managed sandboxes, timestamps.

Pure functions over the untyped JSON the engine returns (no SDK import, no I/O).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import get_args

from orchestrator.backends.base import (
    LABEL_DEADLINE,
    LABEL_EXECUTION_ID,
    LABEL_OWNER,
    ExitState,
    LifecycleEvent,
    LifecycleKind,
    ManagedSandbox,
)
from orchestrator.backends.docker.engine import JsonObject, jbool, jint, jlist, jobj, jstr, str_map

LIFECYCLE_KINDS: frozenset[str] = frozenset(get_args(LifecycleKind))
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ENGINE_TIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})$",
)


def parse_engine_time(text: str | None) -> datetime | None:
    """An engine timestamp (RFC 3339 with up to nanoseconds) as an aware UTC datetime, nanoseconds
    truncated to microseconds. ``None`` for empty and for Go's zero time (``0001-01-01T00:00:00Z``,
    "never happened")."""
    if not text:
        return None
    match = _ENGINE_TIME.match(text.strip())
    if not match:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    if int(year) <= 1:
        return None
    micros = int((fraction or "0")[:6].ljust(6, "0"))
    tz = UTC
    if zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
    try:
        value = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), micros, tzinfo=tz)
    except ValueError:
        return None
    return value.astimezone(UTC)


def from_unix_nanos(nanos: int) -> datetime:
    """Aware UTC datetime from nanoseconds since the epoch (truncated to microseconds, no float)."""
    return _EPOCH + timedelta(microseconds=nanos // 1000)


def lifecycle_event(raw: JsonObject) -> LifecycleEvent | None:
    """A container lifecycle event from one engine event, or ``None`` for anything else
    (attach, resize, exec_*, other object types)."""
    if (jstr(raw, "Type") or "container") != "container":
        return None
    action = jstr(raw, "Action") or jstr(raw, "status") or ""
    if action not in LIFECYCLE_KINDS:
        return None
    actor = jobj(raw, "Actor")
    sandbox_id = jstr(actor, "ID") or jstr(raw, "id") or ""
    attributes = str_map(actor.get("Attributes"))
    nanos = jint(raw, "timeNano")
    if nanos is None:
        seconds = jint(raw, "time")
        if seconds is None:
            return None
        nanos = seconds * 1_000_000_000
    exit_code: int | None = None
    if action == "die":
        exit_text = attributes.get("exitCode")
        if exit_text is not None and exit_text.lstrip("-").isdigit():
            exit_code = int(exit_text)
    signal = attributes.get("signal") if action == "kill" else None
    kind: LifecycleKind = action  # type: ignore[assignment]  # checked against LIFECYCLE_KINDS
    return LifecycleEvent(
        kind=kind,
        sandbox_id=sandbox_id,
        execution_id=attributes.get(LABEL_EXECUTION_ID),
        engine_ts=from_unix_nanos(nanos),
        exit_code=exit_code,
        signal=signal,
        attributes=attributes,
    )


def exit_state(inspected: JsonObject) -> ExitState:
    """``ExitState`` from ``docker inspect``'s ``State``: the exit code only once the container ran and
    stopped; OOM as the engine recorded it."""
    state = jobj(inspected, "State")
    started_at = parse_engine_time(jstr(state, "StartedAt"))
    finished_at = parse_engine_time(jstr(state, "FinishedAt"))
    running = bool(jbool(state, "Running")) or bool(jbool(state, "Restarting")) or bool(jbool(state, "Paused"))
    exit_code = jint(state, "ExitCode")
    if started_at is None or running:
        exit_code = None
    return ExitState(
        exit_code=exit_code,
        oom_killed=bool(jbool(state, "OOMKilled")),
        started_at=started_at,
        finished_at=finished_at if not running else None,
        error=jstr(state, "Error") or None,
        image_id=jstr(inspected, "Image") or None,
    )


def managed_sandbox(listed: JsonObject) -> ManagedSandbox:
    """``ManagedSandbox`` from one entry of ``GET /containers/json``."""
    labels = str_map(listed.get("Labels"))
    names = [n for n in jlist(listed, "Names") if isinstance(n, str)]
    deadline: float | None = None
    deadline_text = labels.get(LABEL_DEADLINE)
    if deadline_text:
        try:
            deadline = float(deadline_text)
        except ValueError:
            deadline = None
    return ManagedSandbox(
        sandbox_id=jstr(listed, "Id") or "",
        name=names[0].lstrip("/") if names else "",
        execution_id=labels.get(LABEL_EXECUTION_ID),
        owner=labels.get(LABEL_OWNER),
        deadline_unix=deadline,
        state=jstr(listed, "State") or "unknown",
    )
