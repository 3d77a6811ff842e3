"""Which profile a request runs with: its own or the default, narrowed by the request and the config's caps."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.requests import EXEC_TOOLS, Request
from orchestrator.gate.gate import DEFAULT_PROFILE
from orchestrator.profiles import ProfileCaps, ProfileRegistry, ResolvedProfile
from orchestrator.profiles.source import FixedProfiles, ProfilesInForce


@dataclass(frozen=True, slots=True)
class Profiles:
    source: ProfilesInForce
    caps: ProfileCaps | None
    default: str  # the profile of a request that names none (the gate's)

    @classmethod
    def under(cls, caps: ProfileCaps | None, registry: ProfileRegistry | ProfilesInForce | None = None) -> Profiles:
        """The profiles as runs under ``caps`` (a config's) get them: ``registry`` (default: the built-ins and
        ``$SANDBOX_PROFILES_PATH``; a ``ProfileSource``: the set in force, re-read when its files change), and
        the gate's default for a request that names none. The one way they are built: the runs
        (pipeline.factory), ``doctor`` and ``profiles show --resolved --config`` alike, so what those two show
        is what runs get."""
        if registry is None or isinstance(registry, ProfileRegistry):
            registry = FixedProfiles(registry if registry is not None else ProfileRegistry())
        return cls(registry, caps, DEFAULT_PROFILE)

    @property
    def registry(self) -> ProfileRegistry:
        """The profiles in force now (a changed set is re-read first: profiles/source.py). A run takes what it
        resolves from it once, at its start, and keeps it to its end."""
        return self.source.current()

    def resolve(self, request: Request, *, session: bool) -> ResolvedProfile:
        """The profile a run of ``request`` gets, narrowed by the request and caps, with the egress hosts it
        asked for (authorized: the gate asked about those its policy does not cover)."""
        return self.named(
            request.profile or self.default,
            request_timeout_s=request.timeout_ms / 1000 if request.timeout_ms else None,
            writable_root=request.sandbox_permissions.writable_root,
            session=session,
            egress=request.sandbox_permissions.egress_hosts,
            image=request.image,
        )

    def named(
        self,
        name: str,
        *,
        request_timeout_s: float | None = None,
        writable_root: bool = False,
        session: bool = False,
        egress: tuple[str, ...] = (),
        image: str | None = None,
    ) -> ResolvedProfile:
        """The profile ``name`` as a run gets it under these caps (``sandboxctl profiles show --resolved
        --config`` shows this: one path, so what it shows is what runs get)."""
        return self.registry.resolve(
            name,
            request_timeout_s=request_timeout_s,
            caps=self.caps,
            writable_root=writable_root,
            session=session,
            egress=egress,
            image=image,
        )

    def egress(self, request: Request) -> tuple[str, ...]:
        """The egress allowlist of the profile ``request`` runs with (part of what it asks)."""
        return profile_egress(self.registry, request, self.default)


def profile_egress(profiles: ProfileRegistry, request: Request, default_profile: str) -> tuple[str, ...]:
    """The hosts the profile ``request`` runs with may reach (part of what an exec tool asks); () for other
    tools, or a profile unknown here (its run refuses it, on the record)."""
    if request.tool not in EXEC_TOOLS:
        return ()
    try:
        return profiles.get(request.profile or default_profile).network.allow
    except OrchestratorError:
        return ()
