"""The exit watch's first reading: woken by a watched process's exit, it reads the refused-fork count through the
descriptor it opened beforehand — what stays readable when the rest of the cgroup's files are gone by then."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

from orchestrator.backends.docker.cgroups import CgroupFiles, UsageSampler
from orchestrator.backends.docker.exit_watch import ExitWatch


def test_the_refused_forks_are_read_first_through_the_descriptor_opened_before(tmp_path: Path) -> None:
    events, oom_control = tmp_path / "pids.events", tmp_path / "memory.oom_control"
    events.write_text("max 0\n")
    oom_control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    # the cgroup's other files are gone when the watch wakes (as the runtime removes the cgroup): only the
    # pre-opened descriptor can still be read
    files = CgroupFiles(1, tmp_path / "gone" / "memory.max_usage_in_bytes", tmp_path / "gone" / "cpuacct.usage", None)
    sampler = UsageSampler(files)
    watch = ExitWatch(sampler, "container", "sbx-test")
    child = subprocess.Popen(["sleep", "0.3"])
    pidfd = os.pidfd_open(child.pid)
    events_fd, oom_fd = os.open(events, os.O_RDONLY), os.open(oom_control, os.O_RDONLY)
    watch._wake_r, watch._wake_w = os.pipe()
    thread = threading.Thread(target=watch._run, args=([pidfd], events_fd, oom_fd))
    thread.start()
    events.write_text("max 3\n")  # the kernel's count as the forks were refused, before the exit
    oom_control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")  # and as it killed at the memory limit
    child.wait()
    thread.join(5)
    os.close(watch._wake_w)
    assert not thread.is_alive()
    assert sampler.usage().pids_limit_hits == 3
    assert sampler.gone  # the full sample found the cgroup gone: the count came from the descriptor alone
    assert sampler.hits_read_at_exit  # its last watched process: the count is the whole of it
    assert sampler.oom_kills == 2


def test_no_refusal_counted_before_the_exit_is_no_proof_at_the_limit(tmp_path: Path) -> None:
    """A fork is refused only at the limit: below it a 0 is the truth; at it, a 0 read before the exit is unknown
    until the reading taken as the processes exited says 0."""
    events, peak = tmp_path / "pids.events", tmp_path / "pids.peak"
    events.write_text("max 0\n")
    memory = tmp_path / "memory.max_usage_in_bytes"
    memory.write_text("4096\n")
    cpu = tmp_path / "cpuacct.usage"
    cpu.write_text("1000\n")
    for value, limit, final, expected in ((15, 16, False, 0), (16, 16, False, None), (16, 16, True, 0)):
        peak.write_text(f"{value}\n")
        sampler = UsageSampler(CgroupFiles(1, memory, cpu, peak, events), pids_limit=limit)
        assert sampler.sample()
        if final:
            sampler.note_limit_hits(0, final=True)
        assert sampler.usage().pids_limit_hits == expected, (value, limit, final)
