"""A CI job's runner externals: the directory the deployment puts beside the work directory
(``<tenant>/.ci-externals/<workspace>``), checked (real directories, owner, mode, no hard link, no link out of it)
and mounted read-only from there; never taken from the work directory, never moved or removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.domain.errors import CiUnsupported, SandboxUnavailable
from orchestrator.pipeline import externals
from orchestrator.profiles import ResolvedMount


def _deployed(tmp_path: Path) -> Path:
    """A runner's work directory, and its externals where the deployment copies them."""
    workspace = tmp_path / "tenant" / "runner-1"
    workspace.mkdir(parents=True)
    node = tmp_path / "tenant" / ".ci-externals" / "runner-1" / "node20" / "bin"
    node.mkdir(parents=True)
    (node / "node").write_text("#!node\n")
    (node.parent / "lib").mkdir()
    (node.parent / "lib" / "npm-cli.js").write_text("npm\n")
    os.symlink("../lib/npm-cli.js", node / "npm")  # as node's own tree has them: inside it
    return workspace


def test_the_directory_beside_the_work_directory_is_mounted_read_only_and_left_as_it_is(tmp_path: Path) -> None:
    workspace = _deployed(tmp_path)
    kept = tmp_path / "tenant" / ".ci-externals" / "runner-1"
    assert externals.location(workspace) == kept
    wanted = ResolvedMount(source=str(kept), target="/__e")
    assert externals.check(workspace) == wanted
    assert externals.mount(workspace) == wanted
    assert (kept / "node20" / "bin" / "node").read_text() == "#!node\n"  # nothing moved, nothing removed
    assert externals.layout(workspace) == "<service.workspaces>/tenant/.ci-externals/runner-1"


def test_what_a_step_writes_in_the_work_directory_is_never_the_externals(tmp_path: Path) -> None:
    """The old place (a directory of the work directory, which every step can write) is not read at all."""
    workspace = tmp_path / "tenant" / "runner-1"
    (workspace / "externals" / "node20" / "bin").mkdir(parents=True)
    (workspace / "externals" / "node20" / "bin" / "node").write_text("#!planted\n")
    with pytest.raises(CiUnsupported, match=r"\.ci-externals/runner-1 \(\.ci-externals does not exist"):
        externals.check(workspace)
    with pytest.raises(SandboxUnavailable, match="does not exist"):
        externals.mount(workspace)
    assert (workspace / "externals" / "node20" / "bin" / "node").read_text() == "#!planted\n"


def test_a_link_at_the_directory_or_at_its_holder_is_refused(tmp_path: Path) -> None:
    workspace = _deployed(tmp_path)
    kept = externals.location(workspace)
    os.rename(kept, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", kept)
    with pytest.raises(CiUnsupported, match=r"\.ci-externals/runner-1 is not a directory \(a link\)"):
        externals.check(workspace)
    with pytest.raises(SandboxUnavailable, match="is not a directory"):
        externals.mount(workspace)  # checked again at each step's launch

    holder = kept.parent
    os.unlink(kept)
    os.rename(holder, tmp_path / "holder")
    os.symlink(tmp_path / "holder", holder)
    (tmp_path / "holder" / "runner-1").mkdir()
    with pytest.raises(CiUnsupported, match=r"\(\.ci-externals is not a directory \(a link\)"):
        externals.check(workspace)


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    workspace = _deployed(tmp_path)
    kept = externals.location(workspace)
    kept.chmod(0o775)
    with pytest.raises(CiUnsupported, match="writable by others than its owner"):
        externals.check(workspace)
    kept.chmod(0o755)
    kept.parent.chmod(0o777)
    with pytest.raises(SandboxUnavailable, match=r"\.ci-externals is writable by others"):
        externals.mount(workspace)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_directory_of_another_owner_is_refused(tmp_path: Path) -> None:
    workspace = _deployed(tmp_path)
    os.chown(externals.location(workspace), 4242, 4242)
    with pytest.raises(CiUnsupported, match="owned by uid 4242"):
        externals.check(workspace)
    os.chown(workspace.parent, 4242, 4242)  # the tenant directory's owner made it: theirs
    assert externals.check(workspace).source == str(externals.location(workspace))


def test_a_file_with_another_hard_link_is_refused(tmp_path: Path) -> None:
    """A file shared with a workspace would be written through the workspace."""
    workspace = _deployed(tmp_path)
    os.link(externals.location(workspace) / "node20" / "bin" / "node", workspace / "node")
    with pytest.raises(CiUnsupported, match="'node20/bin/node', a file with another hard link"):
        externals.check(workspace)


@pytest.mark.parametrize(
    "target",
    [
        "/__w/node",  # the workspace, where the sandbox sees it
        "../../../runner-1/node",  # out of the tree on the host: the work directory
        "../../..",
        "top/../x",  # through a link inside it (to its top): a name of it as written, above it where it leads
    ],
)
def test_a_link_that_leads_out_of_it_is_refused(tmp_path: Path, target: str) -> None:
    workspace = _deployed(tmp_path)
    bin_dir = externals.location(workspace) / "node20" / "bin"
    os.symlink("../..", bin_dir / "top")
    os.unlink(bin_dir / "node")
    os.symlink(target, bin_dir / "node")
    with pytest.raises(CiUnsupported, match=r"'node20/bin/node', a link to .* outside it"):
        externals.check(workspace)


def test_links_inside_it_and_a_link_loop_are_told_apart(tmp_path: Path) -> None:
    workspace = _deployed(tmp_path)
    bin_dir = externals.location(workspace) / "node20" / "bin"
    os.symlink("here/../bin/node", bin_dir / "again")
    os.symlink(".", bin_dir / "here")
    assert externals.check(workspace).target == "/__e"
    os.symlink("b", bin_dir / "a")
    os.symlink("a", bin_dir / "b")
    with pytest.raises(CiUnsupported, match=r"'node20/bin/[ab]', a link to '[ab]', outside it"):
        externals.check(workspace)
