"""The end record of an execution, bounded in advance and built so that building it cannot fail.

Every execution that began (``execution_started``) ends with one end record: ``execution_finished``
when the command ran to an exit (or was killed for its deadline or memory), ``run_failed`` when the
run failed, was cancelled or hit a bug after it began. The workload controls much of what goes in it
(file names, engine error text), so every part has a budget here:

* output: sizes and the sha256 of what was kept (redacted, capped), never a hash of the raw stream;
* side effects: bounded by the record itself (``orchestrator.results.record``: counts, the digest of the
  full list, as much listing as fits, names redacted and shortened), plus the write meter's figures;
* free text (engine error, lifecycle status): at most :data:`TEXT_CHARS` characters.

The evidence writer degrades whatever would still not fit (``orchestrator.evidence.fit``); and if
assembling a part raises (a bug), the record is written without that part and says why.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from typing import Any, Final

from orchestrator.domain.canonical import canonical_sha256, sha256_hex
from orchestrator.domain.errors import (
    ExecutionCancelled,
    OrchestratorError,
    SandboxPidsLimit,
    SandboxStartFailed,
    SandboxUnavailable,
)
from orchestrator.domain.usage import EndCause, RunLimits
from orchestrator.pipeline.executor import KeptOutput, RunOutcome
from orchestrator.profiles import ResolvedProfile
from orchestrator.results import SideEffects
from orchestrator.results.write_meter import MeterReport

log = logging.getLogger(__name__)

TEXT_CHARS: Final = 2048
REASON_CHARS: Final = 4096


def clip(text: str, limit: int) -> str:
    """``text`` of at most ``limit`` characters; a longer one keeps its start, its length and a hash."""
    if len(text) <= limit:
        return text
    digest = sha256_hex(text.encode("utf-8", "backslashreplace"))[:16]
    tail = f"… [{len(text)} chars, sha256 {digest}]"
    return text[: max(0, limit - len(tail))] + tail


def stream_json(kept: KeptOutput | None) -> dict[str, Any] | None:
    """``bytes``: everything the command wrote; ``sha256`` and ``kept_bytes``: what was kept and returned
    (redacted, then capped)."""
    if kept is None:
        return None
    return {
        "bytes": kept.total_bytes,
        "kept_bytes": len(kept.data),
        "sha256": sha256_hex(kept.data),
        "truncated": kept.truncated,
    }


def outputs_digest(outcome: RunOutcome) -> str:
    return canonical_sha256({"stdout": stream_json(outcome.stdout_kept), "stderr": stream_json(outcome.stderr_kept)})


def side_effects_json(
    effects: SideEffects | None, *, error: str | None = None, budget: MeterReport | None = None
) -> dict[str, Any] | None:
    """The workspace changes for an end record: the record bounds itself (counts, the digest of the full
    list, as much listing as fits: at most ``SIDE_EFFECTS_MAX_BYTES``), plus the write meter's figures."""
    if effects is None:
        out: dict[str, Any] | None = None if error is None else {"error": clip(error, TEXT_CHARS), "complete": False}
    else:
        out = effects.to_dict()
    if budget is not None:
        out = {**(out or {}), "write_budget": budget.to_dict()}
    return out


def run_limits(profile: ResolvedProfile) -> RunLimits:
    """The limits the run had (its resolved profile, a grant's narrowing included)."""
    return RunLimits(
        cpus=profile.cpus,
        memory_bytes=profile.memory_bytes,
        pids=profile.pids_limit,
        wall_timeout_s=profile.wall_timeout_s,
        stdout_max_bytes=profile.stdout_max_bytes,
        stderr_max_bytes=profile.stderr_max_bytes,
        workspace_write_bytes=profile.workspace_write_bytes,
        workspace_write_files=profile.workspace_write_files,
    )


# why a run that ran to an end ended: the first that applies (EndCause's order); the command's own exit last. What
# the run was told (its error: forks refused at the pids limit under runc, a pooled sandbox that was gone before
# the command was sent) counts as much as the outcome's flags
_ENDED_AT: tuple[tuple[Callable[[RunOutcome, OrchestratorError | None], bool], EndCause], ...] = (
    (lambda o, e: o.timed_out, EndCause.WALL_TIMEOUT),
    (lambda o, e: o.oom_killed, EndCause.OOM),
    (lambda o, e: o.pids_limit_killed or isinstance(e, SandboxPidsLimit), EndCause.PIDS_LIMIT),
    (lambda o, e: o.over_budget, EndCause.WRITE_BUDGET),
    (lambda o, e: o.exit_code is None or isinstance(e, SandboxUnavailable | SandboxStartFailed), EndCause.FAILED),
    (lambda o, e: o.truncated, EndCause.OUTPUT_CAP),
    (lambda o, e: o.exit_code != 0, EndCause.EXIT_NONZERO),
)


#: why a caller stopped a run (a session's close reason), as its end cause: what its own exit then says (the kill's
#: 137) is not the command's end. A session stopped at its lifetime is at its wall timeout.
STOPPED_BY: Final[dict[str, EndCause]] = {
    "closed": EndCause.CANCELLED,
    "cancelled": EndCause.CANCELLED,
    "idle": EndCause.IDLE_TIMEOUT,
    "lifetime": EndCause.WALL_TIMEOUT,
}


