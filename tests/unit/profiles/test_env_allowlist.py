"""``env_allowlist`` entries: names, or shell-style globs of them (``*``, ``GITHUB_*``). A code-loading name is never
admitted, by a glob neither (and, listed exactly, is refused when the profile is loaded); the launch applies the
same rule and names every name it refuses."""

from __future__ import annotations

import pytest

from orchestrator.domain.errors import InputInvalid
from orchestrator.pipeline.launch import sandbox_env
from orchestrator.profiles import ProfileRegistry, resolve
from orchestrator.profiles.models import env_admitted, is_env_glob
from tests.unit.profiles.test_models import errors_of, make  # the profile models' own helpers


@pytest.mark.parametrize("entries", [["*"], ["GITHUB_*", "RUNNER_*", "CI"], ["LC_[A-Z]*", "X?"], ["[!L]*"]])
def test_globs_are_entries(entries: list[str]) -> None:
    assert make(env_allowlist=entries).env_allowlist == tuple(entries)


@pytest.mark.parametrize(
    ("entries", "field", "needle"),
    [
        (["PATH"], "env_allowlist", "PATH cannot be allowed"),
        (["*", "HOME"], "env_allowlist", "HOME cannot be allowed"),
        (["LD_*"], "env_allowlist", "LD_* admits nothing"),
        (["BASH_FUNC_*"], "env_allowlist", "BASH_FUNC_* admits nothing"),
        (["*", "*"], "env_allowlist", "unique"),
        (["GITHUB_["], "env_allowlist.0", "unclosed '['"),
        (["A=*"], "env_allowlist.0", "pattern"),
        (["*.x"], "env_allowlist.0", "pattern"),
        (["1BAD"], "env_allowlist.0", "pattern"),
    ],
)
def test_what_cannot_be_an_entry_is_refused_naming_the_field(entries: list[str], field: str, needle: str) -> None:
    found = errors_of(env_allowlist=entries)
    assert any(loc == field and needle in msg for loc, msg in found), found


def test_a_glob_never_admits_a_code_loading_name() -> None:
    everything = ("*",)
    for name in ("CI", "GITHUB_SHA", "RUNNER_TEMP", "INPUT_TOKEN", "TERM", "MAKEFLAGS", "path"):
        assert env_admitted(everything, name), name
    for name in ("PATH", "HOME", "LD_PRELOAD", "DYLD_INSERT_LIBRARIES", "BASH_FUNC_x%%", "PYTHONPATH", "NODE_OPTIONS"):
        assert not env_admitted(everything, name), name
        assert not env_admitted((name,), name), name  # (such an entry is refused at load; here it admits nothing)
    github = ("GITHUB_*", "CI")
    assert env_admitted(github, "GITHUB_SHA") and env_admitted(github, "CI")
    assert not env_admitted(github, "github_sha")  # case matters, as in the environment
    assert not env_admitted(github, "CIX") and not env_admitted(github, "RUNNER_OS")
    assert not env_admitted((), "CI")
    assert is_env_glob("GITHUB_*") and is_env_glob("X?") and is_env_glob("[AB]") and not is_env_glob("TERM")


def test_an_exact_name_never_matches_as_a_glob() -> None:
    assert env_admitted(("TERM",), "TERM") and not env_admitted(("TERM",), "TERMINAL")


def test_the_resolved_profile_keeps_the_entries_as_given() -> None:
    resolved = resolve(make(env_allowlist=["TERM", "GITHUB_*"]))
    assert resolved.env_allowlist == ("GITHUB_*", "TERM")  # sorted, never expanded
    assert ProfileRegistry([]).resolve("ci").env_allowlist == ("*",)


def test_the_launch_admits_what_an_entry_admits_and_names_every_name_it_refuses() -> None:
    ci = ProfileRegistry([]).resolve("ci")
    env = sandbox_env(ci, {"GITHUB_SHA": "abc", "CI": "true", "TMPDIR": "/__w/_temp"})
    assert env["GITHUB_SHA"] == "abc" and env["CI"] == "true"
    assert env["TMPDIR"] == "/__w/_temp"  # a request's allowed value overrides the profile's default
    assert env["PATH"] == ci.env["PATH"]  # the profile's own, never the request's
    with pytest.raises(InputInvalid) as err:
        sandbox_env(ci, {"GITHUB_SHA": "abc", "PATH": "/tmp/evil", "LD_PRELOAD": "/tmp/x.so"})
    assert err.value.message == (
        "env LD_PRELOAD, PATH not allowed by profile 'ci' (allowed: *; LD_PRELOAD, PATH change which code runs:"
        " never allowed)"
    )
    assert err.value.details == {"fields": ["env.LD_PRELOAD", "env.PATH"]}
    names = resolve(make(env_allowlist=["GITHUB_*", "TERM"]))
    assert sandbox_env(names, {"GITHUB_REF": "refs/heads/main", "TERM": "xterm"})["GITHUB_REF"] == "refs/heads/main"
    with pytest.raises(InputInvalid) as err:
        sandbox_env(names, {"RUNNER_OS": "Linux", "HOME": "/x"})
    assert err.value.message == (
        "env HOME, RUNNER_OS not allowed by profile 'p' (allowed: GITHUB_*, TERM; HOME changes which code runs:"
        " never allowed)"
    )
    nothing = resolve(make())
    with pytest.raises(InputInvalid) as err:
        sandbox_env(nothing, {"TERM": "xterm"})
    assert err.value.message == "env TERM not allowed by profile 'p' (allowed: none)"
