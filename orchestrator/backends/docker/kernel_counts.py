"""What the kernel's own cgroup counters add to the engine's account of how a sandbox ended.

The engine's state says an exit status and an OOM flag. Two ends it can miss or cannot tell apart:

* an OOM kill it never saw: the runsc shim registers its OOM watch after the start, and a sandbox that
  hits its memory limit within milliseconds can end first (the engine then says exit 1, OOMKilled false);
  the cgroup's ``oom_kill`` count says it all the same (``cgroups``);
* gVisor stopping itself at its pids limit: it counts its own host threads against the limit, and its
  kernel (the Sentry, a Go program) exits with Go's fatal status 2 when it cannot create one; the
  workload never sees EAGAIN (docs/setup-notes.md). Under runc the fork fails with EAGAIN and the
  workload goes on, so there an exit is the command's own.
"""

from __future__ import annotations

import dataclasses

from orchestrator.backends.base import ExitState, ResourceUsage

#: runtimes whose sandbox dies when it reaches its pids limit
DIES_AT_PIDS_LIMIT = frozenset({"runsc"})
#: the status a Go program (gVisor's Sentry) exits with on a fatal error such as a thread it cannot create
GO_FATAL_STATUS = 2


def with_kernel_counts(
    state: ExitState, *, runtime: str, usage: ResourceUsage, oom_kills: int | None, pids_limit: int
) -> ExitState:
    """``state`` (the engine's, of a sandbox that exited non-zero) with what the counters prove added."""
    if not state.exit_code:
        return state
    if oom_kills and not state.oom_killed:
        state = dataclasses.replace(state, oom_killed=True)
    if runtime in DIES_AT_PIDS_LIMIT:
        # the refusals; or, their last reading missed (see exit_watch), a peak at the limit and the Sentry's own
        # fatal status (a command's other non-zero status at a busy peak is its own)
        at_peak = usage.pids_peak is not None and usage.pids_peak >= pids_limit
        if usage.pids_limit_hits or (at_peak and state.exit_code == GO_FATAL_STATUS):
            state = dataclasses.replace(state, pids_limit_killed=True)
    return state