def end_cause(outcome: RunOutcome, error: OrchestratorError | None = None, stopped_by: str | None = None) -> EndCause:
    # a caller's stop came before the run's deadline (a session's idle stop ends with its lifetime), even where the
    # sandbox took past that deadline to die (a pod's stop can take the kubelet seconds); only the kernel's OOM
    # kill can have come first
    if outcome.oom_killed or stopped_by not in STOPPED_BY:
        return next((cause for applies, cause in _ENDED_AT if applies(outcome, error)), EndCause.OK)
    return STOPPED_BY[stopped_by]


def failed_cause(error: OrchestratorError) -> EndCause:
    """Why a run that began ended without an end of its command (``run_failed``)."""
    return EndCause.CANCELLED if isinstance(error, ExecutionCancelled) else EndCause.FAILED


def _part(name: str, build: Callable[[], Any], failures: list[str]) -> Any:
    """One part of the record; a part that cannot be built (a bug) is left out and named."""
    try:
        return build()
    except Exception as exc:
        log.exception("could not build %s of an end record", name)
        failures.append(f"{name}: {type(exc).__name__}")
        return None


def finished_fields(
    outcome: RunOutcome, profile: ResolvedProfile, error: OrchestratorError | None, *, stopped_by: str | None = None
) -> dict[str, Any]:
    """The fields of ``execution_finished``: sizes and hashes, never content. ``stopped_by``: why the caller stopped
    the run (a session's close reason), if it did. Never raises."""
    status = (
        "timeout"
        if outcome.timed_out
        else "oom"
        if outcome.oom_killed
        else "pids_limit"
        if outcome.pids_limit_killed
        else "workspace_limit"
        if outcome.over_budget
        else ("succeeded" if outcome.exit_code == 0 else "failed")
    )
    fields: dict[str, Any] = {
        "status": status,
        "error_code": error.code if error else None,
        "reason": clip(error.message, REASON_CHARS) if error else None,
    }
    failures: list[str] = []
    try:
        data = _finished_data(outcome, profile, error, stopped_by, failures)
        fields["outputs_digest"] = _part("outputs_digest", lambda: outputs_digest(outcome), failures)
    except Exception as exc:  # a bug: the record still says how the command ended
        log.exception("could not build the end record's data")
        failures.append(f"data: {type(exc).__name__}")
        data = {
            "exit_code": outcome.exit_code,
            "timed_out": outcome.timed_out,
            "oom_killed": outcome.oom_killed,
            "pids_limit_killed": outcome.pids_limit_killed,
            "duration_ms": outcome.duration_ms,
            "end_cause": _part("end_cause", lambda: end_cause(outcome, error, stopped_by).value, failures),
            "limits": _part("limits", lambda: run_limits(profile).to_json(), failures),
        }
    if failures:
        data["assembly_failed"] = failures
    fields["data"] = data
    return fields


def _finished_data(
    outcome: RunOutcome,
    profile: ResolvedProfile,
    error: OrchestratorError | None,
    stopped_by: str | None,
    failures: list[str],
) -> dict[str, Any]:
    state = outcome.state
    return {
        "exit_code": outcome.exit_code,
        "timed_out": outcome.timed_out,
        "oom_killed": outcome.oom_killed,
        "pids_limit_killed": outcome.pids_limit_killed,
        "duration_ms": outcome.duration_ms,
        "end_cause": end_cause(outcome, error, stopped_by).value,
        **({"stopped_by": stopped_by} if stopped_by is not None else {}),
        "limits": run_limits(profile).to_json(),
        "stdout": _part("stdout", lambda: stream_json(outcome.stdout_kept), failures),
        "stderr": _part("stderr", lambda: stream_json(outcome.stderr_kept), failures),
        "redactions": outcome.redactions,
        "image": profile.image,
        "image_id": state.image_id if state else None,
        "usage": dataclasses.asdict(outcome.usage) if outcome.usage else None,
        "lifecycle_stream": clip(outcome.lifecycle, TEXT_CHARS),
        "runtime": profile.runtime,
        "seccomp_sha256": profile.seccomp_sha256,
        "engine_started_at": state.started_at.isoformat() if state and state.started_at else None,
        "engine_finished_at": state.finished_at.isoformat() if state and state.finished_at else None,
        "engine_error": clip(state.error, TEXT_CHARS) if state and state.error else None,
        "side_effects": _part(
            "side_effects",
            lambda: side_effects_json(
                outcome.side_effects, error=outcome.side_effects_error, budget=outcome.write_budget
            ),
            failures,
        ),
    }


def failed_side_effects(effects: SideEffects | None, error: str | None) -> dict[str, Any] | None:
    """The side effects of ``run_failed``, bounded like those of ``execution_finished``. Never raises."""
    failures: list[str] = []
    built = _part("side_effects", lambda: side_effects_json(effects, error=error), failures)
    return {"error": f"could not summarise: {failures[0]}"} if failures else built
