"""``sandboxctl doctor``'s pool checks (pipeline/doctor_pool.py): the config's sizing as the doctor says it, a
pool the backend cannot fill, a pool.profiles entry naming no profile, and a running service's pool now."""

from __future__ import annotations

import dataclasses
from collections import Counter

from orchestrator.backends.base import Capabilities
from orchestrator.backends.checks import DoctorFixes
from orchestrator.pipeline.config import PoolSettings
from orchestrator.pipeline.doctor_pool import ServicePool, pool_checks
from orchestrator.pipeline.pool import ProfileCounts, ProfilePool
from orchestrator.profiles import ProfileRegistry

CAN_POOL = Capabilities(
    can_pool=True,
    launch_confirmed=True,
    sessions=True,
    lists_images=True,
    own_pids_limit=True,
    fixes=DoctorFixes(engine="-", runtime="-", image="-", limits="-"),
)
REGISTRY = ProfileRegistry()
NAMES = REGISTRY.names()
RESOLVED = [REGISTRY.resolve(name) for name in NAMES]


def checks(settings: PoolSettings, service: ServicePool | None = None, capabilities: Capabilities = CAN_POOL) -> list:
    return pool_checks(
        settings,
        capabilities=capabilities,
        backend_name="DockerBackend",
        resolved=RESOLVED,
        known=NAMES,
        service=service,
    )


def test_the_configured_sizing_is_shown() -> None:
    [off] = checks(PoolSettings())
    assert (off.name, off.ok, off.detail) == (
        "pool",
        True,
        "off (pool.enabled: false): every run starts its sandbox cold",
    )
    settings = PoolSettings(
        enabled=True, profiles={"ci": {"min_ready": 2, "max_ready": 10}, "untrusted": {"max_ready": 2}}
    )
    [on] = checks(settings)
    assert on.ok and on.detail.startswith(
        "on: each key keeps ready what its demand needs, between min_ready and max_ready 1-4 (ci 2-10, untrusted 1-2);"
        " max_total 16, ttl 300s, shrink after 60s"
    ), on.detail


def test_profiles_whose_runs_are_never_pooled_are_named() -> None:
    cold = [p.model_copy(update={"pool_enabled": False}) if p.name == "read-only" else p for p in RESOLVED]
    [on] = pool_checks(PoolSettings(enabled=True), capabilities=CAN_POOL, backend_name="x", resolved=cold, known=NAMES)
    assert on.detail.endswith("; never pooled: read-only"), on.detail


def test_a_pool_the_backend_cannot_fill_fails() -> None:
    [check] = checks(PoolSettings(enabled=True), capabilities=dataclasses.replace(CAN_POOL, can_pool=False))
    assert (check.ok, check.code) == (False, "DOCTOR.POOL")
    assert "the DockerBackend cannot pre-start sandboxes as configured: every run starts cold" in check.detail
    assert check.fix and "pool.enabled" in check.fix


def test_a_bound_for_no_profile_fails_naming_the_field() -> None:
    [_, typo] = checks(PoolSettings(enabled=True, profiles={"wokspace-write": {"max_ready": 8}}))
    assert (typo.name, typo.ok, typo.code) == ("pool profile wokspace-write", False, "DOCTOR.POOL")
    assert typo.detail.startswith("pool.profiles.wokspace-write: no such profile (profiles: ")
    assert "workspace-write" in typo.detail and typo.fix == (
        "name a profile sandboxctl profiles list shows, or remove pool.profiles.wokspace-write"
    )


def test_a_running_services_pool_now() -> None:
    url = "http://127.0.0.1:8700"
    part = ProfilePool("ci", keys=2, ready=5, filling=1, target=6, counts=ProfileCounts(30, 10, 1, Counter(surplus=4)))
    [_, now] = checks(PoolSettings(enabled=True), ServicePool(url, [part]))
    assert (now.name, now.ok) == ("pool now: ci", True)
    assert now.detail == (
        "ready 5, filling 1, target 6 (2 key(s)); claims: 30 hits, 10 misses (75% hits); fills failed 1;"
        " discarded: surplus 4"
    )
    [_, empty] = checks(PoolSettings(enabled=True), ServicePool(url, []))
    assert empty.ok and empty.detail == f"the service at {url}: no run of a pooled profile yet"
    [_, none] = checks(PoolSettings(), ServicePool(url, None))
    assert none.ok and none.detail == f"the service at {url} keeps no pool (its pool.enabled: false)"
    [_, down] = checks(PoolSettings(), ServicePool(url, error="ConnectionRefusedError: [Errno 111]"))
    assert (down.ok, down.code) == (False, "DOCTOR.POOL")
    assert down.detail == f"the service at {url} did not answer: ConnectionRefusedError: [Errno 111]"
