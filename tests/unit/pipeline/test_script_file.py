"""A step's script placed in its workspace before the run (pipeline/script_file.py): exactly the bytes the gate
decided on, where the argv names it, never following a link and never writing through an existing file."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from orchestrator.domain.ci import CiContext
from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.requests import ScriptFile, parse_request
from orchestrator.gate.sanitize import sanitize
from orchestrator.pipeline.runner import step_fields
from orchestrator.pipeline.script_file import SCRIPT_MODE, place_script

ROOT = "/__w"
CONTENT = b"set -e\nmake test\n"


def place(workspace: Path, path: str, *, workdir: str = "/__w/repo/repo", writable: bool = True) -> str:
    return place_script(workspace, ScriptFile.of(path, CONTENT), root=ROOT, workdir=workdir, writable=writable)


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".sandbox-script-"))


def test_the_content_goes_where_the_argv_names_it(tmp_path: Path) -> None:
    (tmp_path / "_temp").mkdir()
    assert place(tmp_path, "/__w/_temp/0b5e.sh") == "/__w/_temp/0b5e.sh"
    written = tmp_path / "_temp" / "0b5e.sh"
    assert written.read_bytes() == CONTENT
    assert stat.S_IMODE(written.stat().st_mode) == SCRIPT_MODE
    assert place(tmp_path, "steps/build.sh") == "/__w/repo/repo/steps/build.sh"  # relative: to the workdir
    assert (tmp_path / "repo" / "repo" / "steps" / "build.sh").read_bytes() == CONTENT
    assert leftovers(tmp_path / "_temp") == []


def test_what_was_there_is_replaced_never_written_through(tmp_path: Path) -> None:
    (tmp_path / "_temp").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_bytes(b"keep me\n")
    (tmp_path / "_temp" / "link.sh").symlink_to(outside)
    os.link(outside, tmp_path / "_temp" / "hard.sh")
    (tmp_path / "_temp" / "old.sh").write_bytes(b"echo something else\n")
    for name in ("link.sh", "hard.sh", "old.sh"):
        place(tmp_path, f"/__w/_temp/{name}")
        target = tmp_path / "_temp" / name
        assert not target.is_symlink() and target.read_bytes() == CONTENT, name
    assert outside.read_bytes() == b"keep me\n"
    assert outside.stat().st_nlink == 1


@pytest.mark.parametrize("path", ["/etc/profile.d/x.sh", "/__w", "/__w/../etc/x.sh", "../../../x.sh", "/__wx/a.sh"])
def test_a_path_outside_the_workspace_is_refused(tmp_path: Path, path: str) -> None:
    with pytest.raises(InputInvalid) as err:
        place(tmp_path, path)
    assert err.value.details == {"fields": ["script.path"]}
    assert err.value.message == (
        f"script.path: {path!r} is not a file inside the workspace ({ROOT}): the script is written there"
    )


def test_a_link_or_a_file_on_the_way_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    elsewhere.mkdir()
    (tmp_path / "_temp").symlink_to(elsewhere)
    (tmp_path / "file").write_text("x")
    for path, shown in (("/__w/_temp/x.sh", "_temp"), ("/__w/file/x.sh", "file")):
        with pytest.raises(InputInvalid) as err:
            place(tmp_path, path)
        assert err.value.message == (
            f"script.path: {shown!r} is not a directory of the workspace (a file or a symbolic link)"
        )
    assert list(elsewhere.iterdir()) == []


def test_a_directory_at_the_path_is_refused_and_no_temporary_file_stays(tmp_path: Path) -> None:
    (tmp_path / "_temp" / "x.sh").mkdir(parents=True)
    with pytest.raises(InputInvalid) as err:
        place(tmp_path, "/__w/_temp/x.sh")
    assert err.value.message == "script.path: '_temp/x.sh' is a directory of the workspace"
    assert leftovers(tmp_path / "_temp") == []


def test_a_read_only_workspace_takes_no_script(tmp_path: Path) -> None:
    with pytest.raises(InputInvalid) as err:
        place(tmp_path, "/__w/_temp/x.sh", writable=False)
    assert err.value.message == (
        "script.path: the profile mounts the workspace read-only: a script file cannot be placed in it"
    )
    assert list(tmp_path.iterdir()) == []


def test_the_begin_record_links_the_step_to_its_job_and_names_its_script() -> None:
    ci = {"provider": "github", "repository": "org/app", "job": "build", "run_id": "5", "step": "__run"}
    raw = {"tool": "shell_exec", "argv": ["bash", "-e", "/__w/_temp/x.sh"], "ci": ci}
    sanitized, _ = sanitize(parse_request({**raw, "script": ScriptFile.of("/__w/_temp/x.sh", CONTENT).model_dump()}))
    key = CiContext.model_validate(ci).recorded().job_key
    assert step_fields(sanitized) == {
        "ci": {**ci, "job_key": key},
        "script": {"path": "/__w/_temp/x.sh", "bytes": len(CONTENT), "sha256": hashlib.sha256(CONTENT).hexdigest()},
    }
    assert step_fields(sanitize(parse_request({"tool": "shell_exec", "argv": ["true"]}))[0]) == {}
