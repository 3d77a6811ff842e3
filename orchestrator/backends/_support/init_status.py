"""The end of a command as our init reports it on its status channel (``images/init/sandbox-init.c``).

A supervising init writes one line on a descriptor the command never inherits, under the launch's report
token: whether the command ran, its exit (or the signal that killed it), the OOM kills of its cgroup and
its usage (CPU since the launch, memory and pids peaks, creations refused at the pids limit). The line
is read as hostile input anyway: anything but exactly one well-formed line under this launch's token is
no report (``None``), and a missing report is never a success -- the caller then goes by the engine.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from orchestrator.backends.base import ExitState, ResourceUsage
from orchestrator.domain.errors import SandboxUnavailable

#: the longest line an init writes (it writes less than 512 bytes); a reader keeps no more than this
MAX_LINE = 512

_LINE = re.compile(
    rb"sandbox-status v1 (?P<token>[0-9a-f]{32}) ran=(?P<ran>[01]) exit=(?P<exit>\d{1,3}) signal=(?P<signal>\d{1,2})"
    rb" stopped=(?P<stopped>\d{1,2}) oom_kills=(?P<oom>-1|\d{1,19}) cpu_ns=(?P<cpu>-1|\d{1,19})"
    rb" memory_peak=(?P<memory>-1|\d{1,19}) pids_peak=(?P<pids>-1|\d{1,19}) pids_hits=(?P<hits>-1|\d{1,19})"
    rb" started_ns=(?P<started>\d{1,19}) finished_ns=(?P<finished>\d{1,19})\n"
)
#: the highest signal number Linux has (SIGRTMAX)
MAX_SIGNAL = 64


@dataclass(frozen=True, slots=True)
class InitStatus:
    """One command's end, as its init saw it."""

    ran: bool  # False: the program could not be executed (exit 126 or 127)
    exit_code: int  # 128 + the signal's number for a command a signal killed, as the runtime reports it
    signal: int | None
    # the first signal the init forwarded that came from outside the sandbox (the runtime stopping it: an
    # eviction, a deadline, a deletion): then the runtime's account is the end, not this report
    stopped: int | None
    oom_kills: int | None  # OOM kills in the sandbox's cgroup since the launch (None: unknown)
    cpu_ns: int | None  # the cgroup's CPU time since the launch (None: unknown, never a guess)
    memory_peak_bytes: int | None
    pids_peak: int | None
    pids_limit_hits: int | None
    started_at: datetime
    finished_at: datetime

    @property
    def oom_killed(self) -> bool:
        return bool(self.oom_kills)

    def exit_state(self) -> ExitState:
        return ExitState(
            exit_code=self.exit_code,
            oom_killed=self.oom_killed,
            started_at=self.started_at,
            finished_at=self.finished_at,
        )

    def usage(self) -> ResourceUsage:
        return ResourceUsage(
            memory_peak_bytes=self.memory_peak_bytes,
            cpu_total_ns=self.cpu_ns,
            pids_peak=self.pids_peak,
            pids_limit_hits=self.pids_limit_hits,
            source="init",
        )


def _known(value: bytes) -> int | None:
    number = int(value)
    return None if number < 0 else number


def _time(ns: bytes) -> datetime:
    return datetime.fromtimestamp(int(ns) / 1e9, tz=UTC)


def parse_status(data: bytes, report: str) -> InitStatus | None:
    """The report in ``data`` (all the channel carried) when it is exactly one line under ``report``."""
    if not report or len(data) > MAX_LINE:
        return None
    found = _LINE.fullmatch(data)
    if found is None or found["token"] != report.encode("ascii"):
        return None
    started, finished = int(found["started"]), int(found["finished"])
    code, signal, stopped, ran = int(found["exit"]), int(found["signal"]), int(found["stopped"]), found["ran"] == b"1"
    consistent = (
        finished >= started
        and code <= 255
        and signal <= MAX_SIGNAL
        and stopped <= MAX_SIGNAL
        and (signal == 0 or code == 128 + signal)
        and (ran or (code in (126, 127) and signal == 0))
    )
    if not consistent:
        return None
    return InitStatus(
        ran=ran,
        exit_code=code,
        signal=signal or None,
        stopped=stopped or None,
        oom_kills=_known(found["oom"]),
        cpu_ns=_known(found["cpu"]),
        memory_peak_bytes=_known(found["memory"]),
        pids_peak=_known(found["pids"]),
        pids_limit_hits=_known(found["hits"]),
        started_at=_time(found["started"]),
        finished_at=_time(found["finished"]),
    )


async def forwarded_stop(read: asyncio.Future[bytes], report: str, wait_s: float = 5.0) -> int | None:
    """The signal from outside the sandbox that the init forwarded, per its report on ``read`` (the status
    channel's whole content: it ends with the init, so at once after the sandbox's end; ``wait_s`` bounds a
    loaded host's reader); None when there is no valid report, it names no such signal, or the read failed."""
    if not read.done():
        await asyncio.wait({read}, timeout=wait_s)  # never raises the read's error, never cancels it
    if not read.done() or read.cancelled() or read.exception() is not None:
        return None
    status = parse_status(read.result(), report)
    return None if status is None else status.stopped


def stopped_from_outside(name: str, forwarded: int | None, code: int) -> SandboxUnavailable:
    """A sandbox the controller did not stop that was stopped all the same (an eviction, a deletion or a stop
    by someone else, the node shutting down): never its command's success, whatever it answered to the signal."""
    who = f"its init forwarded signal {forwarded} from outside the sandbox" if forwarded else "it was deleted"
    return SandboxUnavailable(
        f"sandbox {name} was stopped from outside ({who}: an eviction, a stop or deletion by someone else, the"
        f" node shutting down); its command exited {code} after that, which is not its own end",
        details={"sandbox": name, "exit_code": code},
    )
