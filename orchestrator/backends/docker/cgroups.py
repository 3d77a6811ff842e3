"""Resource use of a running container, read from its cgroup files on the engine's host.

The Docker API cannot say what a container used once it has exited (``stats`` of a stopped container
is empty, and its cgroup is deleted when it stops). So while it runs, the backend samples the
kernel's own counters — cheap reads of in-memory pseudo-files, no engine request:

* memory peak: cgroup v1 ``memory.max_usage_in_bytes`` / v2 ``memory.peak`` — a high-water mark kept
  by the kernel, so the last sample is the peak unless memory grew after it;
* CPU time: v1 ``cpuacct.usage`` (ns) / v2 ``cpu.stat`` ``usage_usec`` — cumulative, so the last
  sample is a lower bound (it misses at most the final sampling interval);
* pids peak: ``pids.peak`` (v2, and v1 on recent kernels) — a high-water mark;
* pids limit hits: ``pids.events`` ``max`` — how many forks (or, under gVisor, host threads of the
  sandbox itself) the kernel refused at the pids limit;
* OOM kills: v1 ``memory.oom_control`` / v2 ``memory.events`` ``oom_kill`` — how many processes the kernel
  killed at the memory limit. The engine's own OOM flag comes from a watch its runtime shim registers after
  the start, and under gVisor a sandbox that hits its limit within milliseconds ends before that watch
  exists (measured: 2 runs in 20, four at a time): this counter is the kernel's account, not a race.

Sampling starts right after start and backs off from 5 ms to 100 ms; it stops when the cgroup
disappears (``exit_watch`` takes the last reading as the container's processes exit, before the
runtime removes the cgroup). A sandbox with a parent cgroup of its own (``run_cgroup``: the cgroupfs
driver) is also read there — CPU time, memory peak and pids peak exact even after its exit, however
short the run. Under gVisor the cgroup also holds the sandbox's own processes (the Sentry and Gofer),
so memory and pids include that overhead. Only possible when the engine is local (unix socket) and
this process sees the host's ``/sys/fs/cgroup``; otherwise every figure stays unknown (``None``).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from orchestrator.backends.base import ResourceUsage

CGROUP_ROOT = Path("/sys/fs/cgroup")
FIRST_INTERVAL_S = 0.005
MAX_INTERVAL_S = 0.1


def _read_int(path: Path) -> int | None:
    try:
        with open(path, "rb") as f:
            text = f.read(64).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _read_keyed(path: Path, key: bytes) -> int | None:
    """The value of ``key`` in a flat keyed file (``cpu.stat``'s usage_usec, ``pids.events``' max)."""
    try:
        with open(path, "rb") as f:
            return keyed_value(f.read(4096), key)
    except OSError:
        return None


def keyed_value(text: bytes, key: bytes) -> int | None:
    for line in text.splitlines():
        name, _, value = line.partition(b" ")
        if name == key and value.strip().isdigit():
            return int(value)
    return None


@dataclass(frozen=True, slots=True)
class CgroupFiles:
    version: int
    memory_peak: Path
    cpu: Path
    pids_peak: Path | None
    pids_events: Path | None = None
    procs: Path | None = None  # cgroup.procs: the container's processes (those this process can see)
    oom_events: Path | None = None  # memory.oom_control (v1) / memory.events (v2): its oom_kill count


def locate(container_id: str, root: Path = CGROUP_ROOT, parent: str = "") -> CgroupFiles | None:
    """The counter files of a running container (cgroupfs or systemd driver, v1 or v2), or None; under
    ``parent`` (its ``CgroupParent``) when it was given one (see ``run_cgroup``)."""
    if parent:
        leaves: tuple[str, ...] = (f"{parent.strip('/')}/{container_id}",)
    else:
        leaves = (f"docker/{container_id}", f"system.slice/docker-{container_id}.scope")
    for leaf in leaves:
        files = files_at(leaf, root)
        if files is not None:
            return files
    return None


def files_at(path: str, root: Path = CGROUP_ROOT) -> CgroupFiles | None:
    """The counter files of the cgroup at ``path`` (relative to each hierarchy's root), if it exists."""
    if (root / "cgroup.controllers").exists():  # unified hierarchy (v2)
        base = root / path
        if not base.is_dir():
            return None
        return CgroupFiles(
            2,
            base / "memory.peak",
            base / "cpu.stat",
            _existing(base / "pids.peak"),
            _existing(base / "pids.events"),
            base / "cgroup.procs",
            _existing(base / "memory.events"),
        )
    memory = root / "memory" / path
    if not memory.is_dir():
        return None
    cpu = next(
        (root / c / path / "cpuacct.usage" for c in ("cpuacct", "cpu,cpuacct") if (root / c / path).is_dir()),
        root / "cpuacct" / path / "cpuacct.usage",
    )
    pids = root / "pids" / path
    return CgroupFiles(
        1,
        memory / "memory.max_usage_in_bytes",
        cpu,
        _existing(pids / "pids.peak"),
        _existing(pids / "pids.events"),
        _existing(pids / "cgroup.procs"),
        _existing(memory / "memory.oom_control"),
    )


def _existing(path: Path) -> Path | None:
    return path if path.exists() else None


class UsageSampler:
    """Keeps the last values read from one container's cgroup (thread-safe: the event loop samples
    periodically, ``exit_watch`` at the container's exit). ``totals`` are the counters of the sandbox's
    own parent cgroup (``run_cgroup``), which include the container's and outlive it: read at every
    sample, so the usage is known exactly even once the container's own cgroup is gone."""

    def __init__(self, files: CgroupFiles | None, totals: CgroupFiles | None = None, pids_limit: int = 0) -> None:
        self.files = files
        self.totals = totals
        self.pids_limit = pids_limit  # 0: not known here
        self.memory_peak: int | None = None
        self.cpu_ns: int | None = None
        self.pids_peak: int | None = None
        self.pids_limit_hits: int | None = None
        self.oom_kills: int | None = None  # processes the kernel killed at the memory limit (a lower bound)
        self.hits_read_at_exit = False  # the exit watch read pids.events as the container's processes exited
        self.gone = files is None
        self._lock = threading.Lock()

    def sample(self) -> bool:
        """Read the counters; False once the container's cgroup is gone (the container stopped)."""
        with self._lock:
            if self.totals is not None:
                self._read(self.totals)
            if self.gone or self.files is None:
                return False
            if not self._read(self.files):
                self.gone = True
            return not self.gone

    def _read(self, files: CgroupFiles) -> bool:
        memory = _read_int(files.memory_peak)
        if memory is None and not os.path.exists(files.memory_peak):
            return False
        if files.version == 1:
            cpu = _read_int(files.cpu)
        else:
            usec = _read_keyed(files.cpu, b"usage_usec")
            cpu = usec * 1000 if usec is not None else None
        pids = _read_int(files.pids_peak) if files.pids_peak is not None else None
        hits = _read_keyed(files.pids_events, b"max") if files.pids_events is not None else None
        kills = _read_keyed(files.oom_events, b"oom_kill") if files.oom_events is not None else None
        # high-water marks and cumulative counters only grow: never let a late partial read lower them
        if memory is not None:
            self.memory_peak = max(memory, self.memory_peak or 0)
        if cpu is not None:
            self.cpu_ns = max(cpu, self.cpu_ns or 0)
        if pids is not None:
            self.pids_peak = max(pids, self.pids_peak or 0)
        if hits is not None:
            self.pids_limit_hits = max(hits, self.pids_limit_hits or 0)
        if kills is not None:
            self.oom_kills = max(kills, self.oom_kills or 0)
        return True

    def note_limit_hits(self, hits: int | None, *, final: bool) -> None:
        """A ``pids.events`` max read as one of the container's processes exited (``exit_watch``: the one reading
        that cannot wait); ``final``: its last one, so the count is the whole of it."""
        if hits is not None:
            with self._lock:
                self.pids_limit_hits = max(hits, self.pids_limit_hits or 0)
                self.hits_read_at_exit = self.hits_read_at_exit or final

    def note_oom_kills(self, kills: int | None) -> None:
        """An ``oom_kill`` count read as one of the container's processes exited (``exit_watch``)."""
        if kills is not None:
            with self._lock:
                self.oom_kills = max(kills, self.oom_kills or 0)

    def usage(self) -> ResourceUsage:
        """What was read. No refused fork counted by a reading taken before the exit is no proof there was none once
        the peak reached the limit (a fork is refused only there): the count is then unknown, never a false 0."""
        with self._lock:
            hits = self.pids_limit_hits
            at_limit = self.pids_limit > 0 and self.pids_peak is not None and self.pids_peak >= self.pids_limit
            if hits == 0 and at_limit and not self.hits_read_at_exit:
                hits = None
            known = (self.memory_peak, self.cpu_ns, self.pids_peak, hits) != (None, None, None, None)
            return ResourceUsage(
                memory_peak_bytes=self.memory_peak,
                cpu_total_ns=self.cpu_ns,
                pids_peak=self.pids_peak,
                pids_limit_hits=hits,
                source="cgroup" if known else None,
            )
