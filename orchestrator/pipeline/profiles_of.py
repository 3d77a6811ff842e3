"""Which profile a request runs with: its own or the default, narrowed by the request and the config's caps."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.requests import Request
from orchestrator.pipeline.launch import profile_egress
from orchestrator.profiles import ProfileCaps, ProfileRegistry, ResolvedProfile


@dataclass(frozen=True, slots=True)
class Profiles:
    registry: ProfileRegistry
    caps: ProfileCaps | None
    default: str  # the profile of a request that names none (the gate's)

    def resolve(self, request: Request, *, session: bool) -> ResolvedProfile:
        """The profile a run of ``request`` gets, narrowed by the request and caps, with the egress hosts it
        asked for (authorized: the gate asked about those its policy does not cover)."""
        return self.registry.resolve(
            request.profile or self.default,
            request_timeout_s=request.timeout_ms / 1000 if request.timeout_ms else None,
            caps=self.caps,
            writable_root=request.sandbox_permissions.writable_root,
            session=session,
            egress=request.sandbox_permissions.egress_hosts,
        )

    def egress(self, request: Request) -> tuple[str, ...]:
        """The egress allowlist of the profile ``request`` runs with (part of what it asks)."""
        return profile_egress(self.registry, request, self.default)
