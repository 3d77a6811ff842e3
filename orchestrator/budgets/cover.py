"""Grants with budgets in the flow of a run: whether a live grant answers an ask, which bounds a run is charged
to, how their reservations narrow the run, and what the run's real use charges them (see budgets/book.py for the
bookkeeping).

A grant answers an ask the way an approval rule would (the operator who issued it is the approver), with
three limits of its own: it never turns a denial into a yes (only asks reach it), it never covers an
escalation (more network, a writable root, a mount: those are still asked about), and a run it covers is
narrowed to what the grant reserved for it, so the sum of what its runs may use never passes a budget.

A bound (``on_exhausted: refuse``) answers nothing: every run it matches — allowed, or approved by whoever
answered its ask — reserves against it and is narrowed to that reservation as well.
"""

from __future__ import annotations

from typing import Any

from orchestrator.budgets.book import GrantBook, Reservation, RunCaps
from orchestrator.domain.grants import Usage
from orchestrator.gate.gate import GateResult
from orchestrator.gate.matching import RequestFacts
from orchestrator.profiles import ResolvedProfile

#: sessions hold their sandbox for a lifetime, and write_stdin belongs to its session's grant: not covered
UNCOVERED_TOOLS = frozenset({"exec_command", "write_stdin"})


def coverable(gate: GateResult, uncovered_egress: list[str]) -> bool:
    """Whether a grant may answer this ask at all: a one-shot exec tool, and no escalation asked."""
    perms = gate.sanitized.sandbox_permissions
    if perms.network or perms.writable_root or perms.extra_mounts or uncovered_egress:
        return False
    sanitized = gate.sanitized
    return sanitized.tool not in UNCOVERED_TOOLS and (sanitized.argv is not None or sanitized.command is not None)


async def reserve(
    book: GrantBook, gate: GateResult, profile: ResolvedProfile, *, tenant: str, execution_id: str
) -> Reservation | None:
    """The reservation of the first live grant of ``tenant`` covering this request with room for one run."""
    facts = RequestFacts(gate.sanitized, gate.analysis, profile.name)
    return await book.reserve(tenant=tenant, facts=facts, execution_id=execution_id, caps=_caps(profile))


def boundable(gate: GateResult) -> bool:
    """Whether a bound may charge this request: a one-shot run (a session's sandbox outlives any reservation)."""
    sanitized = gate.sanitized
    return sanitized.tool not in UNCOVERED_TOOLS and (sanitized.argv is not None or sanitized.command is not None)


async def bound(
    book: GrantBook,
    gate: GateResult,
    profile: ResolvedProfile,
    *,
    tenant: str,
    execution_id: str,
    dry: bool = False,
) -> tuple[Reservation, ...]:
    """The reservations of every bound of ``tenant`` matching this request (GRANT.EXHAUSTED: one has no room)."""
    facts = RequestFacts(gate.sanitized, gate.analysis, profile.name)
    return await book.bound(tenant=tenant, facts=facts, execution_id=execution_id, caps=_caps(profile), dry=dry)


def _caps(profile: ResolvedProfile) -> RunCaps:
    return RunCaps.of(
        timeout_s=profile.wall_timeout_s,
        cpus=profile.cpus,
        stdout_max_bytes=profile.stdout_max_bytes,
        stderr_max_bytes=profile.stderr_max_bytes,
    )


def narrowed(profile: ResolvedProfile, reservation: Reservation) -> ResolvedProfile:
    """``profile`` within what ``reservation`` holds: its timeout and its output caps (a new hash)."""
    stdout, stderr = reservation.output_caps(profile.stdout_max_bytes, profile.stderr_max_bytes)
    wall = min(profile.wall_timeout_s, reservation.timeout_s(profile.cpus))
    if (stdout, stderr, wall) == (profile.stdout_max_bytes, profile.stderr_max_bytes, profile.wall_timeout_s):
        return profile
    fields: dict[str, Any] = profile.model_dump()
    fields.update(
        stdout_max_bytes=stdout,
        stderr_max_bytes=stderr,
        wall_timeout_s=wall,
        session_lifetime_s=min(profile.session_lifetime_s, wall),
        profile_hash="",  # computed anew: the narrowed profile is what the evidence names
    )
    return ResolvedProfile.model_validate(fields)


def used(reservation: Reservation, *, cpu_seconds: float | None, output_bytes: int, wall_seconds: float) -> Usage:
    """What a run that ran used, as the engine reported it: CPU time (charged at the reservation when the
    engine does not report it: ``cpu_seconds`` None), the output kept (what the caller was given), the wall
    time."""
    return Usage(
        executions=1,
        cpu_seconds=reservation.cpu_seconds if cpu_seconds is None else cpu_seconds,
        output_bytes=output_bytes,
        wall_seconds=wall_seconds,
    )
