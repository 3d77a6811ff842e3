"""What the kernel's counters add to the engine's exit state, as a table of cases."""

from __future__ import annotations

import pytest

from orchestrator.backends.base import ExitState, ResourceUsage
from orchestrator.backends.docker.kernel_counts import with_kernel_counts

LIMIT = 64


def _state(code: int | None, oom: bool = False) -> ExitState:
    return ExitState(exit_code=code, oom_killed=oom, started_at=None, finished_at=None)


@pytest.mark.parametrize(
    ("runtime", "code", "engine_oom", "oom_kills", "hits", "peak", "oom_killed", "pids_killed"),
    [
        ("runsc", 1, False, 1, 0, 30, True, False),  # the shim's watch came too late: the kernel's count says OOM
        ("runc", 137, True, None, None, None, True, False),  # the engine saw it: kept, count unknown or not
        ("runc", 1, False, 0, 0, 3, False, False),  # a plain failure stays one
        ("runc", 1, False, None, None, None, False, False),  # unknown is never an OOM
        ("runsc", 2, False, 0, 1, LIMIT, False, True),  # gVisor stopped at its pids limit: refusals counted
        ("runsc", 2, False, 0, None, LIMIT, False, True),  # refusals missed: the peak and the Sentry's status
        ("runsc", 1, False, 0, None, LIMIT, False, False),  # the command's own status at a busy peak
        ("runc", 2, False, 0, 5, LIMIT, False, False),  # runc: forks failed with EAGAIN, the exit is the command's
        ("runsc", 0, False, 1, 1, LIMIT, False, False),  # it succeeded: a child's kill explains nothing
        ("runsc", None, False, 1, 1, LIMIT, False, False),  # it never ran to an exit
    ],
)
def test_the_counters_add_what_they_prove(
    runtime: str,
    code: int | None,
    engine_oom: bool,
    oom_kills: int | None,
    hits: int | None,
    peak: int | None,
    oom_killed: bool,
    pids_killed: bool,
) -> None:
    usage = ResourceUsage(pids_peak=peak, pids_limit_hits=hits)
    state = with_kernel_counts(
        _state(code, engine_oom), runtime=runtime, usage=usage, oom_kills=oom_kills, pids_limit=LIMIT
    )
    assert (state.oom_killed, state.pids_limit_killed) == (oom_killed, pids_killed)
    assert state.exit_code == code
