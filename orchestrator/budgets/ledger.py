"""What the GrantBook keeps in a store: grants, their open reservations and their ledger, in the store's units.

``GrantLedger`` is what the book asks of its store; ``orchestrator.state.StateStore`` is the one that keeps
them (SQLite, one transaction per change on the store's single thread). The book needs no more than this.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Amounts:
    """Amounts in the store's units: runs, CPU microseconds, output bytes, wall microseconds (integers:
    sums are exact, no float drift past a budget)."""

    executions: int = 0
    cpu_us: int = 0
    output_bytes: int = 0
    wall_us: int = 0

    def __iter__(self) -> Iterator[int]:
        return iter((self.executions, self.cpu_us, self.output_bytes, self.wall_us))


@dataclass(frozen=True, slots=True)
class Limits:
    """A grant's bounds, in the store's units; None: no bound in that dimension."""

    executions: int | None = None
    cpu_us: int | None = None
    output_bytes: int | None = None
    wall_us: int | None = None

    def __iter__(self) -> Iterator[int | None]:
        return iter((self.executions, self.cpu_us, self.output_bytes, self.wall_us))


@dataclass(frozen=True, slots=True)
class NewBudgetGrant:
    id: str
    tenant: str
    conditions: str  # GrantConditions as JSON
    reason: str
    created_by: str
    created_at: float
    expires_at: float | None
    limits: Limits
    on_exhausted: str = "ask"  # ask | refuse


@dataclass(frozen=True, slots=True)
class StoredBudgetGrant:
    seq: int
    id: str
    tenant: str
    conditions: str
    reason: str
    created_by: str
    created_at: float
    expires_at: float | None
    state: str  # active | revoked | exhausted: 'expired' is read, never stored
    limits: Limits
    used: Amounts
    reserved: Amounts
    revoked_by: str | None
    revoked_at: float | None
    revoke_reason: str | None
    on_exhausted: str = "ask"  # ask | refuse

    def state_at(self, now: float) -> str:
        """The state as read at ``now``: an active grant past its expiry is expired."""
        if self.state == "active" and self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return self.state

    def room(self) -> Limits:
        """What can still be reserved per bounded dimension (None: no bound)."""
        return room(tuple(self.limits), tuple(self.used), tuple(self.reserved))


@dataclass(frozen=True, slots=True)
class StoredReservation:
    execution_id: str
    grant_id: str
    amounts: Amounts
    reserved_at: float
    bounding: bool = False  # its grant is a bound (on_exhausted: refuse): it charges what it matches, approves nothing


@dataclass(frozen=True, slots=True)
class StoredBound:
    """No reservation: ``grant_id`` bounds the request (on_exhausted: refuse), matches it, and has no room."""

    grant_id: str


@dataclass(frozen=True, slots=True)
class StoredCharge:
    seq: int
    grant_id: str
    execution_id: str
    kind: str  # settled | released
    amounts: Amounts
    state_after: str
    at: float


def room(limits: Sequence[int | None], used: Sequence[int], reserved: Sequence[int]) -> Limits:
    """Per dimension, the bound less what is used and reserved (never below 0); None: no bound."""
    return Limits(*(None if m is None else max(m - u - r, 0) for m, u, r in zip(limits, used, reserved, strict=True)))


class GrantLedger(Protocol):
    """The store's side of grants with budgets: every change one guarded transaction."""

    async def add_budget_grant(self, grant: NewBudgetGrant) -> StoredBudgetGrant: ...

    async def budget_grant(self, grant_id: str) -> StoredBudgetGrant | None: ...

    async def budget_grants(
        self, *, tenants: Sequence[str] | None, state: str | None, now: float
    ) -> list[StoredBudgetGrant]: ...

    async def revoke_budget_grant(
        self, grant_id: str, *, by: str, reason: str, at: float
    ) -> StoredBudgetGrant | None: ...

    async def reserve_budget_grant(
        self,
        *,
        tenant: str,
        execution_id: str,
        now: float,
        covers: Callable[[str, str], bool],
        fit: Callable[[Limits], Amounts | None],
    ) -> StoredReservation | None: ...

    async def reserve_budget_bounds(
        self,
        *,
        tenant: str,
        execution_id: str,
        now: float,
        covers: Callable[[str, str], bool],
        fit: Callable[[Limits], Amounts | None],
        dry: bool = False,
    ) -> list[StoredReservation] | StoredBound: ...

    async def settle_budget_grant(
        self, execution_id: str, grant_id: str, used: Amounts | None, *, at: float
    ) -> StoredCharge | None: ...

    async def release_budget_reservations(self, live: Collection[str], *, at: float) -> list[StoredCharge]: ...

    async def budget_grant_charges(self, grant_id: str, *, after_seq: int, limit: int) -> list[StoredCharge]: ...

    async def close(self) -> None: ...
