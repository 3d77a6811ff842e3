"""Overriding a profile by extending its own name, and a broken file refused alone (profiles.survey)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.domain.errors import ConfigInvalid
from orchestrator.profiles import ProfileRegistry, survey
from orchestrator.profiles.paths import ENV_VAR, builtin_dir

MIB = 1024 * 1024
BUILTINS = ["ci", "read-only", "untrusted", "workspace-write"]


@pytest.fixture(autouse=True)
def _no_env_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(text, encoding="utf-8")
    return path


OVERRIDE = "extends: workspace-write\nlimits:\n  memory: 1g\n"


def test_a_file_extending_its_own_name_overrides_the_builtin(tmp_path: Path) -> None:
    write(tmp_path, "workspace-write.yaml", OVERRIDE)
    registry = ProfileRegistry([tmp_path])
    builtin = ProfileRegistry([]).get("workspace-write")
    changed = registry.get("workspace-write")
    assert changed.limits.memory == 1024 * MIB
    assert changed.extends == "workspace-write"
    assert changed.model_dump(exclude={"limits", "extends"}) == builtin.model_dump(exclude={"limits", "extends"})
    assert changed.limits.model_dump(exclude={"memory"}) == builtin.limits.model_dump(exclude={"memory"})
    # the profiles extending it see the change where they do not set the value themselves
    assert registry.get("read-only").limits.memory == 1024 * MIB
    assert registry.get("ci").limits.memory == 2048 * MIB
    assert [p.name for p in registry.profiles()] == BUILTINS


def test_an_override_may_give_its_own_description(tmp_path: Path) -> None:
    write(tmp_path, "untrusted.yaml", "description: ours\nextends: untrusted\nlimits: {wall_timeout_s: 30}\n")
    profile = ProfileRegistry([tmp_path]).get("untrusted")
    assert (profile.description, profile.runtime, profile.limits.wall_timeout_s) == ("ours", "runsc", 30)


def kept_description_refusal(path: Path, line: int, changes: str, builtin: str) -> str:
    return (
        f"{path}:{line}: description: this override changes {changes}: the description it would keep, from "
        f"{builtin_dir() / builtin}, says what the profile it overrides is, not what this one is: give this file "
        "its own description: line"
    )


@pytest.mark.parametrize(
    ("name", "text", "line", "changes"),
    [
        ("untrusted", "extends: untrusted\nruntime: runc\n", 2, "runtime (runsc -> runc)"),
        ("workspace-write", "extends: workspace-write\n\nseccomp: mine\n", 3, "seccomp (default -> mine)"),
        (
            "workspace-write",
            "extends: workspace-write\nnetwork: {mode: allowlist, allow: ['pypi.org:443']}\n",
            2,
            "network (none -> allowlist pypi.org:443)",
        ),
        ("read-only", "extends: read-only\nworkspace:\n  mode: rw\n", 3, "workspace.mode (ro -> rw)"),
        (
            "untrusted",
            "extends: untrusted\nruntime: runc\nlimits: {memory: 1g}\nseccomp: mine\n",
            2,
            "runtime (runsc -> runc), seccomp (default -> mine)",
        ),
    ],
)
def test_an_override_that_changes_what_the_description_says_must_give_its_own(
    tmp_path: Path, name: str, text: str, line: int, changes: str
) -> None:
    """Review L4: an untrusted.yaml with `extends: untrusted` and `runtime: runc` still called itself gVisor."""
    path = write(tmp_path, f"{name}.yaml", text)
    with pytest.raises(ConfigInvalid) as info:
        ProfileRegistry([tmp_path]).get(name)
    assert info.value.message == kept_description_refusal(path, line, changes, f"{name}.yaml")
    assert info.value.details == {"file": str(path), "line": line, "fields": ["description"]}
    write(tmp_path, f"{name}.yaml", f"description: ours\n{text}")
    assert ProfileRegistry([tmp_path]).get(name).description == "ours"


def test_an_override_that_restates_the_runtime_keeps_the_description(tmp_path: Path) -> None:
    write(tmp_path, "untrusted.yaml", "extends: untrusted\nruntime: runsc\nseccomp: default\nnetwork: none\n")
    profile = ProfileRegistry([tmp_path]).get("untrusted")
    assert profile.description == ProfileRegistry([]).get("untrusted").description


def test_a_broken_description_waits_like_any_broken_file(tmp_path: Path) -> None:
    path = write(tmp_path, "workspace-write.yaml", "extends: workspace-write\nruntime: runsc\n")
    found = survey(ProfileRegistry([tmp_path]))
    assert [(b.file, b.unavailable) for b in found.broken] == [(str(path), tuple(BUILTINS))]
    assert found.broken[0].error.message == kept_description_refusal(
        path, 2, "runtime (runc -> runsc)", "workspace-write.yaml"
    )


def test_overrides_stack_down_the_search_path(tmp_path: Path) -> None:
    write(tmp_path / "team", "workspace-write.yaml", OVERRIDE)
    write(tmp_path / "me", "workspace-write.yaml", "extends: workspace-write\nlimits: {pids: 64}\n")
    profile = ProfileRegistry([tmp_path / "team", tmp_path / "me"]).get("workspace-write")
    assert (profile.limits.memory, profile.limits.pids) == (1024 * MIB, 64)


def test_a_directory_listed_twice_is_still_one(tmp_path: Path) -> None:
    write(tmp_path, "workspace-write.yaml", OVERRIDE)
    assert ProfileRegistry([tmp_path, tmp_path]).get("workspace-write").limits.memory == 1024 * MIB


def test_a_directory_listed_twice_counts_at_its_last_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review L3: with p1:p2:p1, p1 won the name (its last place) but its override built on the definition before
    p1's first place, so p2's override was silently skipped."""
    p1, p2 = tmp_path / "p1", tmp_path / "p2"
    write(p1, "workspace-write.yaml", "extends: workspace-write\nlimits: {pids: 64}\n")
    write(p2, "workspace-write.yaml", OVERRIDE)
    monkeypatch.setenv(ENV_VAR, f"{p1}:{p2}:{p1}")
    for registry in (ProfileRegistry(), ProfileRegistry([p1, p2, p1])):
        profile = registry.get("workspace-write")
        assert (profile.limits.pids, profile.limits.memory) == (64, 1024 * MIB)  # p1's over p2's over the built-in
        assert registry.search_path == (builtin_dir(), p2, p1)
    # the built-in directory named again counts at that place too: there it wins (as its names already did)
    assert ProfileRegistry([p1, builtin_dir()]).search_path == (p1, builtin_dir())
    assert ProfileRegistry([p1, builtin_dir()]).get("workspace-write") == ProfileRegistry([]).get("workspace-write")


