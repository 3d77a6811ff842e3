"""This controller process: the owner label its sandboxes carry, whether another owner still lives, and what it
runs now and ever mounted (``THIS_PROCESS``)."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator


def _process_start_ticks(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            # field 22 (starttime); the command name in field 2 may contain spaces, so split after ')'
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return "0"


def _host_id() -> str:
    """This host *and* pid namespace: a controller in a container (with the host's network, so the same
    host name) has pids a reaper outside it must not look up in its own /proc, and the other way round."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}~pidns{namespace}"


#: set by the Helm chart to the controller pod's namespace/name: unique per replica, and the same after a
#: container restart (a reaper on the cluster asks the owner's Lease whether it lives)
CONTROLLER_ID_ENV = "SANDBOX_CONTROLLER_ID"


def owner_label() -> str:
    """``$SANDBOX_CONTROLLER_ID`` where it is set (a controller pod); else ``host~pidns:pid:start``, naming
    this controller process so that a reaper can tell if it is gone (a recycled pid has another start time)."""
    configured = os.environ.get(CONTROLLER_ID_ENV, "").strip()
    if configured:
        return configured
    pid = os.getpid()
    return f"{_host_id()}:{pid}:{_process_start_ticks(pid)}"


class Sandboxes:
    """What this process runs now, and every workspace it ever mounted.

    A fact of the process, not of one orchestrator: sandboxes carry the process's owner label, so the orphan
    collector of any orchestrator in this process must leave every one of them alone while it runs, and what
    governs any later run must stay out of every workspace a sandbox of this process was given. Hence one
    instance, ``THIS_PROCESS``; a test starts from a clean one with ``isolated()``."""

    def __init__(self) -> None:
        # executions (and pre-started sandboxes' pool ids) running now: a sandbox this process owns that is not
        # among them was left behind (e.g. its removal failed while the engine was down), an orphan
        self._active: set[str] = set()
        # every workspace (real path) a sandbox was given: what governs later runs must stay out of all of them,
        # even if a path to it changes later (a reloaded policy, a moved link)
        self._mounted: set[str] = set()

    @contextlib.contextmanager
    def running(self, execution_id: str, workspace: str | os.PathLike[str] | None = None) -> Iterator[None]:
        if workspace is not None:
            self._mounted.add(os.path.realpath(workspace))
        self._active.add(execution_id)
        try:
            yield
        finally:
            self._active.discard(execution_id)

    def hold(self, sandbox_key: str) -> None:
        """A sandbox labelled ``sandbox_key`` (a pre-started one's pool id) is this process's until released:
        the orphan collector leaves it alone (see ``reaper.orphan_reason``)."""
        self._active.add(sandbox_key)

    def release(self, sandbox_key: str) -> None:
        self._active.discard(sandbox_key)

    def is_active(self, execution_id: str | None) -> bool:
        return execution_id in self._active

    def mounted(self) -> list[str]:
        return sorted(self._mounted)

    @contextlib.contextmanager
    def isolated(self) -> Iterator[None]:
        """As a process that never ran or mounted anything, until the block ends; then as before (tests)."""
        saved = set(self._active), set(self._mounted)
        self._active.clear()
        self._mounted.clear()
        try:
            yield
        finally:
            self._active, self._mounted = saved


THIS_PROCESS = Sandboxes()


def owner_alive(owner: str) -> bool | None:
    """True/False for an owner on this host and in this pid namespace; None when it lives elsewhere
    (another host or container: only its deadline counts)."""
    host, _, rest = owner.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != _host_id() or not pid_text.isdigit():
        return None
    pid = int(pid_text)
    if not os.path.exists(f"/proc/{pid}"):
        return False
    return _process_start_ticks(pid) == start
