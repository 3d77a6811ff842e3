"""One last reading of a container's cgroup counters, taken the moment its processes exit.

The kernel keeps the counters that tell how a sandbox ended — above all ``pids.events``' ``max``,
the forks it refused at the pids limit — only as long as the container's cgroup exists, and the
runtime removes that cgroup right after the container stops: measured here, 7 ms after the
container's init exits under runc, 30 ms after gVisor's sandbox process dies; the engine's ``wait``
and ``die`` come later still. Periodic sampling (``cgroups.UsageSampler``, 5 to 100 ms apart) misses
that window. So each process the container had when sampling began is watched through a pidfd,
and a thread woken by its exit reads the counters at once — ``pids.events`` first, through a descriptor
opened beforehand: one system call, where a full sample opens and reads several files and, on a busy
host, waits for the interpreter's lock between each. Still a race the kernel may win (under a load of
3 on 2 cores, about one run in 16 here; or the container ends before its cgroup is first read): the
count is then a lower bound, and the pipeline falls back on the pids peak (see ``executor``).

Only when this process sees the container's processes (a local engine, the host's PID namespace):
each pid listed in the cgroup is opened as a pidfd first and then checked to still belong to that
cgroup, so a recycled pid is never watched. Anything else leaves periodic sampling alone in charge.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from pathlib import Path

from orchestrator.backends.docker.cgroups import UsageSampler, keyed_value

log = logging.getLogger(__name__)


def _member_pidfds(procs: Path, container_id: str) -> list[int]:
    try:
        listed = procs.read_text().split()
    except OSError:
        return []
    fds: list[int] = []
    for text in listed:
        pid = int(text) if text.isdigit() else 0
        if pid <= 0:  # 0: a process outside this PID namespace
            continue
        try:
            fd = os.pidfd_open(pid)
        except (OSError, AttributeError):
            continue
        try:
            with open(f"/proc/{pid}/cgroup") as f:
                member = container_id in f.read()
        except OSError:
            member = False
        if member:
            fds.append(fd)
        else:
            os.close(fd)
    return fds


def _open_or_none(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


class ExitWatch:
    """Samples ``sampler`` each time one of the container's initial processes exits."""

    def __init__(self, sampler: UsageSampler, container_id: str, name: str) -> None:
        self._sampler = sampler
        self._container_id = container_id
        self._name = name
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1

    def start(self) -> bool:
        """Begin watching; False when there is nothing this process can watch."""
        procs = self._sampler.files.procs if self._sampler.files is not None else None
        if procs is None:
            return False
        fds = _member_pidfds(procs, self._container_id)
        if not fds:
            return False
        files = self._sampler.files
        events_fd = _open_or_none(files.pids_events if files is not None else None)
        oom_fd = _open_or_none(files.oom_events if files is not None else None)
        self._wake_r, self._wake_w = os.pipe()
        self._thread = threading.Thread(
            target=self._run, args=(fds, events_fd, oom_fd), name=f"exit-watch-{self._name}", daemon=True
        )
        self._thread.start()
        return True

    def _run(self, fds: list[int], events_fd: int | None, oom_fd: int | None) -> None:
        poller = select.poll()
        for fd in (*fds, self._wake_r):
            poller.register(fd, select.POLLIN)
        left = set(fds)
        try:
            while left:
                ready = [fd for fd, _ in poller.poll()]
                if any(fd in left for fd in ready):
                    if events_fd is not None:  # the cgroup is about to go: the refused forks first
                        last = not (left - set(ready))  # the container's last watched process (its init) is gone
                        with contextlib.suppress(OSError):  # ENODEV: gone already
                            count = keyed_value(os.pread(events_fd, 4096, 0), b"max")
                            self._sampler.note_limit_hits(count, final=last)
                    if oom_fd is not None:  # a process the kernel killed at the memory limit: counted before it died
                        with contextlib.suppress(OSError):
                            self._sampler.note_oom_kills(keyed_value(os.pread(oom_fd, 4096, 0), b"oom_kill"))
                    self._sampler.sample()
                for fd in ready:
                    if fd == self._wake_r:
                        return
                    if fd in left:
                        poller.unregister(fd)
                        left.discard(fd)
                        os.close(fd)
        except Exception:  # never let the watch break an execution; say so
            log.exception("exit watch of %s failed", self._name)
        finally:
            for fd in left:
                os.close(fd)
            for counter in (events_fd, oom_fd):
                if counter is not None:
                    os.close(counter)
            os.close(self._wake_r)

    def finish(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) for the reading the last exit triggers: once the engine says
        the container stopped, every watched process has exited and the thread is on its way out."""
        if self._thread is not None:
            self._thread.join(timeout_s)

    def stop(self) -> None:
        """End the watch now (teardown); idempotent."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        if thread.is_alive():
            with contextlib.suppress(OSError):  # EPIPE: it ended meanwhile
                os.write(self._wake_w, b".")
            thread.join(1.0)
        os.close(self._wake_w)
