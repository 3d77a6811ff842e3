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
    events = tmp_path / "pids.events"
    events.write_text("max 0\n")
    # the cgroup's other files are gone when the watch wakes (as the runtime removes the cgroup): only the
    # pre-opened descriptor can still be read
    files = CgroupFiles(1, tmp_path / "gone" / "memory.max_usage_in_bytes", tmp_path / "gone" / "cpuacct.usage", None)
    sampler = UsageSampler(files)
    watch = ExitWatch(sampler, "container", "sbx-test")
    child = subprocess.Popen(["sleep", "0.3"])
    pidfd = os.pidfd_open(child.pid)
    events_fd = os.open(events, os.O_RDONLY)
    watch._wake_r, watch._wake_w = os.pipe()
    thread = threading.Thread(target=watch._run, args=([pidfd], events_fd))
    thread.start()
    events.write_text("max 3\n")  # the kernel's count as the forks were refused, before the exit
    child.wait()
    thread.join(5)
    os.close(watch._wake_w)
    assert not thread.is_alive()
    assert sampler.usage().pids_limit_hits == 3
    assert sampler.gone  # the full sample found the cgroup gone: the count came from the descriptor alone