def test_an_override_error_points_at_the_override(tmp_path: Path) -> None:
    path = write(tmp_path, "workspace-write.yaml", "extends: workspace-write\nlimits:\n  memory: lots\n")
    with pytest.raises(ConfigInvalid) as info:
        ProfileRegistry([tmp_path]).get("read-only")
    assert info.value.message.startswith(f"{path}:3: limits.memory: ")


def test_extending_its_own_name_with_nothing_beneath_is_refused_with_the_fix(tmp_path: Path) -> None:
    path = write(tmp_path, "mine.yaml", "description: m\nextends: mine\n")
    with pytest.raises(ConfigInvalid) as info:
        ProfileRegistry([tmp_path]).get("mine")
    assert info.value.message.startswith(f"{path}:2: extends: 'mine' is its own name: that means the mine.yaml")
    assert info.value.message.endswith("and there is none: extend another profile, or leave extends: out")
    assert info.value.details["fields"] == ["extends"]


def test_a_cycle_through_an_override_is_still_a_cycle(tmp_path: Path) -> None:
    write(tmp_path, "workspace-write.yaml", "extends: loop\n")
    write(tmp_path, "loop.yaml", "description: l\nextends: workspace-write\n")
    with pytest.raises(ConfigInvalid, match=r"cycle: loop -> workspace-write -> loop; break it: "):
        ProfileRegistry([tmp_path]).get("loop")


