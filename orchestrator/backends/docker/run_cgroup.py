"""Each sandbox's own parent cgroup, so that what it used outlives it.

A container's cgroup goes with the container: the runtime removes it right after the container's
processes exit (7 ms under runc, measured), and a run that ended before the backend first looked at it
(a busy host, a command that exits at once) left no reading at all — its CPU time unknown, so a grant
was charged the worst for it. The engine takes a cgroup parent per container (``HostConfig.CgroupParent``)
and never removes that parent; the kernel charges CPU time, memory and pids to every ancestor of the
cgroup a process runs in, and an ancestor keeps those totals once its child is gone (checked on this
kernel: cgroup v1 cpuacct, memory, pids). So each sandbox gets ``/sandbox-orchestrator/<its name>`` as
its parent: read when the run ends (exact), removed with the sandbox.

Only with the engine's cgroupfs driver (the systemd driver wants slice names) and when this process sees
the cgroup tree the engine itself lives in (``sees_engine_tree``): otherwise the parents would pile up
where this process cannot remove them. Elsewhere the engine's default parent stays and the figures are
what sampling the container's own cgroup caught.
"""

from __future__ import annotations

import os
import re
import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path

from orchestrator.backends.docker.cgroups import CGROUP_ROOT, CgroupFiles, files_at

TOP = "sandbox-orchestrator"
_PEERCRED = struct.Struct("iII")  # pid, uid, gid
# a container name (container_name: sbx-<execution id>): never a path of its own
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def is_sandbox_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def parent_of(name: str) -> str:
    """The ``CgroupParent`` of the sandbox called ``name``."""
    if not is_sandbox_name(name):
        raise ValueError(f"not a sandbox name: {name!r}")
    return f"/{TOP}/{name}"


def sees_engine_tree(socket_path: str, root: Path = CGROUP_ROOT) -> bool:
    """Whether the engine listening on ``socket_path`` sits in this process's view of the cgroup tree:
    its pid as the kernel gives it to this PID namespace (0 when it cannot be seen), and its own cgroup
    found under ``root`` at the path /proc gives for it."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(socket_path)
            raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
        pid = _PEERCRED.unpack(raw)[0]
        if pid <= 0:
            return False
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except (OSError, struct.error):
        return False
    unified = (root / "cgroup.controllers").exists()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if unified and controllers == "":
            return (root / path.lstrip("/")).is_dir()
        if not unified and "memory" in controllers.split(","):
            return (root / controllers / path.lstrip("/")).is_dir()
    return False


def totals(name: str, root: Path = CGROUP_ROOT) -> CgroupFiles | None:
    """The counter files of the sandbox's parent cgroup, once the runtime created it (at start)."""
    return files_at(parent_of(name).lstrip("/"), root)


def _hierarchies(root: Path) -> list[Path]:
    """Every cgroup tree the runtime creates the parent in: the unified one (v2), or each mounted v1
    hierarchy (a comounted one, such as cpu,cpuacct, once: the others are links to it)."""
    if (root / "cgroup.controllers").exists():
        return [root]
    try:
        return [entry for entry in root.iterdir() if entry.is_dir() and not entry.is_symlink()]
    except OSError:
        return []


def remove(name: str, root: Path = CGROUP_ROOT) -> bool:
    """Remove the sandbox's parent cgroup from every tree; True when none is left. A parent that still
    holds its container (not removed yet) stays: the kernel refuses to remove a cgroup in use."""
    gone = True
    relative = parent_of(name).lstrip("/")
    for tree in _hierarchies(root):
        try:
            os.rmdir(tree / relative)
        except FileNotFoundError:
            continue
        except OSError:
            gone = False
    return gone


def sweep(live: Iterable[str], *, older_than_s: float, root: Path = CGROUP_ROOT) -> int:
    """Remove the parents of sandboxes that are gone (a controller that stopped before removing them),
    leaving those named in ``live`` and any younger than ``older_than_s`` (a sandbox being created by
    another controller on this engine); returns how many went."""
    keep = set(live)
    now = time.time()
    names: set[str] = set()
    for tree in _hierarchies(root):
        top = tree / TOP
        try:
            for entry in top.iterdir():
                ours = entry.is_dir() and is_sandbox_name(entry.name) and entry.name not in keep
                if ours and now - entry.stat().st_mtime >= older_than_s:
                    names.add(entry.name)
        except OSError:
            continue
    return sum(1 for name in sorted(names) if remove(name, root))
