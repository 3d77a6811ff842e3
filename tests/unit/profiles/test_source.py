"""profiles.source: the profiles in force follow their files — a valid change taken whole, an invalid one refused
with the old set kept (and said), a ConfigMap's ``..data`` swap seen, a removed profile gone — and a snapshot
never reads a file again once made."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from orchestrator.domain.errors import ConfigInvalid, ProfileNotFound
from orchestrator.profiles import ProfileRegistry
from orchestrator.profiles import source as source_module
from orchestrator.profiles.changes import ChangedFile, ChangeKind, ProfileReload
from orchestrator.profiles.paths import builtin_dir
from orchestrator.profiles.snapshot import ProfileSnapshot
from orchestrator.profiles.source import ProfileSource

MIB = 1024 * 1024
SMALL = "description: small\nextends: workspace-write\nlimits:\n  memory: 256m\n"
BIGGER = "description: small\nextends: workspace-write\nlimits:\n  memory: 1g\n"
_mtime = [1_700_000_000 * 10**9]


def write(path: Path, text: str) -> Path:
    """``text`` at ``path``, with an mtime of its own (a rewrite within one clock tick is still a change)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    _mtime[0] += 10**9
    os.utime(path, ns=(_mtime[0], _mtime[0]))
    return path


class Watched:
    """A ProfileSource over the built-ins and ``directory``, looking at every call, its reloads kept."""

    def __init__(self, directory: Path) -> None:
        self.source = ProfileSource([builtin_dir(), directory], check_every_s=0)
        self.reloads: list[ProfileReload] = []
        self.source.subscribe(self.reloads.append)

    def memory(self, name: str = "small") -> int:
        return self.source.current().resolve(name).memory_bytes


def test_a_valid_change_is_taken_whole_and_said(tmp_path: Path) -> None:
    small = write(tmp_path / "small.yaml", SMALL)
    watched = Watched(tmp_path)
    before = watched.source.current()
    assert watched.memory() == 256 * MIB and watched.reloads == []
    write(small, BIGGER)
    write(tmp_path / "tiny.yaml", "description: tiny\nextends: workspace-write\nlimits: {memory: 64m}\n")
    assert watched.memory() == 1024 * MIB
    assert watched.memory("tiny") == 64 * MIB
    [reload] = watched.reloads
    assert reload.old is before and reload.new is watched.source.current() and reload.refused is None
    uid = os.getuid()
    assert [(c.name, c.kind, c.files) for c in reload.changes] == [
        ("small", ChangeKind.CHANGED, (ChangedFile(str(small), uid),)),
        ("tiny", ChangeKind.ADDED, (ChangedFile(str(tmp_path / "tiny.yaml"), uid),)),
    ]
    changed = reload.changes[0]
    assert changed.old_definition == before.resolve("small").definition_sha256
    assert changed.new_definition == watched.source.current().resolve("small").definition_sha256
    assert reload.changes[1].old_definition is None
    assert watched.source.last_error is None


