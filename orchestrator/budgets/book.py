"""The GrantBook: grants with budgets, kept in the service's state store.

A grant says "tenant T may run what matches these conditions without asking, until this expiry, within
these budgets". A run it covers first **reserves** what it may use at most (one execution, and per other
dimension the run's own most, or what is left of the budget when that is less); the caller narrows the
run to the reservation, so a run can never use more than it reserved, and the reservations together never
pass a budget. When the run ends its real usage is **settled** (charged, within the reservation) and the
rest freed; a run that never started is **released** (nothing charged). Each of these is one transaction
on the store's single thread, guarded in SQL (still active, unexpired, room left): fifty runs asking at
once for a grant of ten executions get exactly ten reservations, and a revocation stops the next one.

Every reservation ends in exactly one ledger row (settled or released): settling twice, or releasing
after settling, answers with that row again and charges nothing more. What a process that died left
reserved is released by ``recover`` at the next start.

A grant with ``on_exhausted: refuse`` is a **bound** (``bound``): it answers no ask, but every run it matches —
allowed by the policy, or approved by whoever answered its ask — reserves against it and is narrowed to that
reservation too (a run holds one reservation per grant that takes part in it); once it has no room left, a run
it matches is refused, GRANT.EXHAUSTED."""

from __future__ import annotations

import logging
import math
import re
import secrets
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from pydantic import ValidationError

from orchestrator.budgets.ledger import (
    Amounts,
    GrantLedger,
    Limits,
    NewBudgetGrant,
    StoredBound,
    StoredBudgetGrant,
    StoredCharge,
    StoredReservation,
)
from orchestrator.domain.errors import GrantExhausted, InputInvalid, NotFound
from orchestrator.domain.grants import (
    GRANT_ID_PREFIX,
    GRANT_STATES,
    Budgets,
    GrantCharge,
    GrantChargePage,
    GrantConditions,
    GrantRequest,
    GrantState,
    GrantView,
    Remaining,
    Usage,
)
from orchestrator.gate.matching import MatchConditions, Matcher, RequestFacts

log = logging.getLogger(__name__)

#: a run is covered only when its reservation lets it run at least this long (or its own timeout, if
#: shorter): the crumbs of a wall or CPU budget are not handed out as runs killed at once
MIN_RUN_S = 1.0
#: and only when it may write at least a byte to each of stdout and stderr
MIN_OUTPUT_BYTES = 2
_US = 1_000_000
_MATCHERS_KEPT = 4096
_CURSOR = re.compile(r"[0-9]{1,18}")


def _us(seconds: float) -> int:
    return round(seconds * _US)


def _seconds(us: int) -> float:
    return us / _US


