"""pipeline.profiles_of: the profiles as runs get them, built by one constructor everywhere (review L9a: the
runs, `doctor` and `profiles show --resolved --config` each built their own, three chances to drift)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from orchestrator.gate.gate import DEFAULT_PROFILE
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.profiles import ProfileCaps, ProfileRegistry
from orchestrator.profiles.paths import ENV_VAR, builtin_dir
from orchestrator.profiles.source import ProfileSource
from tests.support.paths import ROOT

MIB = 1024 * 1024


def test_under_caps_is_the_registry_of_the_environment_the_gates_default_and_those_caps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    caps = ProfileCaps(max_memory=256 * MIB)
    profiles = Profiles.under(caps)
    assert (profiles.caps, profiles.default) == (caps, DEFAULT_PROFILE)
    assert profiles.registry.search_path == (builtin_dir(), tmp_path)
    assert profiles.named("ci").memory_bytes == 256 * MIB
    registry = ProfileRegistry([])
    fixed = Profiles.under(None, registry)
    assert (fixed.registry, fixed.caps, fixed.default) == (registry, None, DEFAULT_PROFILE)
    source = ProfileSource([builtin_dir()], check_every_s=0)
    followed = Profiles.under(caps, source)
    assert followed.source is source and followed.registry is source.current()


def test_nothing_else_builds_profiles_as_runs_get_them() -> None:
    """Profiles(...) is called in profiles_of alone (Profiles.under); everywhere else takes it from there."""
    builders = []
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        if path == ROOT / "orchestrator" / "pipeline" / "profiles_of.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Profiles":
                builders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert builders == []
