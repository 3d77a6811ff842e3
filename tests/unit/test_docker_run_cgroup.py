"""A sandbox's own parent cgroup: named from the sandbox only, read after the container is gone, removed
from every tree, and the ones left behind swept (never a live or a young one)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from orchestrator.backends.docker import run_cgroup
from orchestrator.backends.docker.cgroups import UsageSampler, locate

NAME = "sbx-0123456789abcdef"
CONTAINER = "c0ffee" * 10 + "abcd"
V1_TREES = ("blkio", "cpuacct", "memory", "pids", "systemd")


def v1_parent(root: Path, name: str = NAME, *, leaf: bool = True) -> None:
    for tree in V1_TREES:
        (root / tree / run_cgroup.TOP / name).mkdir(parents=True)
    parent = f"{run_cgroup.TOP}/{name}"
    (root / "memory" / parent / "memory.max_usage_in_bytes").write_text("9000\n")
    (root / "cpuacct" / parent / "cpuacct.usage").write_text("5000000\n")
    (root / "pids" / parent / "pids.peak").write_text("3\n")
    if leaf:
        for tree in ("memory", "cpuacct", "pids"):
            (root / tree / parent / CONTAINER).mkdir()
        (root / "memory" / parent / CONTAINER / "memory.max_usage_in_bytes").write_text("4096\n")
        (root / "cpuacct" / parent / CONTAINER / "cpuacct.usage").write_text("1000\n")


@pytest.mark.parametrize("name", ["", "../docker", "a/b", ".hidden", "x" * 200])
def test_only_a_sandbox_name_makes_a_parent(name: str) -> None:
    with pytest.raises(ValueError):
        run_cgroup.parent_of(name)


def test_the_parent_is_the_sandboxs_own() -> None:
    assert run_cgroup.parent_of(NAME) == f"/sandbox-orchestrator/{NAME}"


def test_the_container_is_found_under_its_parent(tmp_path: Path) -> None:
    v1_parent(tmp_path)
    files = locate(CONTAINER, tmp_path, parent=run_cgroup.parent_of(NAME))
    assert files is not None and files.memory_peak.parent.name == CONTAINER
    assert locate(CONTAINER, tmp_path) is None  # not under the engine's default parent


def test_the_parent_keeps_the_totals_once_the_container_is_gone(tmp_path: Path) -> None:
    v1_parent(tmp_path, leaf=False)  # the runtime removed the container's cgroup before any look
    totals = run_cgroup.totals(NAME, tmp_path)
    assert totals is not None
    sampler = UsageSampler(locate(CONTAINER, tmp_path, parent=run_cgroup.parent_of(NAME)), totals)
    assert not sampler.sample()  # the container is gone ...
    usage = sampler.usage()  # ... what it used is not
    assert (usage.memory_peak_bytes, usage.cpu_total_ns, usage.pids_peak) == (9000, 5000000, 3)


def test_while_it_runs_the_larger_of_leaf_and_parent_is_kept(tmp_path: Path) -> None:
    v1_parent(tmp_path)
    sampler = UsageSampler(
        locate(CONTAINER, tmp_path, parent=run_cgroup.parent_of(NAME)), run_cgroup.totals(NAME, tmp_path)
    )
    assert sampler.sample()
    assert (sampler.usage().memory_peak_bytes, sampler.usage().cpu_total_ns) == (9000, 5000000)


def test_removed_from_every_tree_but_not_while_in_use(tmp_path: Path) -> None:
    v1_parent(tmp_path)
    (tmp_path / "cpu,cpuacct").symlink_to(tmp_path / "cpuacct")  # a comounted tree's alias: visited once
    assert not run_cgroup.remove(NAME, tmp_path)  # the container is still in it: stays
    for tree in V1_TREES:
        for entry in sorted((tmp_path / tree / run_cgroup.TOP / NAME).rglob("*"), reverse=True):
            entry.rmdir() if entry.is_dir() else entry.unlink()
    assert run_cgroup.remove(NAME, tmp_path)
    assert not any((tmp_path / tree / run_cgroup.TOP / NAME).exists() for tree in V1_TREES)
    assert run_cgroup.remove(NAME, tmp_path)  # idempotent


def test_v2_has_one_tree(tmp_path: Path) -> None:
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    parent = tmp_path / run_cgroup.TOP / NAME
    parent.mkdir(parents=True)
    (parent / "cpu.stat").write_text("usage_usec 7\n")
    (parent / "memory.peak").write_text("11\n")
    sampler = UsageSampler(None, run_cgroup.totals(NAME, tmp_path))
    assert not sampler.sample()
    assert (sampler.usage().cpu_total_ns, sampler.usage().memory_peak_bytes) == (7000, 11)
    (parent / "cpu.stat").unlink()
    (parent / "memory.peak").unlink()
    assert run_cgroup.remove(NAME, tmp_path) and not parent.exists()


def test_sweep_removes_only_old_parents_of_sandboxes_gone(tmp_path: Path) -> None:
    for name in ("sbx-live", "sbx-gone", "sbx-young"):
        for tree in V1_TREES:
            (tmp_path / tree / run_cgroup.TOP / name).mkdir(parents=True)
    old = time.time() - 3600
    for tree in V1_TREES:
        for name in ("sbx-live", "sbx-gone"):
            os.utime(tmp_path / tree / run_cgroup.TOP / name, (old, old))
    (tmp_path / "memory" / run_cgroup.TOP / "not a sandbox").mkdir()
    assert run_cgroup.sweep({"sbx-live"}, older_than_s=60, root=tmp_path) == 1
    left = sorted(p.name for p in (tmp_path / "memory" / run_cgroup.TOP).iterdir())
    assert left == ["not a sandbox", "sbx-live", "sbx-young"]


def own_memory_cgroup() -> str | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return path
    return None


def test_an_engine_is_given_parents_only_where_this_process_sees_its_cgroup(tmp_path: Path) -> None:
    assert not run_cgroup.sees_engine_tree(str(tmp_path / "no.sock"), tmp_path)  # nobody listens
    path = str(tmp_path / "engine.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        # the "engine" is this very process: its cgroup is not in the empty tree at tmp_path ...
        assert not run_cgroup.sees_engine_tree(path, tmp_path)
        own = own_memory_cgroup()
        if own is None:
            pytest.skip("no cgroup v1 memory hierarchy here")
        (tmp_path / "memory" / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
        assert run_cgroup.sees_engine_tree(path, tmp_path)  # ... and is, once there