def test_with_dir_of_a_directory_already_on_the_path_changes_nothing(tmp_path: Path) -> None:
    """Review M1: appended again, the directory won over those after it (validate then resolved otherwise than runs)."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    registry = ProfileRegistry([tmp_path / "a", tmp_path / "b"])
    assert registry.with_dir(tmp_path / "a").search_path == (builtin_dir(), tmp_path / "a", tmp_path / "b")
    assert registry.with_dir(builtin_dir()).search_path == registry.search_path
    assert registry.with_dir(tmp_path / "b" / ".." / "a").search_path == registry.search_path  # the same directory
    assert registry.with_dir(tmp_path).search_path == (*registry.search_path, tmp_path)


def test_load_file_of_an_override(tmp_path: Path) -> None:
    path = write(tmp_path, "workspace-write.yaml", OVERRIDE)
    assert ProfileRegistry([]).load_file(path).limits.memory == 1024 * MIB
    assert ProfileRegistry([tmp_path]).load_file(path).limits.memory == 1024 * MIB


# -- survey: every profile at once, a broken file refused alone -------------------------------------------


def test_a_broken_override_takes_down_every_profile_that_extends_it(tmp_path: Path) -> None:
    path = write(tmp_path, "workspace-write.yaml", "extends: workspace-write\nlimits:\n  memory: lots\n")
    found = survey(ProfileRegistry([tmp_path]))
    # ci and untrusted set their own memory, but the file beneath them is broken: it governs nothing
    assert found.profiles == ()
    [broken] = found.broken
    assert broken.file == str(path) and broken.unavailable == tuple(BUILTINS)
    assert broken.error.message.startswith(f"{path}:3: limits.memory: ")


# review H1: half of a broken file loosened the most restrictive profile (its cpus and nofile applied to untrusted,
# which sets its own memory, while `profiles list` said the file blocked only read-only and workspace-write)
LOOSENING = "extends: workspace-write\nlimits: {memory: lots, cpus: 4, nofile: 65536}\n"


def test_a_broken_file_governs_no_profile_that_extends_it(tmp_path: Path) -> None:
    path = write(tmp_path, "workspace-write.yaml", LOOSENING)
    registry = ProfileRegistry([tmp_path])
    for name in BUILTINS:
        with pytest.raises(ConfigInvalid) as info:
            registry.get(name)
        assert info.value.message.startswith(f"{path}:2: limits.memory: "), name
        assert (info.value.details["file"], info.value.details["line"]) == (str(path), 2)
    with pytest.raises(ConfigInvalid):
        registry.resolve("untrusted")
    found = survey(registry)
    assert (found.profiles, [(b.file, b.unavailable) for b in found.broken]) == ((), [(str(path), tuple(BUILTINS))])


def test_a_child_that_sets_the_broken_value_itself_still_waits_for_the_broken_parent(tmp_path: Path) -> None:
    parent = write(tmp_path, "parent.yaml", "description: p\nlimits:\n  cpus: 8\n  nofile: 5\n")
    write(tmp_path, "child.yaml", "description: c\nextends: parent\nlimits:\n  nofile: 64\n")
    with pytest.raises(ConfigInvalid) as info:
        ProfileRegistry([tmp_path]).get("child")
    assert info.value.message == f"{parent}:4: limits.nofile: Input should be greater than or equal to 64"
    assert info.value.details["file"] == str(parent)
    found = survey(ProfileRegistry([tmp_path]))
    assert [(b.file, b.unavailable) for b in found.broken] == [(str(parent), ("child", "parent"))]


def test_a_file_valid_alone_but_not_over_what_it_extends_is_the_broken_one(tmp_path: Path) -> None:
    parent = write(tmp_path, "parent.yaml", "description: p\ntmpfs:\n  - {path: /data/tmp, size: 1m}\n")
    child = write(tmp_path, "child.yaml", "description: c\nextends: parent\nworkspace: {container_path: /data}\n")
    write(tmp_path, "grandchild.yaml", "description: g\nextends: child\n")
    found = survey(ProfileRegistry([tmp_path]))
    assert [p.name for p in found.profiles] == sorted([*BUILTINS, "parent"])
    [broken] = found.broken
    assert (broken.file, broken.unavailable) == (str(child), ("child", "grandchild"))
    assert broken.error.message == (
        f"{parent}:2: tmpfs: Value error, tmpfs[0] (/data/tmp) overlaps workspace.container_path (/data)"
    )
    assert (broken.error.details["file"], broken.error.details["line"]) == (str(child), 2)  # its extends: line


def test_each_broken_file_is_named_once_and_the_rest_load(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", "description: b\nlimits: {pids: 1}\n")
    child = write(tmp_path, "child.yaml", "description: c\nextends: bad\n")
    a = write(tmp_path, "a.yaml", "description: a\nextends: b\n")
    b = write(tmp_path, "b.yaml", "description: b\nextends: a\n")
    found = survey(ProfileRegistry([tmp_path]))
    assert [p.name for p in found.profiles] == BUILTINS
    by_file = {b.file: b for b in found.broken}
    assert set(by_file) == {str(bad), str(a), str(b)} and str(child) not in by_file  # child is bad's casualty
    assert by_file[str(bad)].unavailable == ("bad", "child")
    assert by_file[str(bad)].error.message.startswith(f"{bad}:2: limits.pids: ")


CYCLE_FIX = (
    "break it: extend a profile that does not lead back here (a file extends its own name only to build on the "
    "definition it overrides, lower on the search path)"
)


def test_a_cycle_through_a_builtin_is_the_users_file_that_made_it(tmp_path: Path) -> None:
    """Review M2: the cycle was filed under the built-in ci.yaml (the file whose extends: closed it), which
    nobody should edit; the user's workspace-write.yaml extending ci made it."""
    path = write(tmp_path, "workspace-write.yaml", "description: mine\nextends: ci\n")
    registry = ProfileRegistry([tmp_path])
    for name, cycle in [
        ("workspace-write", "workspace-write -> ci -> workspace-write"),
        ("ci", "ci -> workspace-write -> ci"),
        ("read-only", "read-only -> workspace-write -> ci -> workspace-write"),
    ]:
        with pytest.raises(ConfigInvalid) as info:
            registry.get(name)
        assert info.value.message == f"{path}:2: extends: cycle: {cycle}; {CYCLE_FIX}", name
        assert (info.value.details["file"], info.value.details["line"]) == (str(path), 2)
    found = survey(registry)
    assert [(b.file, b.unavailable) for b in found.broken] == [(str(path), tuple(BUILTINS))]
    assert found.broken[0].error.message.startswith(f"{path}:2: extends: cycle: workspace-write -> ci -> ")


