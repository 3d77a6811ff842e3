"""What budget grants reserved for this orchestrator's runs, from the ask to the run's end: held while the
execution is being authorized, handed to its Authorization, then settled (the run's real use), released
(it never started) or abandoned (its caller gave up) — exactly once each, whatever ends the run. A run holds at
most one reservation of the grant that answered its ask, and one of each bound it matches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from orchestrator.budgets.book import GrantBook, Reservation
from orchestrator.domain.grants import Usage
from orchestrator.evidence import EventType
from orchestrator.pipeline.recorder import ExecutionRecorder

log = logging.getLogger(__name__)


class Reservations:
    def __init__(self, book: GrantBook | None) -> None:
        self.book = book  # grants with budgets (the service's store): asks a live grant covers
        self._held: dict[str, list[Reservation]] = {}  # execution id -> what grants reserved, until authorized
        self._charged: set[str] = set()  # executions whose reservation was settled or released (once each)

    def hold(self, execution_id: str, reservation: Reservation) -> None:
        self._held.setdefault(execution_id, []).append(reservation)

    def take(self, execution_id: str) -> tuple[Reservation, ...]:
        """The reservations held for ``execution_id``, now its authorization's."""
        return tuple(self._held.pop(execution_id, ()))

    async def release_held(self, execution_id: str) -> None:
        """Free what grants reserved for an execution that will not run (never authorized)."""
        for reservation in self._held.pop(execution_id, ()):
            if self.book is not None:
                try:
                    await self.book.release(reservation)
                except Exception as exc:  # held until the service's next start releases it
                    log.warning("grant %s of %s not released: %s", reservation.grant_id, execution_id, exc)

    async def charge(
        self,
        reservations: Sequence[Reservation],
        records: ExecutionRecorder,
        used: Callable[[Reservation], Usage] | None,
        *,
        ran: bool,
    ) -> None:
        """Settle what grants reserved for a run, on the record before its end record (one grant_charged each):
        its real use when it ran to an end (``used``: what to charge a reservation, budgets.cover.used), all
        each reserved when it failed after starting (what it used is unknown), nothing when it never started. A
        bookkeeping failure is logged: never in the way of the end record (the reservation stays held until
        the service's next start releases it)."""
        execution_id, book = records.execution_id, self.book
        if not reservations or book is None or execution_id in self._charged:
            return
        self._charged.add(execution_id)
        for reservation in reservations:
            try:
                if not ran:
                    await book.release(reservation)
                    data: dict[str, Any] = {"grant_id": reservation.grant_id, "kind": "released"}
                else:
                    charge = await book.settle(
                        reservation, used(reservation) if used is not None else reservation.most()
                    )
                    data = {"grant_id": charge.grant_id, "kind": charge.kind, "charged": charge.charged.model_dump(),
                            "state": charge.state}  # fmt: skip
            except Exception as exc:
                log.warning("grant %s of %s not settled: %s", reservation.grant_id, execution_id, exc)
                continue
            await records.record(EventType.GRANT_CHARGED, data=data)

    async def abandon(self, reservations: Sequence[Reservation], records: ExecutionRecorder) -> None:
        """What grants reserved and nobody charged yet is freed: the caller gave up before running, or the
        run ended before it settled the reservations. Forgets the execution either way."""
        if reservations and records.execution_id not in self._charged:
            await self.charge(reservations, records, None, ran=False)
        self._charged.discard(records.execution_id)
