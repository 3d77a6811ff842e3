"""docs/pool.md's examples, as written: the config block loads and means what its comments say, the doctor
prints exactly the lines shown for it, and the chart's example is a config the controller takes."""

from __future__ import annotations

import contextlib
import io
import re
from collections import Counter
from pathlib import Path

import yaml

from orchestrator.backends.docker import DockerBackend
from orchestrator.cli.ops_cmd import _print_check
from orchestrator.pipeline.config import KeyBounds, PoolSettings, load_config
from orchestrator.pipeline.doctor_pool import ServicePool, pool_checks
from orchestrator.pipeline.pool import ProfileCounts, ProfilePool
from orchestrator.profiles import ProfileRegistry
from tests.support.paths import DOCS

TEXT = (DOCS / "pool.md").read_text(encoding="utf-8")
BLOCK = re.compile(r"```(yaml|text)\n(.*?)```", re.S)


def block(kind: str) -> str:
    return next(m.group(2) for m in BLOCK.finditer(TEXT) if m.group(1) == kind)


def printed(check: object) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _print_check(check)
    return out.getvalue()


def test_the_config_means_what_its_comments_say(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(block("yaml"))
    pool = load_config(path).pool
    assert pool.enabled and (pool.max_total, pool.ttl_s, pool.shrink_after_s) == (16, 300, 60)
    assert pool.bounds("workspace-write") == KeyBounds(1, 4) == PoolSettings().bounds("workspace-write")  # defaults
    assert pool.bounds("ci") == KeyBounds(2, 20)


def test_the_doctor_prints_the_lines_shown(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(block("yaml"))
    pool = load_config(path).pool
    registry = ProfileRegistry()
    ci = ProfilePool("ci", keys=1, ready=20, filling=0, target=20, counts=ProfileCounts(57, 23, 0, Counter(surplus=3)))
    checks = pool_checks(
        pool,
        capabilities=DockerBackend().capabilities,  # what the doctor is given for the Docker engine: no connection
        backend_name="DockerBackend",
        resolved=[registry.resolve(name) for name in registry.names()],
        known=registry.names(),
        service=ServicePool("http://127.0.0.1:8700", [ci]),
    )
    assert "".join(printed(c) for c in checks) == block("text")


def test_the_charts_example_is_a_config_the_controller_takes() -> None:
    [snippet] = re.findall(r"e\.g\. for CI jobs whose steps come back\s+to back: `(config: \{.*?\}\}\}\})`", TEXT, re.S)
    pool = PoolSettings.model_validate(yaml.safe_load(snippet)["config"]["pool"])
    assert pool.enabled and pool.bounds("ci") == KeyBounds(2, 20)