BROKEN = {
    "yaml": ("small.yaml", "description: small\nlimits: [unclosed\n", "small.yaml:"),
    "schema": ("small.yaml", "description: small\nlimits: {memory: lots}\n", "limits.memory"),
    "cycle": ("small.yaml", "description: small\nextends: loop\n", "cycle: loop -> small -> loop"),
    "seccomp": ("small.yaml", "description: small\nseccomp: missing-one\n", "no seccomp profile 'missing-one'"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_an_invalid_change_keeps_the_whole_old_set_and_is_logged(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "small.yaml", SMALL)
    write(tmp_path / "loop.yaml", "description: loop\nextends: workspace-write\n")
    watched = Watched(tmp_path)
    kept = watched.source.current()
    name, text, said = BROKEN[kind]
    if kind == "cycle":
        write(tmp_path / "loop.yaml", "description: loop\nextends: small\n")
    write(tmp_path / "other.yaml", "description: other\nextends: read-only\n")  # a valid change beside it
    write(tmp_path / name, text)
    with caplog.at_level(logging.ERROR, logger="orchestrator.profiles.source"):
        assert watched.memory() == 256 * MIB  # the old set, whole: not the valid half of the change either
    assert watched.source.current() is kept
    with pytest.raises(ProfileNotFound):
        watched.source.current().get("other")
    [reload] = watched.reloads
    assert reload.new is None and reload.changes == ()
    error = watched.source.last_error
    assert isinstance(error, ConfigInvalid) and error is reload.refused
    assert error.message.startswith("the profiles were not reloaded, the set in force is kept: profile ")
    assert said in error.message
    assert [r.getMessage() for r in caplog.records] == [error.message]
    assert {f.path for f in reload.files} >= {str(tmp_path / "other.yaml"), str(tmp_path / name)}
    # unchanged files: no second look, no second refusal
    assert watched.memory() == 256 * MIB and len(watched.reloads) == 1
    # fixed: the whole new set at once
    write(tmp_path / "loop.yaml", "description: loop\nextends: workspace-write\n")
    write(tmp_path / name, BIGGER)
    assert watched.memory() == 1024 * MIB
    assert watched.source.current().get("other").extends == "read-only"
    assert watched.source.last_error is None


def test_a_removed_profile_is_gone_and_said(tmp_path: Path) -> None:
    small = write(tmp_path / "small.yaml", SMALL)
    watched = Watched(tmp_path)
    definition = watched.source.current().resolve("small").definition_sha256
    small.unlink()
    with pytest.raises(ProfileNotFound, match="unknown profile 'small'"):
        watched.source.current().get("small")
    [change] = watched.reloads[0].changes
    assert (change.name, change.kind, change.old_definition, change.new_definition) == (
        "small",
        ChangeKind.REMOVED,
        definition,
        None,
    )
    assert change.files == (ChangedFile(str(small), None),)  # gone: no owner to tell


def configmap(root: Path, version: str, files: dict[str, str]) -> None:
    """A ConfigMap volume as the kubelet writes it: the files in a timestamped directory, ``..data`` a link to
    it, swapped in one rename; each top-level entry a link through ``..data``."""
    for relative, text in files.items():
        write(root / version / relative, text)
    (root / "..data_tmp").symlink_to(version)
    os.replace(root / "..data_tmp", root / "..data")  # the swap: atomic
    for top in {relative.split("/")[0] for relative in files}:
        if not (root / top).is_symlink():
            (root / top).symlink_to(Path("..data") / top)


@pytest.mark.parametrize("layout", ["files", "chart"])
def test_a_configmap_swap_of_its_data_link_is_taken(tmp_path: Path, layout: str) -> None:
    """``files``: a ConfigMap of NAME.yaml keys mounted as the profiles directory; ``chart``: the chart's, its
    profiles/ and profiles/seccomp/ laid out by the volume's items (the profiles directory is a link itself)."""
    prefix = "profiles/" if layout == "chart" else ""
    seccomp = (builtin_dir() / "seccomp" / "default.json").read_text(encoding="utf-8")
    root = tmp_path / "mount"
    configmap(root, "..2026_11_28_a", {f"{prefix}small.yaml": SMALL, f"{prefix}seccomp/narrow.json": seccomp})
    directory = root / "profiles" if layout == "chart" else root
    watched = Watched(directory)
    assert watched.memory() == 256 * MIB
    newer = BIGGER + "seccomp: narrow\n"
    configmap(root, "..2026_11_28_b", {f"{prefix}small.yaml": newer, f"{prefix}seccomp/narrow.json": seccomp})
    for old in (root / "..2026_11_28_a").rglob("*"):  # the kubelet removes the old version
        if old.is_file():
            old.unlink()
    assert watched.memory() == 1024 * MIB
    assert watched.source.current().get("small").seccomp == "narrow"
    [change] = watched.reloads[0].changes
    assert change.kind == ChangeKind.CHANGED
    assert [f.path for f in change.files] == [str(directory / "seccomp" / "narrow.json"), str(directory / "small.yaml")]


def test_a_set_changed_while_it_was_read_is_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small = write(tmp_path / "small.yaml", SMALL)
    watched = Watched(tmp_path)
    write(small, BIGGER)
    real = source_module.ProfileSnapshot

    def read_then_change(search_path: list[Path]) -> ProfileSnapshot:
        snapshot = real(search_path)
        write(small, SMALL.replace("256m", "512m"))  # halfway through a swap: what was read is already old
        monkeypatch.setattr(source_module, "ProfileSnapshot", real)
        return snapshot

    monkeypatch.setattr(source_module, "ProfileSnapshot", read_then_change)
    assert watched.memory() == 256 * MIB and watched.reloads == []  # neither taken nor refused
    assert watched.memory() == 512 * MIB  # the next look reads the settled files
    assert [c.kind for c in watched.reloads[0].changes] == [ChangeKind.CHANGED]


def test_files_are_looked_at_no_more_often_than_asked(tmp_path: Path) -> None:
    small = write(tmp_path / "small.yaml", SMALL)
    now = [100.0]
    source = ProfileSource([builtin_dir(), tmp_path], check_every_s=1.0, clock=lambda: now[0])
    write(small, BIGGER)
    now[0] += 0.5
    assert source.current().resolve("small").memory_bytes == 256 * MIB  # not looked at yet
    now[0] += 0.5
    assert source.current().resolve("small").memory_bytes == 1024 * MIB


def test_a_profile_broken_from_the_start_holds_no_other_change_back(tmp_path: Path) -> None:
    write(tmp_path / "small.yaml", SMALL)
    broken = write(tmp_path / "broken.yaml", "description: broken\nextends: nowhere\n")
    watched = Watched(tmp_path)
    with pytest.raises(ConfigInvalid, match="unknown profile 'nowhere'"):
        watched.source.current().get("broken")
    write(tmp_path / "small.yaml", BIGGER)
    assert watched.memory() == 1024 * MIB  # taken: the broken one fails just as it did
    assert [c.name for c in watched.reloads[0].changes] == ["small"]
    write(broken, "description: broken\nextends: elsewhere\n")  # broken another way: that is a change refused
    write(tmp_path / "small.yaml", SMALL)
    assert watched.memory() == 1024 * MIB
    assert "unknown profile 'elsewhere'" in str(watched.reloads[1].refused)


def test_a_gone_directory_is_a_refused_change(tmp_path: Path) -> None:
    directory = tmp_path / "profiles"
    write(directory / "small.yaml", SMALL)
    watched = Watched(directory)
    (directory / "small.yaml").unlink()
    directory.rmdir()
    assert watched.memory() == 256 * MIB
    assert "not a directory" in str(watched.source.last_error)
    [reload] = watched.reloads
    assert reload.refused is watched.source.last_error
    assert reload.files == (ChangedFile(str(directory / "small.yaml"), None),)


def test_a_snapshot_never_reads_a_file_again(tmp_path: Path) -> None:
    small = write(tmp_path / "small.yaml", SMALL)
    write(tmp_path / "seccomp" / "narrow.json", (builtin_dir() / "seccomp" / "default.json").read_text())
    write(tmp_path / "other.yaml", "description: other\nextends: small\nseccomp: narrow\n")
    snapshot = ProfileSnapshot([builtin_dir(), tmp_path])
    resolved = snapshot.resolve("other")
    small.unlink()
    (tmp_path / "other.yaml").unlink()
    write(tmp_path / "seccomp" / "narrow.json", '{"defaultAction": "SCMP_ACT_ALLOW"}')
    write(tmp_path / "late.yaml", "description: late\n")
    assert snapshot.names() == ["ci", "other", "read-only", "small", "untrusted", "workspace-write"]
    assert snapshot.resolve("other") == resolved
    assert snapshot.sources("other") == (
        builtin_dir() / "workspace-write.yaml",
        small,
        tmp_path / "other.yaml",
        tmp_path / "seccomp" / "narrow.json",
    )
    assert ProfileRegistry([tmp_path]).names() != snapshot.names()  # a registry made now sees today's files
