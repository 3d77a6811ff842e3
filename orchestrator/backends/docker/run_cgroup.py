"""Each sandbox's own parent cgroup, so that what it used outlives it.

A container's cgroup goes with the container: the runtime removes it right after the container's
processes exit (7 ms under runc, measured), and a run that ended before the backend first looked at it
(a busy host, a command that exits at once) left no reading at all — its CPU time unknown, so a grant
was charged the worst for it. The engine takes a cgroup parent per container (``HostConfig.CgroupParent``)
and never removes that parent; the kernel charges CPU time, memory and pids to every ancestor of the
cgroup a process runs in, and an ancestor keeps those totals once its child is gone (checked on this
kernel: cgroup v1 cpuacct, memory, pids). So each sandbox gets ``/docker/sandbox-orchestrator/<its name>``
as its parent — below the engine's own default parent, so that whatever an operator set on ``/docker``
(all containers' memory, cpuset, pids) still holds for sandboxes: read when the run ends (exact),
removed with the sandbox.

Only where nothing can go wrong with it (``engine_fits``): the engine is a dockerd listening on the
socket itself (not a forwarder, not socket activation), with the cgroupfs driver (the systemd driver
wants slice names) and its default parent (no ``cgroup-parent`` of its own: sandboxes would leave it),
in this process's view of the cgroup tree, where this process may remove what the runtime creates.
Otherwise the parents could pile up where nobody removes them, or escape the operator's limits; the
engine's default parent then stays, and the figures are what sampling the container's own cgroup caught.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import socket
import struct
import time
from collections.abc import Iterable
from pathlib import Path

from orchestrator.backends._support.labels import NAME_PREFIX
from orchestrator.backends.base import ResourceUsage
from orchestrator.backends.docker.cgroups import CGROUP_ROOT, CgroupFiles, UsageSampler, files_at

log = logging.getLogger(__name__)

ENGINE_PARENT = "docker"  # the cgroupfs driver's default parent, below each hierarchy's root
TOP = f"{ENGINE_PARENT}/sandbox-orchestrator"  # the sandboxes' parents, relative to each hierarchy's root
PROC = Path("/proc")
DAEMON_CONFIG = "/etc/docker/daemon.json"  # dockerd's configuration when --config-file does not say
_PEERCRED = struct.Struct("iII")  # pid, uid, gid
# a container name (sandbox_name: sbx-<execution id>): never a path of its own
_NAME = re.compile(re.escape(NAME_PREFIX) + r"[A-Za-z0-9_.-]{1,120}")


def is_sandbox_name(name: str) -> bool:
    return _NAME.fullmatch(name) is not None


def parent_of(name: str) -> str:
    """The ``CgroupParent`` of the sandbox called ``name``."""
    if not is_sandbox_name(name):
        raise ValueError(f"not a sandbox name: {name!r}")
    return f"/{TOP}/{name}"


def engine_fits(socket_path: str, root: Path = CGROUP_ROOT) -> bool | None:
    """Whether sandboxes of the (cgroupfs-driven) engine at ``socket_path`` may get parents of their own;
    None when the socket did not answer (to be asked again)."""
    pid = listener_pid(socket_path)
    if pid is None:
        return None
    return pid > 0 and keeps_default_parent(pid) and cgroup_visible(pid, root) and may_remove(root)


def listener_pid(socket_path: str) -> int | None:
    """The pid of the process that listens on ``socket_path``, as the kernel gives it to this PID
    namespace (0: a process this namespace cannot see); None when nobody answers."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(1.0)
            conn.connect(socket_path)
            raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size)
    except OSError:
        return None
    return int(_PEERCRED.unpack(raw)[0])


def keeps_default_parent(pid: int, proc_root: Path = PROC) -> bool:
    """Whether ``pid`` is a dockerd started without a cgroup parent of its own (on its command line or
    in its configuration file); anything unreadable counts as no."""
    proc = proc_root / str(pid)
    try:
        if (proc / "comm").read_text().strip() != "dockerd":
            return False
        args = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return False
    if any(a == "--cgroup-parent" or a.startswith("--cgroup-parent=") for a in args):
        return False
    config = DAEMON_CONFIG
    for i, arg in enumerate(args):
        if arg == "--config-file" and i + 1 < len(args):
            config = args[i + 1]
        elif arg.startswith("--config-file="):
            config = arg.partition("=")[2]
    # the file as dockerd sees it: through its own root and working directory
    path = proc / "root" / config.lstrip("/") if config.startswith("/") else proc / "cwd" / config
    try:
        settings = json.loads(path.read_text())
    except FileNotFoundError:
        return True  # no configuration file: the defaults
    except (OSError, ValueError):
        return False
    return isinstance(settings, dict) and not settings.get("cgroup-parent")


def cgroup_visible(pid: int, root: Path = CGROUP_ROOT, proc_root: Path = PROC) -> bool:
    """Whether process ``pid``'s own cgroup is under ``root`` where /proc says it is: this process then
    sees the tree the engine lives in (not a cgroup namespace of its own, where paths read ``/..``)."""
    try:
        lines = (proc_root / str(pid) / "cgroup").read_text().splitlines()
    except OSError:
        return False
    unified = (root / "cgroup.controllers").exists()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if ".." in Path(path).parts:
            return False
        if unified and controllers == "":
            return (root / path.lstrip("/")).is_dir()
        if not unified and "memory" in controllers.split(","):
            return (root / controllers / path.lstrip("/")).is_dir()
    return False


def may_remove(root: Path = CGROUP_ROOT) -> bool:
    """Whether this process may remove, in every tree, what the runtime creates below the engine's
    parent (root may; another user, even one allowed on the engine's socket, may not)."""
    trees = _hierarchies(root)
    return bool(trees) and all(
        os.access(tree / ENGINE_PARENT if (tree / ENGINE_PARENT).is_dir() else tree, os.W_OK | os.X_OK)
        for tree in trees
    )


def totals(name: str, root: Path = CGROUP_ROOT) -> CgroupFiles | None:
    """The counter files of the sandbox's parent cgroup, once the runtime created it (at start). Not its
    ``pids.events``: on cgroup v1 (and v2 before 6.12) a refused fork is counted only in the container's
    own cgroup, so the parent's would say 0 where the truth is unknown."""
    files = files_at(parent_of(name).lstrip("/"), root)
    return None if files is None else dataclasses.replace(files, pids_events=None, procs=None)


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
        try:
            entries = list((tree / TOP).iterdir())
        except OSError:
            continue
        for entry in entries:
            if not is_sandbox_name(entry.name) or entry.name in keep:
                continue
            try:
                old = entry.is_dir() and now - entry.stat().st_mtime >= older_than_s
            except OSError:  # removed meanwhile (its sandbox's own destroy)
                continue
            if old:
                names.add(entry.name)
    return sum(1 for name in sorted(names) if remove(name, root))


def parent_sampler(name: str) -> UsageSampler | None:
    """A sampler of the sandbox's parent cgroup's totals (None when it has none)."""
    found = totals(name)
    return None if found is None else UsageSampler(None, found)


def release(name: str, sampler: UsageSampler | None, started: bool) -> ResourceUsage | None:
    """The totals a started sandbox's parent cgroup kept (exact, the container gone), then the parent."""
    if not is_sandbox_name(name):
        return None  # none of ours: nothing of it to remove
    final = None
    if started:
        sampler = sampler or parent_sampler(name)
        if sampler is not None:
            sampler.sample()
            final = sampler.usage()
    if not remove(name):
        log.warning("the parent cgroup of %s could not be removed; the reaper tries again", name)
    return final
