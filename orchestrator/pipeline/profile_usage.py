"""The three questions a platform team asks of a profile's runs — what did they use, what should its limits
be, what would a change have done — answered the same way whoever asks: the service's API (runs from its
store) and ``sandboxctl profiles usage | recommend | whatif`` (runs from the service, or from an evidence
file). The answers themselves are pure (``profiles.usage_report``, ``profiles.recommend``, ``profiles.whatif``);
this binds them to the profile as runs get it now (``Profiles.named``: caps applied) and to the window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.profile_usage import GroupBy, NodeSize, Recommendation, UsageReport, WhatIfReport
from orchestrator.domain.usage import RunLimits, RunUsage
from orchestrator.pipeline.end_record import run_limits
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.profiles.models import RUNSC_MIN_PIDS
from orchestrator.profiles.recommend import recommend
from orchestrator.profiles.usage_report import usage_report
from orchestrator.profiles.whatif import whatif

__all__ = ["GroupBy", "ProfileNow", "limits_in_force", "profile_now", "recommendation", "usage", "what_if"]


@dataclass(frozen=True, slots=True)
class ProfileNow:
    """A profile's limits as a run gets them now, and the smallest pids limit its runtime takes."""

    limits: RunLimits
    min_pids: int


def profile_now(profiles: Profiles, name: str) -> ProfileNow:
    """PROFILE.NOT_FOUND when there is no such profile now (its past runs may still be read: ``usage``)."""
    resolved = profiles.named(name)
    return ProfileNow(run_limits(resolved), RUNSC_MIN_PIDS if resolved.runtime == "runsc" else 8)


def limits_in_force(profiles: Profiles) -> list[tuple[str, RunLimits]]:
    """Each profile in force that resolves under the caps, with the limits a run of it gets now."""
    found = []
    for name in profiles.registry.names():
        try:
            found.append((name, profile_now(profiles, name).limits))
        except OrchestratorError:  # a broken profile has no limits to draw: /v1/profiles says why
            continue
    return found


def usage(
    runs: Iterable[RunUsage], profiles: Profiles, name: str, *, since: float, until: float, by: GroupBy | None
) -> UsageReport:
    """What the runs used, held against the profile's limits now (none for a profile gone since)."""
    try:
        limits: RunLimits | None = profile_now(profiles, name).limits
    except OrchestratorError:  # gone, or no longer resolving under the caps: its runs are still its own
        limits = None
    return usage_report(runs, profile=name, limits=limits, since=since, until=until, group_by=by)


def recommendation(runs: Iterable[RunUsage], profiles: Profiles, name: str, *, min_runs: int) -> Recommendation:
    now = profile_now(profiles, name)
    return recommend(runs, profile=name, current=now.limits, min_runs=min_runs, min_pids=now.min_pids)


def what_if(
    runs: Iterable[RunUsage],
    profiles: Profiles,
    name: str,
    *,
    proposed: Mapping[str, str | float | int],
    node: NodeSize | None,
) -> WhatIfReport:
    return whatif(runs, profile=name, current=profile_now(profiles, name).limits, proposed=proposed, node=node)