@dataclass(frozen=True, slots=True)
class RunCaps:
    """What a run may use at most, before any grant narrows it: its timeout (``wall_seconds``), cpus x
    timeout (``cpu_seconds``) and stdout cap + stderr cap (``output_bytes``)."""

    wall_seconds: float
    cpu_seconds: float
    output_bytes: int

    def __post_init__(self) -> None:
        for name in ("wall_seconds", "cpu_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"RunCaps.{name} must be a positive number")
        if self.output_bytes < 1:
            raise ValueError("RunCaps.output_bytes must be at least 1")

    @classmethod
    def of(cls, *, timeout_s: float, cpus: float, stdout_max_bytes: int, stderr_max_bytes: int) -> RunCaps:
        """From a resolved profile's limits (and the request's timeout, if narrower)."""
        return cls(timeout_s, cpus * timeout_s, stdout_max_bytes + stderr_max_bytes)

    @property
    def cpus(self) -> float:
        return self.cpu_seconds / self.wall_seconds


@dataclass(frozen=True, slots=True)
class Reservation:
    """What a run under ``grant_id`` holds: the most it may use. Narrow the run to it before it starts
    (``timeout_s``, ``output_caps``); then ``settle`` (it ran) or ``release`` (it never started)."""

    grant_id: str
    execution_id: str
    executions: int
    cpu_seconds: float
    output_bytes: int
    wall_seconds: float
    # its grant is a bound (on_exhausted: refuse): a run stopped at its end is SANDBOX.GRANT_LIMIT
    bounding: bool = False

    def timeout_s(self, cpus: float) -> float:
        """The run's timeout: within the reserved wall seconds and the reserved CPU seconds at ``cpus``."""
        return min(self.wall_seconds, self.cpu_seconds / cpus)

    def output_caps(self, stdout_max_bytes: int, stderr_max_bytes: int) -> tuple[int, int]:
        """The run's (stdout, stderr) caps within the reserved output bytes: as given when they fit, else
        shared in their proportion (each at least 1)."""
        total = stdout_max_bytes + stderr_max_bytes
        if total <= self.output_bytes:
            return stdout_max_bytes, stderr_max_bytes
        stdout = min(max(1, self.output_bytes * stdout_max_bytes // total), self.output_bytes - 1)
        return stdout, self.output_bytes - stdout

    def most(self) -> Usage:
        """The reservation as usage: what to settle for a dimension whose real use is unknown (a backend
        that does not report CPU time), so the unknown is charged at its worst."""
        return Usage(
            executions=self.executions,
            cpu_seconds=self.cpu_seconds,
            output_bytes=self.output_bytes,
            wall_seconds=self.wall_seconds,
        )


class GrantBook:
    """Grants over a store (a ``GrantLedger``): the service's own (``GrantBook(service.store)``), or, for the
    in-process library, a store file of its own (``await orchestrator.state.open_grant_book(path)``, then
    ``aclose()``). Every figure lives in the store: several GrantBooks over one store agree."""

    def __init__(
        self,
        store: GrantLedger,
        *,
        min_run_s: float = MIN_RUN_S,
        clock: Callable[[], float] = time.time,
        owns_store: bool = False,
    ) -> None:
        self.store = store
        self.min_run_s = min_run_s
        self._clock = clock
        self._owns_store = owns_store
        self._matchers: dict[str, GrantMatcher | None] = {}  # grant id -> its conditions, compiled once

    async def aclose(self) -> None:
        if self._owns_store:
            await self.store.close()

    # -- issuing and reading -----------------------------------------------------------------------
    async def create(self, request: GrantRequest, *, created_by: str) -> GrantView:
        """Issue a grant. INPUT.INVALID (naming the field) for a condition a policy rule would refuse,
        or an expiry already past."""
        matcher = compile_conditions(request.conditions)
        now = self._clock()
        expires_at: float | None = None
        if request.expires_at is not None:
            expires_at = request.expires_at.timestamp()
            if expires_at <= now:
                raise InputInvalid("expires_at: must be in the future", details={"fields": ["expires_at"]})
        elif request.ttl_s is not None:
            expires_at = now + request.ttl_s
        grant_id = GRANT_ID_PREFIX + secrets.token_hex(12)
        self._remember(grant_id, matcher)
        stored = await self.store.add_budget_grant(
            NewBudgetGrant(
                id=grant_id,
                tenant=request.tenant,
                conditions=request.conditions.model_dump_json(exclude_none=True),
                reason=request.reason,
                created_by=created_by,
                created_at=now,
                expires_at=expires_at,
                limits=_limits(request.budgets),
                on_exhausted=request.on_exhausted,
            )
        )
        return self._view(stored)

    async def get(self, grant_id: str) -> GrantView | None:
        stored = await self.store.budget_grant(grant_id)
        return None if stored is None else self._view(stored)

    async def revoke(self, grant_id: str, *, by: str, reason: str) -> GrantView:
        """Revoked at once: no new run is covered (runs already under it end and are charged as usual).
        Revoking again keeps the first revocation. NOT_FOUND for an unknown grant."""
        stored = await self.store.revoke_budget_grant(grant_id, by=by, reason=reason, at=self._clock())
        if stored is None:
            raise NotFound(f"no grant {grant_id}", details={"grant_id": grant_id})
        return self._view(stored)

    async def charges(self, grant_id: str, *, cursor: str | None = None, limit: int = 200) -> GrantChargePage:
        """The grant's ledger, oldest first, ``limit`` rows from ``cursor`` (a previous page's)."""
        if cursor is not None and not _CURSOR.fullmatch(cursor):
            raise InputInvalid("cursor: a next_cursor this listing gave", details={"fields": ["cursor"]})
        rows = await self.store.budget_grant_charges(grant_id, after_seq=int(cursor or 0), limit=limit + 1)
        items = [_charge(row) for row in rows[:limit]]
        return GrantChargePage(items=items, next_cursor=str(rows[limit - 1].seq) if len(rows) > limit else None)

    # -- covering runs -----------------------------------------------------------------------------
    async def reserve(
        self, *, tenant: str, facts: RequestFacts, execution_id: str, caps: RunCaps
    ) -> Reservation | None:
        """The reservation of the oldest live grant of ``tenant`` that may answer an ask (not a bound) whose
        conditions match ``facts`` (every command of a compound one) and that has room for the run; None when
        none covers it (and when ``facts`` are another tenant's request: fails closed). Calling it again for an
        execution that holds such a reservation answers with that one."""
        if facts.sanitized.context.tenant != tenant:
            return None
        held = await self.store.reserve_budget_grant(
            tenant=tenant, execution_id=execution_id, now=self._clock(), covers=self._covers(facts), fit=self._fit(caps)
        )
        return None if held is None else _reservation(held)

    async def bound(
        self, *, tenant: str, facts: RequestFacts, execution_id: str, caps: RunCaps, dry: bool = False
    ) -> tuple[Reservation, ...]:
        """The reservations of every bound of ``tenant`` (on_exhausted: refuse) whose conditions match ``facts``,
        each within what it has left: a bound charges and narrows every run it matches (allowed or approved),
        and approves none. Empty when no bound matches (or ``facts`` are another tenant's). GRANT.EXHAUSTED,
        nothing reserved, when a matching bound has no room left for the run. ``dry``: that check only, nothing
        reserved (empty). Calling it again for an execution that holds them answers with those."""
        if facts.sanitized.context.tenant != tenant:
            return ()
        held = await self.store.reserve_budget_bounds(
            tenant=tenant,
            execution_id=execution_id,
            now=self._clock(),
            covers=self._covers(facts),
            fit=self._fit(caps),
            dry=dry,
        )
        if isinstance(held, StoredBound):
            raise GrantExhausted(
                f"grant {held.grant_id} bounds this request and has no room left for it (its budget is spent)",
                details={"grant_id": held.grant_id},
            )
        return tuple(_reservation(r) for r in held)

    async def settle(self, reservation: Reservation, used: Usage) -> GrantCharge:
        """The run ended: charge ``used`` (each dimension within what was reserved; one execution),
        free the rest. Once only: again, it answers with the same ledger row and charges nothing."""
        amounts = Amounts(
            executions=reservation.executions,
            cpu_us=_us(used.cpu_seconds),
            output_bytes=used.output_bytes,
            wall_us=_us(used.wall_seconds),
        )
        row = await self.store.settle_budget_grant(
            reservation.execution_id, reservation.grant_id, amounts, at=self._clock()
        )
        if row is None:  # pragma: no cover - from reserve(): its reservation, or its ledger row, is in the store
            raise NotFound(f"no reservation for {reservation.execution_id}")
        return _charge(row)

    async def release(self, reservation: Reservation) -> None:
        """The run never started: nothing is charged, the reservation is freed (no-op once settled)."""
        await self.store.settle_budget_grant(reservation.execution_id, reservation.grant_id, None, at=self._clock())

    async def recover(self, live_execution_ids: Collection[str]) -> list[GrantCharge]:
        """At start-up: release (charging nothing) every reservation whose execution is not live — the
        previous process died before it could settle them. Their ledger rows, released."""
        rows = await self.store.release_budget_reservations(frozenset(live_execution_ids), at=self._clock())
        return [_charge(row) for row in rows]

    # -- internals ---------------------------------------------------------------------------------
    def _covers(self, facts: RequestFacts) -> Callable[[str, str], bool]:
        def covers(grant_id: str, conditions: str) -> bool:
            matcher = self._matcher(grant_id, conditions)
            return matcher is not None and matcher.matches(facts, every_command=True)

        return covers

    def _fit(self, caps: RunCaps) -> Callable[[Limits], Amounts | None]:
        """What a run with ``caps`` takes of a grant with ``room`` left: its timeout within the wall and the
        CPU budgets (at its cpus), its CPU time at that timeout, its output within the output budget.
        None: less is left than one run needs (MIN_RUN_S, MIN_OUTPUT_BYTES, or its own most if smaller)."""
        wall_cap, cpu_cap, out_cap, cpus = _us(caps.wall_seconds), _us(caps.cpu_seconds), caps.output_bytes, caps.cpus
        least_wall = max(1, min(wall_cap, _us(self.min_run_s)))
        least_out = min(out_cap, MIN_OUTPUT_BYTES)

        def fit(room: Limits) -> Amounts | None:
            if room.executions is not None and room.executions < 1:
                return None
            wall = wall_cap if room.wall_us is None else min(wall_cap, room.wall_us)
            if room.cpu_us is not None:
                wall = min(wall, math.floor(room.cpu_us / cpus))
            out = out_cap if room.output_bytes is None else min(out_cap, room.output_bytes)
            if wall < least_wall or out < least_out:
                return None
            cpu = min(cpu_cap, math.ceil(wall * cpus))
            if room.cpu_us is not None:
                cpu = min(cpu, room.cpu_us)
            return Amounts(executions=1, cpu_us=cpu, output_bytes=out, wall_us=wall)

        return fit

    def _matcher(self, grant_id: str, conditions: str) -> GrantMatcher | None:
        """The grant's conditions compiled (once per grant: a grant's conditions never change)."""
        try:  # (one lookup: the cache is also filled from the event loop's thread)
            return self._matchers[grant_id]
        except KeyError:
            pass
        try:
            matcher: GrantMatcher | None = compile_conditions(GrantConditions.model_validate_json(conditions))
        except (InputInvalid, ValidationError):  # checked when it was issued: a store edited by hand
            log.warning("grant %s has conditions that do not compile: it covers nothing", grant_id)
            matcher = None
        self._remember(grant_id, matcher)
        return matcher

    def _remember(self, grant_id: str, matcher: GrantMatcher | None) -> None:
        if len(self._matchers) >= _MATCHERS_KEPT:
            self._matchers.clear()
        self._matchers[grant_id] = matcher

    def _view(self, stored: StoredBudgetGrant) -> GrantView:
        return _view(stored, self._clock())

    # last: the name shadows the builtin in the class body
    async def list(self, tenants: Sequence[str] | None = None, state: str | None = None) -> list[GrantView]:
        """Oldest first. ``tenants`` None: every tenant; ``state``: one of active, revoked, exhausted,
        expired (as read now)."""
        if state is not None and state not in GRANT_STATES:
            raise InputInvalid(f"state: one of {', '.join(GRANT_STATES)}", details={"fields": ["state"]})
        now = self._clock()
        rows = await self.store.budget_grants(tenants=tenants, state=state, now=now)
        return [_view(row, now) for row in rows]


@dataclass(frozen=True, slots=True)
class GrantMatcher:
    """A grant's conditions compiled: a policy rule's (``matcher``), and the one job run it names, if any."""

    matcher: Matcher
    job_key: str | None

    def matches(self, facts: RequestFacts, *, every_command: bool) -> bool:
        if self.job_key is not None:
            ci = facts.sanitized.context.ci
            if ci is None or ci.job_key != self.job_key:
                return False
        return self.matcher.matches(facts, every_command=every_command)


def compile_conditions(conditions: GrantConditions) -> GrantMatcher:
    """The conditions as a policy rule's, compiled: INPUT.INVALID naming ``conditions.<field>`` for
    anything a rule would refuse (an unknown tool, a command pattern without a program...)."""
    fields_given = conditions.model_dump(exclude_none=True)
    if conditions.ci is not None:  # a rule's ci: condition, and the job run apart (rules have no job_key)
        fields_given["ci"] = conditions.ci.rule_fields()
    try:
        match = MatchConditions.model_validate(fields_given)
    except ValidationError as err:
        problems = err.errors(include_input=False, include_url=False)
        fields = ["conditions." + ".".join(map(str, e["loc"])) for e in problems]
        message = "; ".join(f"{field}: {e['msg']}" for field, e in zip(fields, problems, strict=True))
        raise InputInvalid(message, details={"fields": fields}) from None
    return GrantMatcher(Matcher.compile(match), conditions.ci.job_key if conditions.ci is not None else None)


def _limits(budgets: Budgets) -> Limits:
    return Limits(
        executions=budgets.executions,
        cpu_us=None if budgets.cpu_seconds is None else max(1, _us(budgets.cpu_seconds)),
        output_bytes=budgets.output_bytes,
        wall_us=None if budgets.wall_seconds is None else max(1, _us(budgets.wall_seconds)),
    )


def _usage(amounts: Amounts) -> Usage:
    return Usage(
        executions=amounts.executions,
        cpu_seconds=_seconds(amounts.cpu_us),
        output_bytes=amounts.output_bytes,
        wall_seconds=_seconds(amounts.wall_us),
    )


def _at(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def _state(name: str) -> GrantState:
    if name not in GRANT_STATES:  # pragma: no cover - the store writes only these
        raise ValueError(f"unknown grant state {name!r}")
    return name


def _view(stored: StoredBudgetGrant, now: float) -> GrantView:
    limits, room = stored.limits, stored.room()
    return GrantView(
        id=stored.id,
        tenant=stored.tenant,
        conditions=GrantConditions.model_validate_json(stored.conditions),
        on_exhausted="refuse" if stored.on_exhausted == "refuse" else "ask",
        budgets=Budgets(
            executions=limits.executions,
            cpu_seconds=None if limits.cpu_us is None else _seconds(limits.cpu_us),
            output_bytes=limits.output_bytes,
            wall_seconds=None if limits.wall_us is None else _seconds(limits.wall_us),
        ),
        expires_at=None if stored.expires_at is None else _at(stored.expires_at),
        reason=stored.reason,
        created_by=stored.created_by,
        created_at=_at(stored.created_at),
        state=_state(stored.state_at(now)),
        used=_usage(stored.used),
        reserved=_usage(stored.reserved),
        remaining=Remaining(
            executions=room.executions,
            cpu_seconds=None if room.cpu_us is None else _seconds(room.cpu_us),
            output_bytes=room.output_bytes,
            wall_seconds=None if room.wall_us is None else _seconds(room.wall_us),
        ),
        revoked_by=stored.revoked_by,
        revoked_at=None if stored.revoked_at is None else _at(stored.revoked_at),
        revoke_reason=stored.revoke_reason,
    )


def _charge(row: StoredCharge) -> GrantCharge:
    return GrantCharge(
        grant_id=row.grant_id,
        execution_id=row.execution_id,
        kind="settled" if row.kind == "settled" else "released",
        charged=_usage(row.amounts),
        state=_state(row.state_after),
        at=_at(row.at),
    )


def _reservation(held: StoredReservation) -> Reservation:
    a = held.amounts
    return Reservation(
        grant_id=held.grant_id,
        execution_id=held.execution_id,
        executions=a.executions,
        cpu_seconds=_seconds(a.cpu_us),
        output_bytes=a.output_bytes,
        wall_seconds=_seconds(a.wall_us),
        bounding=held.bounding,
    )
