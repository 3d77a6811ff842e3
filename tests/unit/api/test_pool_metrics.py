"""The pool's metrics per profile (api/metrics.py): what a scrape shows, read back as ``sandboxctl doctor --url``
reads it."""

from __future__ import annotations

from collections import Counter

from prometheus_client import CollectorRegistry, generate_latest

from orchestrator.api.metrics import PoolCollector, read_pool
from orchestrator.pipeline.pool import ProfileCounts, ProfilePool

PARTS = [
    ProfilePool("ci", keys=2, ready=5, filling=1, target=6, counts=ProfileCounts(40, 3, 1, Counter(surplus=4))),
    ProfilePool("workspace-write", keys=1, ready=1, filling=0, target=1, counts=ProfileCounts(0, 2, 0, Counter())),
]


class Parts:
    def __init__(self, parts: list[ProfilePool]) -> None:
        self.parts = parts

    def profiles(self) -> list[ProfilePool]:
        return self.parts


def scrape(parts: list[ProfilePool]) -> str:
    registry = CollectorRegistry()
    registry.register(PoolCollector(Parts(parts)))
    return generate_latest(registry).decode()


def test_hits_and_misses_and_the_pools_state_per_profile() -> None:
    text = scrape(PARTS)
    assert 'sandbox_pool_claims_total{profile="ci",result="hit"} 40.0' in text
    assert 'sandbox_pool_claims_total{profile="ci",result="miss"} 3.0' in text
    assert 'sandbox_pool_claims_total{profile="workspace-write",result="miss"} 2.0' in text
    assert 'sandbox_pool_ready{profile="ci"} 5.0' in text and 'sandbox_pool_filling{profile="ci"} 1.0' in text
    assert 'sandbox_pool_target{profile="ci"} 6.0' in text and 'sandbox_pool_keys{profile="ci"} 2.0' in text
    assert 'sandbox_pool_fills_failed_total{profile="ci"} 1.0' in text
    assert 'sandbox_pool_discarded_total{profile="ci",reason="surplus"} 4.0' in text


def test_the_doctor_reads_back_what_was_scraped() -> None:
    assert read_pool(scrape(PARTS)) == PARTS


def test_a_pool_no_run_used_yet_is_still_on_and_a_service_without_one_says_nothing() -> None:
    assert read_pool(scrape([])) == []
    assert read_pool("# HELP sandbox_decisions_total Gate decisions.\n# TYPE sandbox_decisions_total counter\n") is None