def test_a_cycle_among_users_files_is_the_first_of_them_in_the_chain(tmp_path: Path) -> None:
    a = write(tmp_path, "a.yaml", "description: a\nextends: b\n")
    b = write(tmp_path, "b.yaml", "description: b\n\nextends: a\n")
    write(tmp_path, "mine.yaml", "description: m\nextends: a\n")  # leads into the cycle, not part of it
    registry = ProfileRegistry([tmp_path])
    for name, file, line, cycle in [
        ("a", a, 2, "a -> b -> a"),
        ("b", b, 3, "b -> a -> b"),
        ("mine", a, 2, "mine -> a -> b -> a"),
    ]:
        with pytest.raises(ConfigInvalid) as info:
            registry.get(name)
        assert info.value.message == f"{file}:{line}: extends: cycle: {cycle}; {CYCLE_FIX}", name
    found = survey(registry)
    assert [(x.file, x.unavailable) for x in found.broken] == [(str(a), ("a", "mine")), (str(b), ("b",))]


def test_files_never_read_are_named_with_the_fix(tmp_path: Path) -> None:
    yml = write(tmp_path, "workspace-write.yml", OVERRIDE)
    odd = write(tmp_path, "My Profile.yaml", "description: m\n")
    write(tmp_path, ".hidden.yaml", "not: read\n")  # an editor's or a tool's: nobody's profile
    write(tmp_path, "notes.txt", "not a profile\n")
    found = survey(ProfileRegistry([tmp_path]))
    assert [p.name for p in found.profiles] == BUILTINS
    messages = {b.file: b.error.message for b in found.broken}
    assert messages == {
        str(odd): f"{odd}: not read: 'My Profile' is not a profile name (lowercase letters, digits, '.', '_', "
        "'-'; at most 64 characters): rename the file",
        str(yml): f"{yml}: not read: profiles are NAME.yaml files: rename it to workspace-write.yaml",
    }
    assert all(b.unavailable == () for b in found.broken)


def test_the_builtins_survey_clean() -> None:
    found = survey(ProfileRegistry([]))
    assert [p.name for p in found.profiles] == BUILTINS and found.broken == ()
    assert ProfileRegistry([]).search_path == (builtin_dir(),)
