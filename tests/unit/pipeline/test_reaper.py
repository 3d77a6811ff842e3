from __future__ import annotations

import os
import socket
import time

from orchestrator.backends.base import ManagedSandbox
from orchestrator.pipeline.reaper import orphan_reason
from orchestrator.pipeline.this_process import THIS_PROCESS, owner_label


def sandbox(owner: str | None, deadline: float | None, execution_id: str = "ex-1") -> ManagedSandbox:
    return ManagedSandbox("id", "sbx-" + execution_id, execution_id, owner, deadline, "running")


def test_orphan_rules() -> None:
    now = time.time()
    past, future = now - 60, now + 60
    me = owner_label()
    assert orphan_reason(sandbox(None, future), now) == "no owner label"
    # this process: an orphan exactly when it no longer runs that execution
    assert orphan_reason(sandbox(me, future), now) == "its controller (this process) no longer runs it"
    with THIS_PROCESS.running("ex-1"):
        assert orphan_reason(sandbox(me, future), now) is None
        assert orphan_reason(sandbox(me, past), now) == "deadline passed"  # a hard bound, owner or not
    host = me.split(":", 1)[0]
    parent = f"{host}:{os.getppid()}:" + owner_label_start(os.getppid())
    assert orphan_reason(sandbox(parent, future), now) is None  # another live process on this host
    # a dead owner on this host (a pid that cannot exist)
    assert "is gone" in (orphan_reason(sandbox(f"{host}:999999999:1", future), now) or "")
    # the same host name, another pid namespace (a controller in a container on the host's network):
    # its pids mean nothing here, only its deadline counts
    assert orphan_reason(sandbox(f"{socket.gethostname()}~pidns1:1:1", future), now) is None
    assert orphan_reason(sandbox(f"{socket.gethostname()}:1:1", future), now) is None
    # an owner elsewhere: only its deadline counts
    assert orphan_reason(sandbox("other-host:1:1", future), now) is None
    assert orphan_reason(sandbox("other-host:1:1", past), now) == "deadline passed"


def owner_label_start(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return f.read().rsplit(b")", 1)[1].split()[19].decode()


def test_a_cluster_owner_lives_as_long_as_its_lease() -> None:
    now = time.time()
    future = now + 60
    held = ManagedSandbox("id", "sbx-ex-1", "ex-1", "sandbox-system/controller-7d9", future, "running", True)
    lapsed = ManagedSandbox("id", "sbx-ex-1", "ex-1", "sandbox-system/controller-7d9", future, "running", False)
    unknown = ManagedSandbox("id", "sbx-ex-1", "ex-1", "sandbox-system/controller-7d9", future, "running")
    assert orphan_reason(held, now) is None
    assert orphan_reason(lapsed, now) == "owner sandbox-system/controller-7d9 is gone"
    assert orphan_reason(unknown, now) is None  # nothing known: its deadline decides
    # a process of this host is asked directly, whatever its (not yet expired) lease says
    host = owner_label().split(":", 1)[0]
    dead_here = ManagedSandbox("id", "sbx-ex-1", "ex-1", f"{host}:999999999:1", future, "running", True)
    assert "is gone" in (orphan_reason(dead_here, now) or "")
