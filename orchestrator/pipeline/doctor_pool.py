"""sandboxctl doctor's view of the pool: how the config sizes it, whether it can fill here, and (``--url``) what a
running service's pool holds now, per profile, as its /metrics says."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.backends.base import Capabilities
from orchestrator.backends.checks import PreflightCheck, failed
from orchestrator.pipeline.config import KeyBounds, PoolSettings
from orchestrator.pipeline.pool import ProfilePool
from orchestrator.profiles import ResolvedProfile

Check = PreflightCheck

#: the pool is on where the backend, as configured, cannot fill it
POOL_FIX = "change pool.enabled, or the backend's settings (Kubernetes: backend.kubernetes.workspace.mode: pvc)"


@dataclass(frozen=True, slots=True)
class ServicePool:
    """What a running service said of its pool (``sandboxctl doctor --url``)."""

    url: str
    profiles: list[ProfilePool] | None = None  # None: it keeps no pool
    error: str | None = None  # it did not answer: why


def _bounds(bounds: KeyBounds) -> str:
    return f"{bounds.floor}-{bounds.ceiling}"


def pool_checks(
    settings: PoolSettings,
    *,
    capabilities: Capabilities,
    backend_name: str,
    resolved: list[ResolvedProfile],
    known: list[str],
    service: ServicePool | None = None,
) -> list[Check]:
    """The config's pool (``pool``), a ``pool.profiles`` entry naming no profile (``known``: every profile's
    name), and the service's pool now (``pool now``, one line per profile) when one was asked about."""
    checks = [_configured(settings, capabilities, backend_name, resolved)]
    for name in sorted(set(settings.profiles) - set(known)):
        checks.append(
            failed(
                f"pool profile {name}",
                "DOCTOR.POOL",
                f"pool.profiles.{name}: no such profile (profiles: {', '.join(sorted(known))})",
                f"name a profile sandboxctl profiles list shows, or remove pool.profiles.{name}",
            )
        )
    if service is not None:
        checks.extend(_now(service))
    return checks


def _configured(
    settings: PoolSettings, capabilities: Capabilities, backend_name: str, resolved: list[ResolvedProfile]
) -> Check:
    if not settings.enabled:
        return Check("pool", True, "off (pool.enabled: false): every run starts its sandbox cold")
    if not capabilities.can_pool:
        return failed(
            "pool",
            "DOCTOR.POOL",
            f"pool.enabled, but the {backend_name} cannot pre-start sandboxes as configured: every run starts cold",
            POOL_FIX,
        )
    own = ", ".join(f"{name} {_bounds(settings.bounds(name))}" for name in sorted(settings.profiles))
    cold = ", ".join(sorted(p.name for p in resolved if not p.pool_enabled))
    detail = (
        "on: each key keeps ready what its demand needs, between min_ready and max_ready"
        f" {_bounds(settings.bounds(None))}" + (f" ({own})" if own else "") + f"; max_total {settings.max_total},"
        f" ttl {settings.ttl_s:g}s, shrink after {settings.shrink_after_s:g}s"
        + (f"; never pooled: {cold}" if cold else "")
    )
    return Check("pool", True, detail)


def _now(service: ServicePool) -> list[Check]:
    if service.error is not None:
        return [
            failed(
                "pool now",
                "DOCTOR.POOL",
                f"the service at {service.url} did not answer: {service.error}",
                "start it (sandboxctl serve --config FILE), or leave out --url",
            )
        ]
    if service.profiles is None:
        return [Check("pool now", True, f"the service at {service.url} keeps no pool (its pool.enabled: false)")]
    if not service.profiles:
        return [Check("pool now", True, f"the service at {service.url}: no run of a pooled profile yet")]
    return [Check(f"pool now: {part.profile}", True, _state(part)) for part in service.profiles]


def _state(part: ProfilePool) -> str:
    counts = part.counts
    claims = counts.hits + counts.misses
    share = f" ({100 * counts.hits // claims}% hits)" if claims else ""
    discarded = ", ".join(f"{reason} {n}" for reason, n in sorted(counts.discarded.items())) or "none"
    return (
        f"ready {part.ready}, filling {part.filling}, target {part.target} ({part.keys} key(s));"
        f" claims: {counts.hits} hits, {counts.misses} misses{share}; fills failed {counts.fills_failed};"
        f" discarded: {discarded}"
    )
