"""A sandbox's own parent cgroup: named from the sandbox only, below the engine's own parent, read after
the container is gone, removed from every tree, the ones left behind swept (never a live or a young one),
and given only where the engine fits (a dockerd of its own, its default parent, a tree this process sees
and may remove from)."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import pytest

from orchestrator.backends.docker import run_cgroup
from orchestrator.backends.docker.cgroups import UsageSampler, locate

NAME = "sbx-ex-19c0ffee-0123456789abcdef"
CONTAINER = "c0ffee" * 10 + "abcd"
V1_TREES = ("blkio", "cpuacct", "memory", "pids", "systemd")


def v1_parent(root: Path, name: str = NAME, *, leaf: bool = True) -> None:
    for tree in V1_TREES:
        (root / tree / run_cgroup.TOP / name).mkdir(parents=True)
    parent = f"{run_cgroup.TOP}/{name}"
    (root / "memory" / parent / "memory.max_usage_in_bytes").write_text("9000\n")
    (root / "cpuacct" / parent / "cpuacct.usage").write_text("5000000\n")
    (root / "pids" / parent / "pids.peak").write_text("3\n")
    (root / "pids" / parent / "pids.events").write_text("max 0\n")  # v1: a refused fork is counted below
    if leaf:
        for tree in ("memory", "cpuacct", "pids"):
            (root / tree / parent / CONTAINER).mkdir()
        (root / "memory" / parent / CONTAINER / "memory.max_usage_in_bytes").write_text("4096\n")
        (root / "cpuacct" / parent / CONTAINER / "cpuacct.usage").write_text("1000\n")
        (root / "pids" / parent / CONTAINER / "pids.peak").write_text("8\n")  # (a figure only the leaf has)
        (root / "pids" / parent / CONTAINER / "pids.events").write_text("max 2\n")


@pytest.mark.parametrize("name", ["", "sbx-", "../docker", "sbx-a/b", "sbx-..x/..", "other-name", "sbx-" + "x" * 200])
def test_only_a_sandbox_name_makes_a_parent(name: str) -> None:
    with pytest.raises(ValueError):
        run_cgroup.parent_of(name)


def test_the_parent_is_the_sandboxs_own_below_the_engines() -> None:
    assert run_cgroup.parent_of(NAME) == f"/docker/sandbox-orchestrator/{NAME}"


def test_the_container_is_found_under_its_parent(tmp_path: Path) -> None:
    v1_parent(tmp_path)
    files = locate(CONTAINER, tmp_path, parent=run_cgroup.parent_of(NAME))
    assert files is not None and files.memory_peak.parent.name == CONTAINER
    assert locate(CONTAINER, tmp_path) is None  # not directly under the engine's default parent


def test_the_parent_keeps_the_totals_once_the_container_is_gone(tmp_path: Path) -> None:
    v1_parent(tmp_path, leaf=False)  # the runtime removed the container's cgroup before any look
    totals = run_cgroup.totals(NAME, tmp_path)
    assert totals is not None
    sampler = UsageSampler(locate(CONTAINER, tmp_path, parent=run_cgroup.parent_of(NAME)), totals)
    assert not sampler.sample()  # the container is gone ...
    usage = sampler.usage()  # ... what it used is not; refused forks: unknown, never the parent's 0
    assert (usage.memory_peak_bytes, usage.cpu_total_ns, usage.pids_peak, usage.pids_limit_hits) == (
        9000,
        5000000,
        3,
        None,
    )


def test_while_it_runs_both_are_read_and_the_larger_kept(tmp_path: Path) -> None:
    v1_parent(tmp_path)
    sampler = UsageSampler(
        locate(CONTAINER, tmp_path, parent=run_cgroup.parent_of(NAME)), run_cgroup.totals(NAME, tmp_path)
    )
    assert sampler.sample()
    usage = sampler.usage()
    assert (usage.memory_peak_bytes, usage.cpu_total_ns) == (9000, 5000000)  # the parent's
    assert (usage.pids_peak, usage.pids_limit_hits) == (8, 2)  # the container's


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
    live, gone, young = "sbx-live", "sbx-gone", "sbx-young"
    for name in (live, gone, young):
        for tree in V1_TREES:
            (tmp_path / tree / run_cgroup.TOP / name).mkdir(parents=True)
    old = time.time() - 3600
    for tree in V1_TREES:
        for name in (live, gone):
            os.utime(tmp_path / tree / run_cgroup.TOP / name, (old, old))
    (tmp_path / "memory" / run_cgroup.TOP / "not-a-sandbox").mkdir()
    os.utime(tmp_path / "memory" / run_cgroup.TOP / "not-a-sandbox", (old, old))
    assert run_cgroup.sweep({live}, older_than_s=60, root=tmp_path) == 1
    left = sorted(p.name for p in (tmp_path / "memory" / run_cgroup.TOP).iterdir())
    assert left == ["not-a-sandbox", live, young]


# -- whether the engine fits --------------------------------------------------------------------------


def test_nobody_listening_is_asked_again(tmp_path: Path) -> None:
    assert run_cgroup.listener_pid(str(tmp_path / "no.sock")) is None
    assert run_cgroup.engine_fits(str(tmp_path / "no.sock"), tmp_path) is None


def test_the_listeners_pid_is_the_kernels(tmp_path: Path) -> None:
    path = str(tmp_path / "engine.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(1)
        assert run_cgroup.listener_pid(path) == os.getpid()
        # a listener that is no dockerd (socket activation, a forwarder): no parents of our own
        assert run_cgroup.engine_fits(path, tmp_path) is False


def own_cgroup_line() -> tuple[str, str]:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return controllers, path
    pytest.skip("no cgroup v1 memory hierarchy here")


def test_the_engines_cgroup_must_be_where_proc_says(tmp_path: Path) -> None:
    assert not run_cgroup.cgroup_visible(os.getpid(), tmp_path)  # an empty tree: not this one
    controllers, path = own_cgroup_line()
    (tmp_path / controllers / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    assert run_cgroup.cgroup_visible(os.getpid(), tmp_path)
    assert not run_cgroup.cgroup_visible(999_999_999, tmp_path)  # no such process


def test_a_path_out_of_a_cgroup_namespace_is_never_trusted(tmp_path: Path) -> None:
    (tmp_path / "proc" / "1").mkdir(parents=True)
    (tmp_path / "proc" / "1" / "cgroup").write_text("4:memory:/../..\n")
    (tmp_path / "memory").mkdir()  # memory/../.. exists: still no
    assert not run_cgroup.cgroup_visible(1, tmp_path, proc_root=tmp_path / "proc")
    (tmp_path / "proc" / "1" / "cgroup").write_text("4:memory:/\n")
    assert run_cgroup.cgroup_visible(1, tmp_path, proc_root=tmp_path / "proc")


def fake_dockerd(tmp_path: Path, args: list[str], config: object | None) -> Path:
    """A /proc/<pid> of a dockerd: comm, cmdline, and a root holding its configuration file."""
    proc = tmp_path / "proc" / "4242"
    (proc / "root" / "etc" / "docker").mkdir(parents=True)
    (proc / "cwd").mkdir()
    (proc / "comm").write_text("dockerd\n")
    (proc / "cmdline").write_bytes(b"\0".join(a.encode() for a in ["dockerd", *args]) + b"\0")
    if config is not None:
        (proc / "root" / "etc" / "docker" / "daemon.json").write_text(json.dumps(config))
    return proc


@pytest.mark.parametrize(
    ("args", "config", "fits"),
    [
        ([], None, True),  # no configuration file: the defaults
        ([], {"exec-opts": ["native.cgroupdriver=cgroupfs"]}, True),
        ([], {"cgroup-parent": "/containers"}, False),  # sandboxes would leave the operator's parent
        (["--cgroup-parent=/containers"], None, False),
        (["--cgroup-parent", "/containers"], None, False),
        (["--config-file", "/etc/docker/daemon.json"], {"cgroup-parent": "x"}, False),
        ([], "not an object", False),
    ],
)
def test_only_a_dockerd_with_its_default_parent_fits(
    tmp_path: Path, args: list[str], config: object, fits: bool
) -> None:
    fake_dockerd(tmp_path, args, config)
    assert run_cgroup.keeps_default_parent(4242, proc_root=tmp_path / "proc") is fits


def test_an_unreadable_configuration_or_another_program_does_not_fit(tmp_path: Path) -> None:
    proc = fake_dockerd(tmp_path, [], None)
    (proc / "root" / "etc" / "docker" / "daemon.json").write_text("{not json")
    assert not run_cgroup.keeps_default_parent(4242, proc_root=tmp_path / "proc")
    (proc / "comm").write_text("socat\n")  # a forwarder
    (proc / "root" / "etc" / "docker" / "daemon.json").unlink()
    assert not run_cgroup.keeps_default_parent(4242, proc_root=tmp_path / "proc")


def test_removal_needs_write_access_to_every_tree(tmp_path: Path) -> None:
    for tree in V1_TREES:
        (tmp_path / tree / "docker").mkdir(parents=True)
    assert run_cgroup.may_remove(tmp_path) is (os.access(tmp_path / "memory" / "docker", os.W_OK | os.X_OK))
    assert not run_cgroup.may_remove(tmp_path / "nothing-here")
