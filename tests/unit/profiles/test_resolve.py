"""Resolution: the narrowest of profile, request and policy caps; explicit units; stable hashes."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.domain.canonical import canonical_sha256
from orchestrator.domain.errors import ConfigInvalid, InputInvalid
from orchestrator.profiles import Profile, ProfileCaps, ProfileRegistry, ResolvedProfile, load_seccomp, resolve
from orchestrator.profiles.models import definition_sha256
from orchestrator.profiles.paths import ENV_VAR, builtin_dir

MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def _no_env_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


@pytest.fixture(scope="module")
def registry() -> ProfileRegistry:
    return ProfileRegistry([])


def caps(**kw: Any) -> ProfileCaps:
    return ProfileCaps.model_validate(kw)


def test_resolved_workspace_write_is_fully_explicit(registry: ProfileRegistry) -> None:
    r = resolve(registry.get("workspace-write"))
    seccomp = load_seccomp("default", search_path=[builtin_dir()])
    excluded = {"seccomp_json", "seccomp_sha256", "profile_hash", "definition_sha256"}
    assert r.model_dump(mode="json", exclude=excluded) == {
        "name": "workspace-write",
        "image": "sandbox-orchestrator/default:latest",
        "runtime": "runc",
        "uid": 1000,
        "gid": 1000,
        "read_only_root": True,
        "network": "none",
        "egress_allow": [],
        "workspace": {"mode": "rw", "container_path": "/workspace"},
        "tmpfs": [
            {"path": "/tmp", "size_bytes": 64 * MIB, "mode": "1777", "noexec": True, "nosuid": True, "nodev": True}
        ],
        "cpus": 1.0,
        "memory_bytes": 512 * MIB,
        "memory_swap_bytes": 512 * MIB,
        "pids_limit": 128,
        "wall_timeout_s": 300.0,
        "stdout_max_bytes": MIB,
        "stderr_max_bytes": MIB,
        "nofile": 1024,
        "fsize_bytes": 256 * MIB,
        "workspace_write_bytes": 1024 * MIB,
        "workspace_write_files": 100_000,
        "seccomp": "default",
        "cap_add": [],
        "cap_drop": ["ALL"],
        "no_new_privileges": True,
        "env": {
            "HOME": "/tmp",
            "LANG": "C.UTF-8",
            "PATH": registry.get("workspace-write").env["PATH"],
            "TMPDIR": "/tmp",
        },
        "env_allowlist": sorted(registry.get("workspace-write").env_allowlist),
        "sessions_enabled": True,
        "interactive_shells": True,
        "session_idle_timeout_s": 600.0,
        "session_lifetime_s": 300.0,
        "pool_enabled": True,
        "read_only_mounts": [],
    }
    assert r.seccomp_json == seccomp.json_text
    assert r.seccomp_sha256 == hashlib.sha256(r.seccomp_json.encode()).hexdigest() == seccomp.sha256
    assert r.definition_sha256 == definition_sha256(registry.get("workspace-write"), seccomp.sha256)
    assert r.user == "1000:1000" and r.nano_cpus == 1_000_000_000
    assert r.tmpfs[0].mount_options() == "rw,nosuid,nodev,noexec,size=67108864,mode=1777"
    assert "seccomp_json" not in repr(r)


def test_profile_hash_is_canonical_sha256_without_the_seccomp_text(registry: ProfileRegistry) -> None:
    r = resolve(registry.get("untrusted"))
    body = r.model_dump(mode="json", exclude={"profile_hash", "seccomp_json", "definition_sha256"})
    assert "seccomp_sha256" in body
    assert r.profile_hash == canonical_sha256(body) == r.compute_hash()


def test_definition_is_the_profiles_settings_whatever_narrows_them(registry: ProfileRegistry) -> None:
    ci = registry.get("ci")
    plain = resolve(ci)
    narrowed = resolve(ci, request_timeout_s=5, caps=caps(max_memory="64m"))
    assert narrowed.profile_hash != plain.profile_hash  # what runs differs
    assert narrowed.definition_sha256 == plain.definition_sha256  # where it came from does not
    seccomp_sha = load_seccomp(ci.seccomp, search_path=[builtin_dir()]).sha256
    assert plain.definition_sha256 == canonical_sha256(
        {"profile": ci.model_dump(mode="json", exclude={"description", "extends"}), "seccomp_sha256": seccomp_sha}
    )
    reworded = ci.model_copy(update={"description": "other words"})
    assert definition_sha256(reworded, seccomp_sha) == plain.definition_sha256  # words are not settings
    bigger = ci.model_copy(update={"limits": ci.limits.model_copy(update={"memory": ci.limits.memory * 2})})
    assert definition_sha256(bigger, seccomp_sha) != plain.definition_sha256
    assert definition_sha256(ci, "0" * 64) != plain.definition_sha256  # its seccomp file is part of it


def test_hashes_are_stable_and_sensitive(registry: ProfileRegistry) -> None:
    hashes = {n: resolve(registry.get(n)).profile_hash for n in registry.names()}
    assert len(set(hashes.values())) == len(hashes)
    assert resolve(registry.get("ci")).profile_hash == hashes["ci"]
    assert resolve(registry.get("ci"), request_timeout_s=60).profile_hash != hashes["ci"]
    assert ProfileRegistry([]).resolve("ci").profile_hash == hashes["ci"]


def test_resolved_round_trips_and_detects_tampering(registry: ProfileRegistry) -> None:
    r = resolve(registry.get("ci"))
    data = json.loads(json.dumps(r.model_dump(mode="json")))
    assert ResolvedProfile.model_validate(data) == r
    for key, value in [("memory_bytes", 1), ("runtime", "runsc"), ("image", "x/y:1"), ("env", {})]:
        tampered = {**data, key: value}
        if key == "memory_bytes":
            tampered["memory_swap_bytes"] = 1
        with pytest.raises(ValidationError, match="profile_hash does not match"):
            ResolvedProfile.model_validate(tampered)
    with pytest.raises(ValidationError, match="seccomp_sha256 does not match"):
        ResolvedProfile.model_validate({**data, "seccomp_json": data["seccomp_json"] + " "})


@pytest.mark.parametrize(
    ("key", "value", "needle"),
    [
        ("uid", 0, "greater than or equal to 1"),
        ("network", "host", "'none'"),
        ("cap_add", ["NET_RAW"], "at most 0 items"),
        ("cap_drop", [], "Field required"),
        ("no_new_privileges", False, "Input should be True"),
        ("memory_swap_bytes", 1, "must equal memory_bytes"),
    ],
)
def test_resolved_invariants(registry: ProfileRegistry, key: str, value: Any, needle: str) -> None:
    data = resolve(registry.get("workspace-write")).model_dump(mode="json", exclude={"profile_hash"})
    with pytest.raises(ValidationError, match=needle):
        ResolvedProfile.model_validate({**data, key: value})


def test_a_request_can_lower_the_wall_timeout_never_raise_it(registry: ProfileRegistry) -> None:
    p = registry.get("untrusted")
    assert resolve(p, request_timeout_s=10).wall_timeout_s == 10.0
    assert resolve(p, request_timeout_s=0.5).wall_timeout_s == 0.5
    assert resolve(p, request_timeout_s=3600).wall_timeout_s == 60.0
    assert resolve(p, request_timeout_s=None).wall_timeout_s == 60.0


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True])
def test_invalid_request_timeouts(registry: ProfileRegistry, bad: float) -> None:
    with pytest.raises(InputInvalid, match="timeout: must be a positive number of seconds"):
        resolve(registry.get("workspace-write"), request_timeout_s=bad)


def test_caps_lower_every_limit(registry: ProfileRegistry) -> None:
    r = resolve(
        registry.get("ci"),
        request_timeout_s=1000,
        caps=caps(max_memory="1g", max_cpus=1.5, max_pids=300, max_wall_timeout_s=600, max_output_bytes="2m"),
    )
    assert (r.memory_bytes, r.memory_swap_bytes, r.cpus, r.pids_limit) == (1024 * MIB, 1024 * MIB, 1.5, 300)
    assert (r.wall_timeout_s, r.stdout_max_bytes, r.stderr_max_bytes) == (600.0, 2 * MIB, 2 * MIB)


def test_caps_lower_the_workspace_write_budget(registry: ProfileRegistry) -> None:
    ci = registry.get("ci")
    assert (resolve(ci).workspace_write_bytes, resolve(ci).workspace_write_files) == (8 * 1024 * MIB, 500_000)
    r = resolve(ci, caps=caps(max_workspace_write_bytes="2g", max_workspace_write_files=1000))
    assert (r.workspace_write_bytes, r.workspace_write_files) == (2 * 1024 * MIB, 1000)
    wide = resolve(ci, caps=caps(max_workspace_write_bytes="64t", max_workspace_write_files=10_000_000))
    assert (wide.workspace_write_bytes, wide.workspace_write_files) == (8 * 1024 * MIB, 500_000)
    untrusted = resolve(registry.get("untrusted"))
    assert (untrusted.workspace_write_bytes, untrusted.workspace_write_files) == (256 * MIB, 20_000)
    with pytest.raises(ValidationError):
        caps(max_workspace_write_files=-1)


def test_caps_never_raise_a_limit(registry: ProfileRegistry) -> None:
    base = resolve(registry.get("untrusted"))
    wide = resolve(
        registry.get("untrusted"),
        caps=caps(max_memory="64g", max_cpus=64, max_pids=100000, max_wall_timeout_s=86400, max_output_bytes="1g"),
    )
    assert wide == base


def test_the_narrowest_of_request_and_caps_wins(registry: ProfileRegistry) -> None:
    p = registry.get("workspace-write")
    assert resolve(p, request_timeout_s=30, caps=caps(max_wall_timeout_s=60)).wall_timeout_s == 30
    assert resolve(p, request_timeout_s=90, caps=caps(max_wall_timeout_s=60)).wall_timeout_s == 60


def test_caps_allowing_runtime_and_image(registry: ProfileRegistry) -> None:
    p = registry.get("untrusted")
    ok = caps(allowed_runtimes=["runc", "runsc"], allowed_images=["sandbox-orchestrator/*"])
    assert resolve(p, caps=ok).runtime == "runsc"


def test_a_cap_forbidding_the_runtime_is_config_invalid_never_a_silent_downgrade(registry: ProfileRegistry) -> None:
    with pytest.raises(ConfigInvalid) as info:
        resolve(registry.get("untrusted"), caps=caps(allowed_runtimes=["runc"]))
    err = info.value
    assert err.code == "CONFIG.INVALID" and not err.retryable
    assert err.message == (
        "runtime: profile 'untrusted' needs runtime 'runsc', which the policy caps do not allow "
        "(allowed_runtimes: runc)"
    )
    assert err.details == {"field": "runtime", "profile": "untrusted"}


def test_a_cap_forbidding_the_image_is_config_invalid(registry: ProfileRegistry) -> None:
    with pytest.raises(
        ConfigInvalid, match=r"^CONFIG.INVALID: image: profile 'ci' uses image 'sandbox-orchestrator/default:latest'"
    ):
        resolve(registry.get("ci"), caps=caps(allowed_images=["sandbox-orchestrator/minimal:*"]))
    with pytest.raises(ConfigInvalid, match=r"allowed_images: none"):
        resolve(registry.get("ci"), caps=caps(allowed_images=[]))


def test_a_pids_cap_too_low_for_gvisor_is_refused(registry: ProfileRegistry) -> None:
    with pytest.raises(ConfigInvalid, match="max_pids: profile 'untrusted' runs under runsc"):
        resolve(registry.get("untrusted"), caps=caps(max_pids=32))
    assert resolve(registry.get("workspace-write"), caps=caps(max_pids=32)).pids_limit == 32


def test_writable_root_only_as_an_approved_escalation(registry: ProfileRegistry) -> None:
    p = registry.get("workspace-write")
    escalated = resolve(p, writable_root=True)
    assert escalated.read_only_root is False
    assert escalated.profile_hash != resolve(p).profile_hash


def test_seccomp_comes_from_the_registry_search_path(tmp_path: Path) -> None:
    (tmp_path / "seccomp").mkdir()
    data = json.loads((builtin_dir() / "seccomp" / "default.json").read_text())
    data["syscalls"][0]["names"].remove("ioctl")
    (tmp_path / "seccomp" / "strict.json").write_text(json.dumps(data))
    (tmp_path / "locked.yaml").write_text("description: l\nextends: workspace-write\nseccomp: strict\n")
    reg = ProfileRegistry([tmp_path])
    r = reg.resolve("locked")
    assert r.seccomp == "strict" and '"ioctl"' not in r.seccomp_json
    assert r.seccomp_sha256 != resolve(reg.get("workspace-write")).seccomp_sha256
    # without the registry, only the default search path is searched
    with pytest.raises(ConfigInvalid, match=r"seccomp: no seccomp profile 'strict' \(known: default\)"):
        resolve(reg.get("locked"))


def test_a_profile_object_resolves_without_a_file() -> None:
    p = Profile(name="adhoc", description="built in code", limits={"memory": "128m"})
    r = resolve(p)
    assert r.name == "adhoc" and r.memory_bytes == 128 * MIB and r.seccomp == "default"
