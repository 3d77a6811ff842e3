"""What the node leaves on the host, and its clean-up: the sysctls the kubelet overwrites, the pods' cgroups,
mounts below the cluster's directories, and processes that outlived containerd.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterable, Iterator
from pathlib import Path

from . import supervise
from .settings import CGROUP_ROOT, KUBELET_SYSCTLS, Settings

PROC_SYS = Path("/proc/sys")
PROC_MOUNTS = Path("/proc/mounts")


# --- sysctls -------------------------------------------------------------------------------------------


def save_sysctls(saved: Path, keys: Iterable[str] = KUBELET_SYSCTLS, proc_sys: Path = PROC_SYS) -> None:
    """The values the kubelet overwrites at start (vm.overcommit_memory, kernel.panic, ...), kept so that
    down gives the host its own back. A file left by a run that never got to down already holds the
    originals, and stays."""
    if saved.exists():
        return
    lines = [f"{key} {(proc_sys / key).read_text().strip()}\n" for key in keys]
    tmp = saved.with_name(saved.name + ".tmp")
    tmp.write_text("".join(lines))
    tmp.replace(saved)


def restore_sysctls(saved: Path, proc_sys: Path = PROC_SYS) -> None:
    try:
        lines = saved.read_text().splitlines()
    except FileNotFoundError:
        return
    for line in lines:
        key, _, value = line.partition(" ")
        if not key:
            continue
        try:
            (proc_sys / key).write_text(value + "\n")
        except OSError:
            supervise.warn(f"could not restore {key} to {value}")
    saved.unlink(missing_ok=True)


# --- mounts and cgroups --------------------------------------------------------------------------------


def mounts(proc_mounts: Path = PROC_MOUNTS) -> Iterator[tuple[str, str]]:
    """(mount point, file system type) of every mount, octal escapes of /proc/mounts decoded."""
    for line in proc_mounts.read_text().splitlines():
        fields = line.split()
        if len(fields) >= 3:
            yield fields[1].encode().decode("unicode_escape"), fields[2]


def cgroup_mounts(proc_mounts: Path = PROC_MOUNTS) -> list[Path]:
    """The cgroup v1 hierarchies (and the unified one of a hybrid host) that are mounted."""
    return [Path(point) for point, kind in mounts(proc_mounts) if kind in ("cgroup", "cgroup2")]


def make_cgroup_root(root: str = CGROUP_ROOT) -> None:
    """The kubelet wants its cgroup root to exist in every hierarchy."""
    for mount in cgroup_mounts():
        (mount / root.lstrip("/")).mkdir(parents=True, exist_ok=True)


def cgroup_pids(root: str = CGROUP_ROOT) -> list[int]:
    pids = []
    for mount in cgroup_mounts():
        for procs in (mount / root.lstrip("/")).rglob("cgroup.procs"):
            try:
                pids += [int(p) for p in procs.read_text().split()]
            except (OSError, ValueError):
                continue
    return pids


def remove_cgroups(root: str = CGROUP_ROOT) -> None:
    """Empty cgroups below our root, deepest first (rmdir refuses a cgroup that still has processes)."""
    for mount in cgroup_mounts():
        top = mount / root.lstrip("/")
        if not top.is_dir():
            continue
        for directory, _subdirs, _files in os.walk(top, topdown=False):
            with contextlib.suppress(OSError):
                os.rmdir(directory)
        if top.is_dir():
            supervise.warn(f"could not remove the cgroup {top}")


def below(path: str, roots: Iterable[Path]) -> bool:
    return any(path == str(r) or path.startswith(f"{r}/") for r in roots)


def our_mounts(s: Settings, proc_mounts: Path = PROC_MOUNTS) -> list[str]:
    """Mount points below our directories (overlay roots, sandbox shm, netns, kubelet volumes), deepest
    first."""
    roots = (s.cluster_dir, s.cluster_run_dir)
    points = {point for point, _kind in mounts(proc_mounts) if below(point, roots)}
    return sorted(points, key=len, reverse=True)


def unmount(point: str) -> bool:
    for args in (["umount", point], ["umount", "-l", point]):
        if subprocess.run(args, capture_output=True, check=False).returncode == 0:
            return True
    return False


def unmount_ours(s: Settings) -> None:
    for point in our_mounts(s):
        if not unmount(point):
            supervise.warn(f"could not unmount {point}")


def kill_leftovers(s: Settings) -> None:
    """Shims and runsc processes that outlived containerd (their command lines name our socket or runsc
    root), then every process left in the pods' cgroups."""
    supervise.kill(supervise.pids_matching([str(s.containerd_socket), str(s.runsc_root)]))
    supervise.kill(cgroup_pids())


def remove_tree(*paths: Path) -> None:
    """rm -rf that never goes into another file system (a mount that could not be removed)."""
    subprocess.run(["rm", "-rf", "--one-file-system", "--", *map(str, paths)], check=False)
