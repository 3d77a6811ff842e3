"""``pool:`` in the config: each key's floor and ceiling, the pool's or its profile's; a config of earlier
releases (``per_key``) still means what it meant; bad bounds are CONFIG.INVALID naming the fields."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from orchestrator.backends.docker import DockerBackend
from orchestrator.domain.errors import ConfigInvalid
from orchestrator.evidence import EvidenceWriter
from orchestrator.pipeline.config import KeyBounds, PoolSettings, load_config
from orchestrator.pipeline.factory import assemble
from orchestrator.profiles import ProfileRegistry


def pool_of(tmp_path: Path, text: str) -> PoolSettings:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return load_config(path).pool


def refusal(tmp_path: Path, text: str) -> ConfigInvalid:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(ConfigInvalid) as err:
        load_config(path)
    assert err.value.code == "CONFIG.INVALID"
    return err.value


def test_defaults_and_a_profiles_own_bounds(tmp_path: Path) -> None:
    pool = pool_of(
        tmp_path,
        "pool:\n  enabled: true\n  min_ready: 0\n  max_ready: 6\n  profiles:\n"
        "    ci: {min_ready: 2, max_ready: 20}\n    untrusted: {max_ready: 2}\n",
    )
    assert pool.bounds("workspace-write") == KeyBounds(0, 6)  # not listed: the pool's own
    assert pool.bounds("ci") == KeyBounds(2, 20)
    assert pool.bounds("untrusted") == KeyBounds(0, 2)  # what it leaves out is the pool's
    assert PoolSettings().bounds("ci") == KeyBounds(1, 4)


def test_per_key_still_means_a_fixed_size(tmp_path: Path) -> None:
    """Earlier releases filled each key up to per_key after each of its runs: both its floor and its ceiling."""
    pool = pool_of(tmp_path, "pool: {enabled: true, per_key: 3, max_total: 2}\n")
    assert pool.bounds("workspace-write") == KeyBounds(3, 3)  # within max_total at run time, as it was
    listed = pool_of(tmp_path, "pool: {per_key: 3, profiles: {ci: {max_ready: 8}}}\n")
    assert listed.bounds("ci") == KeyBounds(3, 8)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("pool: {per_key: 2, max_ready: 4}\n", "pool.per_key is min_ready and max_ready at once"),
        ("pool: {min_ready: 5}\n", "pool.min_ready 5 is above pool.max_ready 4"),
        ("pool: {profiles: {ci: {min_ready: 9}}}\n", "pool.profiles.ci.min_ready 9 is above pool.max_ready 4"),
        (
            "pool: {profiles: {ci: {min_ready: 3, max_ready: 2}}}\n",
            "pool.profiles.ci.min_ready 3 is above pool.profiles.ci.max_ready 2",
        ),
        ("pool: {max_total: 2, min_ready: 3, max_ready: 8}\n", "pool.min_ready 3 is above pool.max_total 2"),
    ],
)
def test_bounds_that_cannot_hold_are_refused(tmp_path: Path, text: str, said: str) -> None:
    err = refusal(tmp_path, text)
    assert said in err.message and err.details["fields"] == ["pool"], err.message
    assert err.message.startswith(f"{tmp_path / 'config.yaml'}:1: pool: "), err.message


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("pool:\n  max_ready: 0\n", "pool.max_ready"),
        ("pool:\n  min_ready: -1\n", "pool.min_ready"),
        ("pool:\n  shrink_after_s: 0\n", "pool.shrink_after_s"),
        ("pool:\n  profiles:\n    ci: {spare: 1}\n", "pool.profiles.ci.spare"),
        ("pool:\n  profiles:\n    ci: {max_ready: 2000}\n", "pool.profiles.ci.max_ready"),
        ("pool:\n  profiles:\n    CI: {}\n", "pool.profiles.CI"),
    ],
)
def test_a_bad_value_is_named_with_its_line(tmp_path: Path, text: str, field: str) -> None:
    err = refusal(tmp_path, text)
    assert field in err.details["fields"][0], err.message
    assert f"config.yaml:{len(text.splitlines())}: {field}" in err.message, err.message


async def test_a_bound_for_no_profile_is_told_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A profile name the registry does not know (a typo) bounds no run: the controller says so as it starts
    (sandboxctl doctor fails it, DOCTOR.POOL)."""
    settings = PoolSettings(enabled=True, profiles={"wokspace-write": {"max_ready": 8}, "ci": {"max_ready": 8}})
    with caplog.at_level(logging.WARNING, logger="orchestrator.pipeline.runner"):
        orch = assemble(
            evidence=EvidenceWriter(tmp_path / "evidence.jsonl"),
            backend=DockerBackend(),  # never called: nothing runs
            profiles=ProfileRegistry(),
            pool=settings,
        )
    await orch.aclose()
    assert [r.getMessage() for r in caplog.records] == [
        "pool.profiles.wokspace-write: no such profile; its min_ready and max_ready apply to no run"
    ]
