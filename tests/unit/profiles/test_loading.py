"""Loading profiles: built-ins, the search path, extends chains, and errors naming file, line and field."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from orchestrator.domain.errors import ConfigInvalid, ProfileNotFound
from orchestrator.profiles import ProfileRegistry
from orchestrator.profiles.paths import ENV_VAR, builtin_dir
from tests.support.paths import ROOT

MIB = 1024 * 1024
BUILTINS = ["ci", "read-only", "untrusted", "workspace-write"]


@pytest.fixture(autouse=True)
def _no_env_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def config_error(registry: ProfileRegistry, name: str) -> ConfigInvalid:
    with pytest.raises(ConfigInvalid) as info:
        registry.get(name)
    return info.value


# -- built-ins -----------------------------------------------------------------------------------------


def test_builtin_dir_is_the_top_level_profiles_dir_in_a_checkout() -> None:
    assert builtin_dir() == (ROOT / "profiles").resolve()
    assert ProfileRegistry([]).names() == BUILTINS


def test_workspace_write_is_the_documented_default() -> None:
    p = ProfileRegistry([]).get("workspace-write")
    assert (p.runtime, p.image, p.user) == ("runc", "sandbox-orchestrator/default:latest", "1000:1000")
    assert p.workspace.mode == "rw" and p.workspace.container_path == "/workspace"
    assert [(t.path, t.size, t.mode) for t in p.tmpfs] == [("/tmp", 64 * MIB, "1777")]
    lim = p.limits
    assert (lim.memory, lim.cpus, lim.pids, lim.wall_timeout_s) == (512 * MIB, 1.0, 128, 300.0)
    assert (lim.stdout_max_bytes, lim.stderr_max_bytes, lim.nofile, lim.fsize) == (MIB, MIB, 1024, 256 * MIB)
    assert p.env["HOME"] == "/tmp" and p.env["PATH"].startswith("/usr/local/sbin")
    assert "TERM" in p.env_allowlist and "PATH" not in p.env_allowlist


def test_read_only_extends_workspace_write() -> None:
    reg = ProfileRegistry([])
    ro, base = reg.get("read-only"), reg.get("workspace-write")
    assert ro.extends == "workspace-write" and ro.workspace.mode == "ro"
    assert ro.model_dump(exclude={"name", "description", "extends", "workspace"}) == base.model_dump(
        exclude={"name", "description", "extends", "workspace"}
    )
    assert ro.description != base.description


def test_untrusted_is_gvisor_and_tighter() -> None:
    p = ProfileRegistry([]).get("untrusted")
    assert p.runtime == "runsc"
    assert (p.limits.memory, p.limits.pids, p.limits.wall_timeout_s) == (256 * MIB, 256, 60.0)
    assert (p.limits.stdout_max_bytes, p.limits.stderr_max_bytes) == (256 * 1024, 256 * 1024)
    assert p.limits.pids >= 64  # gVisor's own threads count against the pids cgroup


def test_ci_is_larger() -> None:
    p = ProfileRegistry([]).get("ci")
    assert (p.limits.memory, p.limits.cpus, p.limits.pids) == (2048 * MIB, 2.0, 512)
    assert (p.limits.wall_timeout_s, p.limits.stdout_max_bytes, p.limits.stderr_max_bytes) == (1800.0, 8 * MIB, 8 * MIB)
    # a step's environment is the workflow's own: every name but the code-loading ones (env_admitted)
    assert p.env_allowlist == ("*",)
    assert (p.workspace.mode, p.workspace.container_path) == ("rw", "/__w")  # the GitHub runner's work directory


def test_pyproject_ships_the_builtin_profiles_as_package_data() -> None:
    """The built-ins must be in the wheel: every file under orchestrator/profiles/builtin matches package-data."""
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"][
        "package-data"
    ]["orchestrator"]
    package = ROOT / "orchestrator"
    shipped = {
        str(path.relative_to(package))
        for path in (package / "profiles" / "builtin").rglob("*")
        if path.is_file() and path.suffix in (".yaml", ".json")
    }
    assert shipped >= {"profiles/builtin/workspace-write.yaml", "profiles/builtin/seccomp/default.json"}
    globbed = {str(p.relative_to(package)) for pattern in patterns for p in package.glob(pattern) if p.is_file()}
    missing = sorted(shipped - globbed)
    assert not missing, (
        "pyproject.toml [tool.setuptools.package-data] orchestrator must include "
        '"profiles/builtin/*.yaml", "profiles/builtin/schema.json", "profiles/builtin/seccomp/*.json"; '
        f"not shipped: {missing}"
    )


# -- names and the search path ----------------------------------------------------------------------------


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ProfileNotFound) as info:
        ProfileRegistry([]).get("nope")
    assert info.value.code == "PROFILE.NOT_FOUND"
    assert "known: ci, read-only, untrusted, workspace-write" in info.value.message
    assert info.value.details["known"] == BUILTINS


@pytest.mark.parametrize("name", ["../profiles/ci", "/etc/passwd", "CI", "", "a" * 200])
def test_names_that_are_not_profile_names_are_not_found(name: str) -> None:
    with pytest.raises(ProfileNotFound):
        ProfileRegistry([]).get(name)


def test_extra_dirs_from_the_environment_later_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    write(first, "custom", "description: from a\n")
    write(second, "custom", "description: from b\n")
    write(second, "untrusted", "description: site override\nruntime: runsc\n")
    (second / "notes.txt").write_text("ignored")
    (second / "Bad Name.yaml").write_text("description: never loadable\n")
    monkeypatch.setenv(ENV_VAR, f"{first}::{second}")
    reg = ProfileRegistry()
    assert reg.search_path == (builtin_dir(), first, second)
    assert reg.names() == ["ci", "custom", "read-only", "untrusted", "workspace-write"]
    assert reg.get("custom").description == "from b"
    assert reg.get("untrusted").description == "site override"
    assert reg.path_of("untrusted") == second / "untrusted.yaml"


def test_a_missing_extra_dir_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(ConfigInvalid, match=f"{ENV_VAR}: .*missing: not a directory"):
        ProfileRegistry()
    with pytest.raises(ConfigInvalid, match="not a directory"):
        ProfileRegistry([tmp_path / "missing"])


def test_name_defaults_to_the_stem_and_must_equal_it(tmp_path: Path) -> None:
    write(tmp_path, "mine", "description: d\nname: mine\n")
    write(tmp_path, "other", "description: d\n\nname: someone-else\n")
    reg = ProfileRegistry([tmp_path])
    assert reg.get("mine").name == "mine"
    err = config_error(reg, "other")
    assert err.message == f"{tmp_path / 'other.yaml'}:3: name: must equal the file name 'other' (or be left out)"
    assert err.details == {"file": str(tmp_path / "other.yaml"), "line": 3, "fields": ["name"]}


def test_errors_name_file_line_and_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "bad",
        "description: d\nlimits:\n  cpus: 1\n  memory: 2x\n  pids: 3\nuser: '0:0'\ncapabilities: [SYS_ADMIN]\n",
    )
    err = config_error(ProfileRegistry([tmp_path]), "bad")
    assert err.code == "CONFIG.INVALID"
    problems = err.message.split("; ")
    assert any(p.startswith(f"{path}:4: limits.memory: ") for p in problems)
    assert any(p.startswith(f"{path}:5: limits.pids: ") for p in problems)
    assert any(p.startswith(f"{path}:6: user: ") and "must not be root" in p for p in problems)
    assert any(p.startswith(f"{path}:7: capabilities: ") for p in problems)
    assert sorted(err.details["fields"]) == ["capabilities", "limits.memory", "limits.pids", "user"]
    assert err.details["file"] == str(path) and err.details["line"] == 6  # the first problem's line


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("description: d\nlimits: {memory: 1g\n", ": invalid YAML: expected ',' or '}'"),
        ("- a\n- b\n", ":1: a profile must be a mapping"),
        ("description: d\ndescription: e\n", ":2: duplicate key 'description'"),
        ("description: d\nextends: [a]\n", ":2: extends: must be the name of another profile"),
        ("", "description: Field required"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, needle: str) -> None:
    write(tmp_path, "bad", text)
    assert needle in config_error(ProfileRegistry([tmp_path]), "bad").message


# -- extends -----------------------------------------------------------------------------------------------


def test_extends_deep_merges_mappings_and_replaces_lists(tmp_path: Path) -> None:
    write(
        tmp_path,
        "base",
        "description: base\nimage: x/base:1\nlimits:\n  memory: 1g\n  pids: 200\nenv:\n  A: a\n  B: b\n"
        "env_allowlist: [TERM, TZ]\ntmpfs:\n  - {path: /tmp, size: 8m}\n  - {path: /run, size: 1m}\n",
    )
    write(tmp_path, "mid", "description: mid\nextends: base\nlimits:\n  pids: 100\nenv:\n  B: bee\n")
    write(
        tmp_path,
        "leaf",
        "description: leaf\nextends: mid\nenv_allowlist: [CI]\ntmpfs:\n  - {path: /tmp, size: 2m}\nenv:\n  C: c\n",
    )
    reg = ProfileRegistry([tmp_path])
    leaf = reg.get("leaf")
    assert leaf.extends == "mid" and leaf.description == "leaf"
    assert leaf.image == "x/base:1"
    assert (leaf.limits.memory, leaf.limits.pids) == (1024 * MIB, 100)  # merged key by key
    assert leaf.env == {"A": "a", "B": "bee", "C": "c"}
    assert leaf.env_allowlist == ("CI",)  # lists replaced
    assert [(t.path, t.size) for t in leaf.tmpfs] == [("/tmp", 2 * MIB)]
    assert reg.get("mid").env_allowlist == ("TERM", "TZ")


def test_description_is_not_inherited(tmp_path: Path) -> None:
    write(tmp_path, "child", "extends: workspace-write\nlimits: {memory: 1g}\n")
    err = config_error(ProfileRegistry([tmp_path]), "child")
    assert f"{tmp_path / 'child.yaml'}:1: description: Field required" in err.message


def test_extends_a_builtin(tmp_path: Path) -> None:
    write(tmp_path, "big", "description: more memory\nextends: untrusted\nlimits:\n  memory: 1g\n")
    big = ProfileRegistry([tmp_path]).get("big")
    assert big.runtime == "runsc" and big.limits.memory == 1024 * MIB and big.limits.wall_timeout_s == 60


def test_unknown_parent_is_refused_at_the_extends_line(tmp_path: Path) -> None:
    path = write(tmp_path, "orphan", "description: d\n\nextends: nobody\n")
    err = config_error(ProfileRegistry([tmp_path]), "orphan")
    assert err.message.startswith(f"{path}:3: extends: unknown profile 'nobody' (known: ci, orphan, read-only")
    assert err.details["fields"] == ["extends"]


@pytest.mark.parametrize(
    ("files", "start", "cycle"),
    [
        ({"a": "extends: b", "b": "extends: a"}, "a", "a -> b -> a"),
        ({"a": "extends: b", "b": "extends: c", "c": "extends: a"}, "a", "a -> b -> c -> a"),
    ],
)
def test_cycles_are_refused(tmp_path: Path, files: dict[str, str], start: str, cycle: str) -> None:
    for name, line in files.items():
        write(tmp_path, name, f"description: {name}\n{line}\n")
    err = config_error(ProfileRegistry([tmp_path]), start)
    assert f":2: extends: cycle: {cycle}" in err.message


def test_merged_errors_point_at_the_file_that_set_the_value(tmp_path: Path) -> None:
    parent = write(tmp_path, "parent", "description: p\ntmpfs:\n  - {path: /data/tmp, size: 1m}\n")
    text = "description: c\nextends: parent\nworkspace: {container_path: /data}\nlimits:\n  memory: 2x\n"
    child = write(tmp_path, "child", text)
    err = config_error(ProfileRegistry([tmp_path]), "child")
    assert f"{child}:5: limits.memory: " in err.message
    assert f"{parent}:2: tmpfs: " in err.message
    assert sorted(p.split(":")[0] for p in err.details["problems"]) == sorted([str(child), str(parent)])
    assert (err.details["file"], err.details["line"]) == (str(child), 5)  # the broken file: the child


def test_a_child_value_hides_the_parents_lines_below_it(tmp_path: Path) -> None:
    write(tmp_path, "parent", "description: p\ntmpfs:\n  - path: /tmp\n    size: 1m\n    mode: '0700'\n")
    child = write(tmp_path, "child", "description: c\nextends: parent\ntmpfs:\n  - {path: /tmp, size: 1}\n")
    err = config_error(ProfileRegistry([tmp_path]), "child")
    assert err.message.startswith(f"{child}:4: tmpfs.0.size: ")


def test_runsc_pids_check_sees_the_merged_runtime(tmp_path: Path) -> None:
    child = write(tmp_path, "tiny", "description: t\nextends: untrusted\nlimits:\n  pids: 32\n")
    err = config_error(ProfileRegistry([tmp_path]), "tiny")
    assert f"{child}:3: limits: " in err.message and "at least 64 with runtime runsc" in err.message


# -- load_file --------------------------------------------------------------------------------------------


def test_load_file_looks_up_parents_in_its_own_directory(tmp_path: Path) -> None:
    write(tmp_path, "team-base", "description: b\nlimits: {memory: 1g}\n")
    path = write(tmp_path, "team", "description: t\nextends: team-base\n")
    reg = ProfileRegistry([])
    profile = reg.load_file(path)
    assert profile.name == "team" and profile.limits.memory == 1024 * MIB
    assert reg.search_path == (builtin_dir(),)  # the registry itself is unchanged
    with pytest.raises(ProfileNotFound):
        reg.get("team")


def test_load_file_of_a_modified_builtin_copy(tmp_path: Path) -> None:
    path = write(tmp_path, "workspace-write", (builtin_dir() / "workspace-write.yaml").read_text() + "\n")
    assert ProfileRegistry([]).load_file(path) == ProfileRegistry([]).get("workspace-write")


def test_load_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigInvalid, match="file not found"):
        ProfileRegistry([]).load_file(tmp_path / "absent.yaml")
    bad = tmp_path / "Bad Name.yaml"
    bad.write_text("description: d\n")
    with pytest.raises(ConfigInvalid, match=r":1: name: the file name 'Bad Name' is not a profile name"):
        ProfileRegistry([]).load_file(bad)


def test_registry_profiles_and_caching(tmp_path: Path) -> None:
    path = write(tmp_path, "c", "description: one\n")
    reg = ProfileRegistry([tmp_path])
    assert reg.get("c") is reg.get("c")
    path.write_text("description: two\n")
    assert reg.get("c").description == "one"  # a registry is a snapshot; a new one sees edits
    assert ProfileRegistry([tmp_path]).get("c").description == "two"
    assert [p.name for p in reg.profiles()] == ["c", *BUILTINS]
