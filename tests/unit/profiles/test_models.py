"""Profile models: units, invariants of the security baseline, messages that name the field, the schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from orchestrator.profiles import (
    Profile,
    ProfileCaps,
    Tmpfs,
    format_size,
    parse_size,
    profile_json_schema,
    profile_json_schema_text,
)
from orchestrator.profiles.models import is_code_loading_env
from tests.support.paths import ROOT

MIB = 1024 * 1024


def make(**kw: Any) -> Profile:
    return Profile.model_validate({"name": "p", "description": "d", **kw})


def errors_of(**kw: Any) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as info:
        make(**kw)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in info.value.errors()]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (0, 0),
        (1024, 1024),
        ("1024", 1024),
        ("64m", 64 * MIB),
        ("64M", 64 * MIB),
        ("64MiB", 64 * MIB),
        ("64mb", 64 * MIB),
        ("1g", 1024 * MIB),
        ("1.5g", 1536 * MIB),
        ("512k", 512 * 1024),
        ("2t", 2 * 1024**4),
        ("100b", 100),
        (" 8 m ", 8 * MIB),
    ],
)
def test_parse_size(text: Any, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "m", "-1m", "1x", "1.3b", "1e9", True, 1.5, None, [1], "0x10"])
def test_parse_size_rejects(text: Any) -> None:
    with pytest.raises(ValueError, match="bytes"):
        parse_size(text)


def test_format_size() -> None:
    assert format_size(512 * MIB) == "512MiB"
    assert format_size(2 * 1024 * MIB) == "2GiB"
    assert format_size(256 * 1024) == "256KiB"
    assert format_size(1000) == "1000B"


def test_defaults_are_the_secure_ones() -> None:
    p = make()
    assert p.runtime == "runc" and p.user == "1000:1000" and (p.uid, p.gid) == (1000, 1000)
    assert p.read_only_root is True and p.no_new_privileges is True
    assert p.network.mode == "none" and p.network.allow == () and p.capabilities == () and p.seccomp == "default"
    assert p.workspace.mode == "rw" and p.workspace.container_path == "/workspace"
    assert p.tmpfs == (Tmpfs(path="/tmp", size=64 * MIB),)
    assert p.tmpfs[0].mode == "1777" and p.tmpfs[0].nosuid and p.tmpfs[0].nodev
    assert p.limits.memory == 512 * MIB and p.limits.pids == 128 and p.limits.wall_timeout_s == 300


def test_models_are_frozen() -> None:
    p = make()
    with pytest.raises(ValidationError):
        p.runtime = "runsc"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kw", "field", "needle"),
    [
        ({"user": "0:1000"}, "user", "must not be root"),
        ({"user": "1000:0"}, "user", "must not be root"),
        ({"user": "root"}, "user", "numeric"),
        ({"user": 60030}, "user", "quoted"),  # what YAML makes of an unquoted 1000:30 (base 60)
        ({"read_only_root": False}, "read_only_root", "only granted per request"),
        ({"no_new_privileges": False}, "no_new_privileges", "must be true"),
        ({"network": "bridge"}, "network", "never gets an open network"),
        ({"network": "host"}, "network", "never gets an open network"),
        ({"network": {"mode": "allowlist"}}, "network", "needs at least one host:port"),
        ({"network": {"mode": "none", "allow": ["a.com:443"]}}, "network", "mode none reaches nothing"),
        ({"network": {"mode": "allowlist", "allow": ["*:443"]}}, "network.allow", "a bare '*'"),
        ({"network": {"mode": "allowlist", "allow": ["a.com"]}}, "network.allow", "no port"),
        ({"network": {"mode": "open"}}, "network.mode", "Input should be"),
        ({"capabilities": ["NET_RAW"]}, "capabilities", "none may be added (asked for: NET_RAW)"),
        ({"capabilities": ["ALL"]}, "capabilities", "none may be added"),
        ({"seccomp": "unconfined"}, "seccomp", "not allowed"),
        ({"seccomp": "../x"}, "seccomp", "pattern"),
        ({"runtime": "kata"}, "runtime", "runc"),
        ({"image": "ubuntu"}, "image", "pattern"),
        ({"image": "UPPER/case:1"}, "image", "pattern"),
        ({"image": "x:1 ; rm"}, "image", "pattern"),
        ({"workspace": {"mode": "rwx"}}, "workspace.mode", "'ro' or 'rw'"),
        ({"workspace": {"container_path": "workspace"}}, "workspace.container_path", "absolute"),
        ({"workspace": {"container_path": "/"}}, "workspace.container_path", "must not be '/'"),
        ({"workspace": {"container_path": "/proc/x"}}, "workspace.container_path", "/proc"),
        ({"workspace": {"container_path": "/a/../b"}}, "workspace.container_path", "normalized"),
        ({"tmpfs": [{"path": "/sys", "size": "1m"}]}, "tmpfs.0.path", "/sys"),
        ({"tmpfs": [{"path": "/dev/shm", "size": "1m"}]}, "tmpfs.0.path", "/dev"),
        ({"tmpfs": [{"path": "/tmp", "size": "1k"}]}, "tmpfs.0.size", "greater than or equal"),
        ({"tmpfs": [{"path": "/tmp", "size": "1m", "mode": 1777}]}, "tmpfs.0.mode", "quoted octal"),
        ({"tmpfs": [{"path": "/tmp", "size": "1m", "mode": "999"}]}, "tmpfs.0.mode", "octal"),
        ({"tmpfs": [{"path": "/tmp", "size": "1m", "nosuid": False}]}, "tmpfs.0.nosuid", "always nosuid"),
        ({"tmpfs": [{"path": "/tmp", "size": "1m", "nodev": False}]}, "tmpfs.0.nodev", "always nodev"),
        ({"tmpfs": [{"path": "/tmp", "size": "1m", "uid": 0}]}, "tmpfs.0.uid", "Extra inputs"),
        ({"tmpfs": [{"path": "/workspace/t", "size": "1m"}]}, "tmpfs", "overlaps workspace.container_path"),
        ({"tmpfs": [{"path": "/tmp", "size": "1m"}, {"path": "/tmp/x", "size": "1m"}]}, "tmpfs", "overlaps tmpfs[0]"),
        ({"limits": {"memory": "1m"}}, "limits.memory", "greater than or equal"),
        ({"limits": {"memory": "lots"}}, "limits.memory", "size such as '64m'"),
        ({"limits": {"cpus": 0}}, "limits.cpus", "greater than 0"),
        ({"limits": {"cpus": float("inf")}}, "limits.cpus", ""),
        ({"limits": {"pids": 0}}, "limits.pids", "greater than or equal"),
        ({"limits": {"wall_timeout_s": 0}}, "limits.wall_timeout_s", "greater than 0"),
        ({"limits": {"wall_timeout_s": 86401}}, "limits.wall_timeout_s", "less than or equal"),
        ({"limits": {"stdout_max_bytes": 0}}, "limits.stdout_max_bytes", "greater than or equal"),
        ({"limits": {"nofile": 10}}, "limits.nofile", "greater than or equal"),
        ({"limits": {"fsize": "1k"}}, "limits.fsize", "greater than or equal"),
        ({"limits": {"swap": "1g"}}, "limits", "swap always equals memory"),
        ({"limits": {"memory_swap": "1g"}}, "limits", "no 'memory_swap' setting"),
        ({"runtime": "runsc", "limits": {"pids": 32}}, "limits", "at least 64 with runtime runsc"),
        ({"env_allowlist": ["LD_PRELOAD"]}, "env_allowlist", "LD_PRELOAD cannot be allowed"),
        ({"env_allowlist": ["PATH"]}, "env_allowlist", "PATH cannot be allowed"),
        ({"env_allowlist": ["GIT_CONFIG_KEY_0"]}, "env_allowlist", "cannot be allowed"),
        ({"env_allowlist": ["TERM", "TERM"]}, "env_allowlist", "unique"),
        ({"env_allowlist": ["1BAD"]}, "env_allowlist.0", "pattern"),
        ({"env": {"BAD-NAME": "x"}}, "env.BAD-NAME.[key]", "pattern"),
        ({"env": {"X": "a\x00b"}}, "env", "NUL"),
        ({"swap": "1g"}, "swap", "Extra inputs"),
        ({"extends": "Bad Name"}, "extends", "pattern"),
        ({"description": ""}, "description", "at least 1"),
    ],
)
def test_invalid_values_are_refused_naming_the_field(kw: dict[str, Any], field: str, needle: str) -> None:
    found = errors_of(**kw)
    assert any(loc == field and needle in msg for loc, msg in found), found


def test_valid_variants() -> None:
    p = make(
        image="registry.example:5000/team/img@sha256:" + "a" * 64,
        runtime="runsc",
        user="65534:65534",
        workspace={"mode": "ro", "container_path": "/src/"},
        tmpfs=[
            {"path": "/tmp", "size": "16m", "mode": "0700", "noexec": False},
            {"path": "/run", "size": 1048576},
        ],
        limits={"cpus": "0.5", "memory": "1.5g", "pids": 64},
        env_allowlist=["TERM", "CI"],
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    assert p.workspace.container_path == "/src"
    # exec spelled out where a profile asks for it: the engine mounts a tmpfs noexec unless told otherwise
    assert p.tmpfs[0].mode == "0700" and p.tmpfs[0].mount_options() == "rw,nosuid,nodev,exec,size=16777216,mode=0700"
    # noexec unless a profile says otherwise (a profile that leaves it out never gets an executable tmpfs)
    assert p.tmpfs[1].mount_options() == "rw,nosuid,nodev,noexec,size=1048576,mode=1777"
    assert p.limits.cpus == 0.5 and p.limits.memory == 1536 * MIB
    assert make(tmpfs=[{"path": "/tmp", "size": "1m", "mode": "755"}]).tmpfs[0].mode == "0755"
    assert make(tmpfs=[{"path": "/tmp", "size": "1m", "mode": "01777"}]).tmpfs[0].mode == "1777"
    assert make(tmpfs=[]).tmpfs == ()


def test_code_loading_env() -> None:
    for name in ["LD_PRELOAD", "LD_LIBRARY_PATH", "PATH", "BASH_ENV", "PYTHONPATH", "NODE_OPTIONS", "GIT_SSH_COMMAND",
                 "BASH_FUNC_x%%", "HOME", "GIT_CONFIG_VALUE_3"]:  # fmt: skip
        assert is_code_loading_env(name), name
    for name in ["TERM", "LANG", "CI", "PYTHONUNBUFFERED", "GIT_AUTHOR_NAME", "TZ"]:
        assert not is_code_loading_env(name), name


def test_caps_model() -> None:
    caps = ProfileCaps(max_memory="1g", max_output_bytes="64k", allowed_runtimes=("runc",))
    assert caps.max_memory == 1024 * MIB and caps.max_output_bytes == 65536
    with pytest.raises(ValidationError, match="allowed_runtimes"):
        ProfileCaps(allowed_runtimes=("kata",))
    with pytest.raises(ValidationError, match="max_wall_timeout_s"):
        ProfileCaps(max_wall_timeout_s=0)
    with pytest.raises(ValidationError, match="Extra inputs"):
        ProfileCaps.model_validate({"max_swap": 1})


def test_every_field_is_described() -> None:
    from orchestrator.profiles import Limits, ResolvedProfile, ResolvedTmpfs, ResolvedWorkspace, Workspace

    for model in (Profile, Limits, Workspace, Tmpfs, ProfileCaps, ResolvedProfile, ResolvedTmpfs, ResolvedWorkspace):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name}"
        assert model.model_config.get("frozen") is True and model.model_config.get("extra") == "forbid"


def test_committed_schema_is_the_generated_one() -> None:
    committed = (ROOT / "profiles" / "schema.json").read_text(encoding="utf-8")
    assert committed == profile_json_schema_text(), "run: sandboxctl profiles schema > profiles/schema.json"


def test_schema_describes_the_file_form() -> None:
    schema = profile_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["required"] == ["description"]  # name defaults to the file name, the rest to secure values
    assert schema["additionalProperties"] is False
    props = schema["properties"]
    assert props["network"]["anyOf"][0] == {"const": "none"}  # or the mapping: mode none | allowlist
    assert schema["$defs"]["Network"]["properties"]["mode"]["enum"] == ["none", "allowlist"]
    assert props["read_only_root"]["const"] is True
    assert props["capabilities"]["maxItems"] == 0
    memory = schema["$defs"]["Limits"]["properties"]["memory"]
    assert {"type": "integer", "minimum": 6 * MIB, "maximum": 1024**4} in memory["anyOf"]
    assert any(alt.get("type") == "string" for alt in memory["anyOf"])
    assert json.loads(profile_json_schema_text()) == schema
