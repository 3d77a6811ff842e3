"""A CI job's runner externals: taken out of the workspace (what stands there, checked), mounted read-only from
where no workspace is, dropped at the job's end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from orchestrator.domain.errors import CiUnsupported, SandboxUnavailable
from orchestrator.pipeline import externals
from orchestrator.profiles import ResolvedMount


def _workspace(tmp_path: Path) -> Path:
    workspace = tmp_path / "tenant" / "runner-1"
    (workspace / "externals" / "node20" / "bin").mkdir(parents=True)
    (workspace / "externals" / "node20" / "bin" / "node").write_text("#!node\n")
    return workspace


def test_taken_out_of_the_workspace_mounted_read_only_then_dropped(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    assert externals.take(workspace, "externals") is True
    kept = tmp_path / "tenant" / ".ci-externals" / "runner-1"
    assert externals.location(workspace) == kept
    [taken] = kept.iterdir()  # one take, named for itself
    assert not (workspace / "externals").exists() and (taken / "node20" / "bin" / "node").read_text() == "#!node\n"
    assert externals.mount(workspace) == ResolvedMount(source=str(taken), target="/__e")
    externals.drop(workspace)
    assert not kept.exists()
    externals.drop(workspace)  # nothing to drop: nothing happens
    with pytest.raises(SandboxUnavailable, match="no runner externals"):
        externals.mount(workspace)


def test_a_later_job_replaces_what_an_earlier_one_left_under_another_name(tmp_path: Path) -> None:
    """Another source, so another profile hash and pool key: a sandbox pre-started with the earlier take's
    mount is never handed to a step of the later job."""
    workspace = _workspace(tmp_path)
    assert externals.take(workspace, "externals")
    first = externals.mount(workspace)
    (workspace / "externals" / "node24").mkdir(parents=True)  # the next job's copy
    assert externals.take(workspace, "externals")
    second = externals.mount(workspace)
    assert second.source != first.source and not os.path.exists(first.source)
    assert sorted(p.name for p in Path(second.source).iterdir()) == ["node24"]


def test_none_in_the_workspace_is_no_externals(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    assert externals.take(workspace, "missing") is False
    assert not externals.location(workspace).exists()


def test_a_link_instead_of_a_directory_is_refused_and_nothing_kept(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    os.symlink("/etc", workspace / "linked")
    with pytest.raises(CiUnsupported, match="not a directory"):
        externals.take(workspace, "linked")
    assert not os.path.lexists(externals.location(workspace))
    assert os.path.isdir("/etc")  # the link's target untouched


def test_a_file_with_another_hard_link_is_refused(tmp_path: Path) -> None:
    workspace = _workspace(tmp_path)
    os.link(workspace / "externals" / "node20" / "bin" / "node", workspace / "node-link")
    with pytest.raises(CiUnsupported, match="another hard link"):
        externals.take(workspace, "externals")
    assert not externals.location(workspace).exists()
    assert (workspace / "node-link").read_text() == "#!node\n"
