"""Cgroup counters: where they are, how they are read, and the reading taken as a process exits."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from orchestrator.backends.docker.cgroups import UsageSampler, locate
from orchestrator.backends.docker.exit_watch import ExitWatch

CONTAINER = "c0ffee" * 10 + "abcd"


def v1_tree(root: Path, *, events: str = "max 0\n") -> Path:
    for controller in ("memory", "cpuacct", "pids"):
        (root / controller / "docker" / CONTAINER).mkdir(parents=True)
    leaf = f"docker/{CONTAINER}"
    (root / "memory" / leaf / "memory.max_usage_in_bytes").write_text("4096\n")
    (root / "memory" / leaf / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    (root / "cpuacct" / leaf / "cpuacct.usage").write_text("1000\n")
    (root / "pids" / leaf / "pids.peak").write_text("7\n")
    (root / "pids" / leaf / "pids.events").write_text(events)
    (root / "pids" / leaf / "cgroup.procs").write_text("")
    return root / "pids" / leaf


def test_v1_counters_include_forks_refused_at_the_limit(tmp_path: Path) -> None:
    pids = v1_tree(tmp_path, events="max 3\n")
    files = locate(CONTAINER, tmp_path)
    assert files is not None
    assert (files.pids_events, files.procs) == (pids / "pids.events", pids / "cgroup.procs")
    sampler = UsageSampler(files)
    assert sampler.sample()
    usage = sampler.usage()
    assert (usage.memory_peak_bytes, usage.cpu_total_ns, usage.pids_peak, usage.pids_limit_hits) == (4096, 1000, 7, 3)
    (pids / "pids.events").write_text("max 1\n")  # never lowered by a later read
    sampler.sample()
    assert sampler.usage().pids_limit_hits == 3


def test_v2_pids_events_is_found(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    base = tmp_path / "system.slice" / f"docker-{CONTAINER}.scope"
    base.mkdir(parents=True)
    for name, text in (("memory.peak", "1\n"), ("cpu.stat", "usage_usec 5\n"), ("pids.events", "max 2\n")):
        (base / name).write_text(text)
    files = locate(CONTAINER, tmp_path)
    assert files is not None and files.version == 2
    sampler = UsageSampler(files)
    assert sampler.sample()
    assert (sampler.usage().cpu_total_ns, sampler.usage().pids_limit_hits) == (5000, 2)
    assert sampler.oom_kills is None  # no memory.events: unknown, never a 0
    (base / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    sampler = UsageSampler(locate(CONTAINER, tmp_path))
    assert sampler.sample()
    assert sampler.oom_kills == 1  # the kills, not the times the limit was reached (max) or charges failed (oom)


def test_the_counters_are_read_the_moment_a_watched_process_exits(tmp_path: Path) -> None:
    """A real process stands in for the container's init: the counter it leaves behind is read as it
    exits, before the "runtime" removes the cgroup (here: right after the process is reaped)."""
    pids = v1_tree(tmp_path)
    child = subprocess.Popen(["sleep", "30"])
    try:
        (pids / "cgroup.procs").write_text(f"0\n{child.pid}\n")  # 0: a process this namespace cannot see
        with open(f"/proc/{child.pid}/cgroup") as f:
            member = f.read().splitlines()[0]  # what /proc says of it stands in for the container id
        files = locate(CONTAINER, tmp_path)
        assert files is not None
        sampler = UsageSampler(files)
        assert sampler.sample()
        watch = ExitWatch(sampler, member, "test")
        assert watch.start()
        (pids / "pids.events").write_text("max 4\n")  # the limit was hit ...
        oom_control = tmp_path / "memory" / "docker" / CONTAINER / "memory.oom_control"
        oom_control.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")  # ... so was the memory's ...
        child.kill()  # ... and the container's processes are gone
        watch.finish(5.0)
        child.wait()
        for path in (*pids.iterdir(), oom_control):  # then the runtime removes the cgroup
            path.unlink()
        sampler.sample()
        assert sampler.usage().pids_limit_hits == 4
        assert sampler.oom_kills == 1
    finally:
        child.kill()
        child.wait()
        watch.stop()


def test_a_process_of_another_cgroup_is_never_watched(tmp_path: Path) -> None:
    pids = v1_tree(tmp_path)
    (pids / "cgroup.procs").write_text(f"{os.getpid()}\n")
    files = locate(CONTAINER, tmp_path)
    assert files is not None
    assert not ExitWatch(UsageSampler(files), CONTAINER, "test").start()  # this process is not in it


def test_stopping_a_watch_ends_its_thread_at_once(tmp_path: Path) -> None:
    pids = v1_tree(tmp_path)
    child = subprocess.Popen(["sleep", "30"])
    try:
        (pids / "cgroup.procs").write_text(f"{child.pid}\n")
        with open(f"/proc/{child.pid}/cgroup") as f:
            member = f.read().splitlines()[0]
        files = locate(CONTAINER, tmp_path)
        assert files is not None
        watch = ExitWatch(UsageSampler(files), member, "test")
        assert watch.start()
        started = time.monotonic()
        watch.stop()
        assert time.monotonic() - started < 0.5
        watch.stop()  # idempotent
    finally:
        child.kill()
        child.wait()
