"""Who calls the service: a token's subject, role and tenants (the token itself never gets here)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Role(StrEnum):
    AGENT = "agent"  # submits and reads its own tenant's executions
    APPROVER = "approver"  # decides asks for its tenants, and reads their executions
    ADMIN = "admin"  # everything, every tenant


@dataclass(frozen=True, slots=True)
class Principal:
    subject: str
    role: Role
    tenants: frozenset[str]  # empty for an admin: every tenant

    @property
    def every_tenant(self) -> bool:
        return self.role is Role.ADMIN

    def sees(self, tenant: str) -> bool:
        return self.every_tenant or tenant in self.tenants

    @property
    def tenant_filter(self) -> tuple[str, ...] | None:
        """The tenants a listing is limited to; None: all of them."""
        return None if self.every_tenant else tuple(sorted(self.tenants))

    @property
    def label(self) -> str:
        """How the evidence names this caller (an approver, a canceller)."""
        return f"api:{self.subject}"
