"""What one run used of its profile's limits, and how it ended: the unit of every usage figure,
recommendation and what-if (``orchestrator.profiles.usage``).

One ``RunUsage`` per execution that began (its begin record on disk), built from its end record — by the
runner as it writes that record, or read back from the evidence file — so the service's store, the
evidence and the metrics all say the same. Every measure is ``None`` when unknown (a backend that could
not read it, a run that never started its command): never a 0 the kernel did not say. The limits are the
ones the run had (its resolved profile, caps and grants applied), not the profile's as it is today.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orchestrator.domain.errors import InputInvalid


class EndCause(StrEnum):
    """Why a run ended; the first that applies, in this order (a run killed at its deadline that also
    passed its output cap ended at its deadline)."""

    WALL_TIMEOUT = "wall_timeout"  # killed at its wall-clock deadline (its own, or a grant's bound)
    OOM = "oom"  # killed at its memory limit
    PIDS_LIMIT = "pids_limit"  # the runtime stopped it at its pids limit (gVisor)
    WRITE_BUDGET = "write_budget"  # killed for passing its workspace write budget
    OUTPUT_CAP = "output_cap"  # ran to its end, its output cut at the cap
    IDLE_TIMEOUT = "idle_timeout"  # an interactive session stopped after its idle timeout without input
    CANCELLED = "cancelled"  # cancelled while it ran (the caller, a restart), or a session its caller closed
    FAILED = "failed"  # its sandbox failed (lost, stopped from outside, never started): not the command's end
    EXIT_NONZERO = "exit_nonzero"  # its command exited non-zero, within every limit
    OK = "ok"  # exit 0 within every limit


@dataclass(frozen=True, slots=True)
class RunLimits:
    """The limits a run had."""

    cpus: float
    memory_bytes: int
    pids: int
    wall_timeout_s: float
    stdout_max_bytes: int
    stderr_max_bytes: int
    workspace_write_bytes: int
    workspace_write_files: int

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__slots__}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunLimits:
        return cls(
            cpus=float(data["cpus"]),
            memory_bytes=int(data["memory_bytes"]),
            pids=int(data["pids"]),
            wall_timeout_s=float(data["wall_timeout_s"]),
            stdout_max_bytes=int(data["stdout_max_bytes"]),
            stderr_max_bytes=int(data["stderr_max_bytes"]),
            workspace_write_bytes=int(data["workspace_write_bytes"]),
            workspace_write_files=int(data["workspace_write_files"]),
        )


#: the tools whose run is an interactive session (domain.requests.ExecCommandRequest)
SESSION_TOOLS: frozenset[str] = frozenset({"exec_command"})


@dataclass(slots=True)  # not frozen: a frozen one takes 4x as long to build, and a profile's report reads 100,000
class RunUsage:
    """One run's usage. ``source``: where CPU, memory and pids came from — ``cgroup`` (the controller read the
    sandbox's cgroup), ``init`` (the sandbox's own init read it at the command's end), None (unknown)."""

    execution_id: str
    profile: str
    ended_at: float  # unix seconds
    cause: EndCause
    limits: RunLimits
    cpu_seconds: float | None
    memory_peak_bytes: int | None
    pids_peak: int | None
    wall_seconds: float | None
    stdout_bytes: int | None
    stderr_bytes: int | None
    workspace_bytes_written: int | None
    workspace_files_written: int | None
    source: str | None
    tenant: str = ""
    tool: str = ""
    ci_repository: str | None = None

    @property
    def is_session(self) -> bool:
        """An interactive session's run: its wall time is how long it stayed open, its wall limit its lifetime."""
        return self.tool in SESSION_TOOLS

    @property
    def command_wall_seconds(self) -> float | None:
        """The wall time of a one-shot run; None for a session (how long one stays open sizes no timeout)."""
        return None if self.is_session else self.wall_seconds

    @property
    def cores(self) -> float | None:
        """The CPU cores it used on average over its wall time (CPU seconds / wall seconds)."""
        if self.cpu_seconds is None or not self.wall_seconds:
            return None
        return self.cpu_seconds / self.wall_seconds


@dataclass(frozen=True, slots=True)
class Measure:
    """One thing a run uses, with the limit it is held against and the end cause that limit gives."""

    name: str
    unit: str  # s, cores, bytes, count
    description: str
    value: Callable[[RunUsage], float | None]
    limit: Callable[[RunLimits], float]
    limit_field: str  # the profile's `limits:` key a recommendation or what-if changes
    cause: EndCause | None  # the end a run meets at this limit (CPU has none: it is throttled, never killed)


# fmt: off
MEASURES: tuple[Measure, ...] = (
    Measure("cores", "cores", "CPU cores used on average (CPU seconds / wall seconds)",
            lambda u: u.cores, lambda lim: lim.cpus, "cpus", None),
    Measure("memory_peak_bytes", "bytes", "memory peak",
            lambda u: u.memory_peak_bytes, lambda lim: lim.memory_bytes, "memory", EndCause.OOM),
    Measure("pids_peak", "count", "processes and threads at the peak",
            lambda u: u.pids_peak, lambda lim: lim.pids, "pids", EndCause.PIDS_LIMIT),
    Measure("wall_seconds", "s", "wall time of one-shot runs (a session's, how long it was open, is not one)",
            lambda u: u.command_wall_seconds, lambda lim: lim.wall_timeout_s, "wall_timeout_s", EndCause.WALL_TIMEOUT),
    Measure("cpu_seconds", "s", "CPU time (its limit: the cores for the whole wall timeout)",
            lambda u: u.cpu_seconds, lambda lim: lim.cpus * lim.wall_timeout_s, "cpus", None),
    Measure("stdout_bytes", "bytes", "stdout written",
            lambda u: u.stdout_bytes, lambda lim: lim.stdout_max_bytes, "stdout_max_bytes", EndCause.OUTPUT_CAP),
    Measure("stderr_bytes", "bytes", "stderr written",
            lambda u: u.stderr_bytes, lambda lim: lim.stderr_max_bytes, "stderr_max_bytes", EndCause.OUTPUT_CAP),
    Measure("workspace_bytes_written", "bytes", "workspace bytes written",
            lambda u: u.workspace_bytes_written, lambda lim: lim.workspace_write_bytes, "workspace_write_bytes",
            EndCause.WRITE_BUDGET),
    Measure("workspace_files_written", "count", "workspace entries written",
            lambda u: u.workspace_files_written, lambda lim: lim.workspace_write_files, "workspace_write_files",
            EndCause.WRITE_BUDGET),
)
# fmt: on
MEASURE_BY_NAME: Mapping[str, Measure] = {m.name: m for m in MEASURES}


#: a window back from now: a number and its unit (the API's ``since`` takes exactly this: its pattern)
WINDOW_PATTERN = "[0-9]{1,9}(\\.[0-9]{1,6})?[smhdw]"
_WINDOW_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
DEFAULT_WINDOW = "7d"


def window_start(text: str | None, now: float) -> float:
    """The start (unix seconds) of the window ``text`` names, a span back from ``now``: ``30m``, ``12h``, ``7d``,
    ``2w`` (None: DEFAULT_WINDOW). Anything else is INPUT.INVALID naming ``since``."""
    text = text or DEFAULT_WINDOW
    if re.fullmatch(WINDOW_PATTERN, text) is None:
        raise InputInvalid(f"since: {text!r} is not a span such as 30m, 12h, 7d or 2w", details={"fields": ["since"]})
    return now - float(text[:-1]) * _WINDOW_UNIT_S[text[-1]]
