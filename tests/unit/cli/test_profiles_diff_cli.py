"""sandboxctl profiles diff: the profiles in force against a proposal (a directory or one file), resolved as runs get
them — the exact fields changed, profiles added and removed, a set a running service would refuse — in text and in
JSON (domain.profile_diff.ProfilesDiff), with diff(1)'s exit codes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from orchestrator.cli import profiles_cmd
from orchestrator.domain.profile_diff import FieldChange, ProfileDifference, ProfilesDiff
from orchestrator.profiles import ProfileCaps, ProfileRegistry
from orchestrator.profiles.paths import ENV_VAR, builtin_dir

MIB = 1024 * 1024


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="sandboxctl")
    sub = parser.add_subparsers(dest="command", required=True)
    profiles_cmd.register(sub)
    args = parser.parse_args(["profiles", "diff", *argv])
    code = args.handler(args)
    out, err = capsys.readouterr()
    return code, out, err


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def in_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """$SANDBOX_PROFILES_PATH: small (256m) and gone."""
    directory = tmp_path / "in-force"
    write(directory / "small.yaml", "description: small\nextends: workspace-write\nlimits: {memory: 256m}\n")
    write(directory / "gone.yaml", "description: gone\nextends: read-only\n")
    monkeypatch.setenv(ENV_VAR, str(directory))
    return directory


@pytest.fixture
def proposal(tmp_path: Path) -> Path:
    """small with 1g, 64 processes and one more variable; gone removed; tiny added."""
    directory = tmp_path / "proposed"
    write(
        directory / "small.yaml",
        "description: small, bigger\nextends: workspace-write\nlimits: {memory: 1g, pids: 64}\nenv: {EXTRA: '1'}\n",
    )
    write(directory / "tiny.yaml", "description: tiny\nextends: read-only\n")
    return directory


def hashes(directory: Path, name: str) -> str:
    return ProfileRegistry([directory]).resolve(name).profile_hash


def test_a_proposed_directory_against_the_set_in_force(
    capsys: pytest.CaptureFixture[str], in_force: Path, proposal: Path
) -> None:
    code, out, err = run(capsys, "--against", str(proposal))
    assert (code, err) == (1, "")
    old, new = hashes(in_force, "small"), hashes(proposal, "small")
    assert out.splitlines() == [
        f"in force: {builtin_dir()}:{in_force}",
        f"proposed: {builtin_dir()}:{proposal}",
        f"removed  gone   (profile_hash {hashes(in_force, 'gone')[:12]})",
        f"changed  small  (profile_hash {old[:12]} -> {new[:12]})",
        '  env.EXTRA: null -> "1"',
        "  memory_bytes: 268435456 (256MiB) -> 1073741824 (1GiB)",
        "  memory_swap_bytes: 268435456 (256MiB) -> 1073741824 (1GiB)",
        "  pids_limit: 128 -> 64",
        f"added    tiny   (profile_hash {hashes(proposal, 'tiny')[:12]})",
        "unchanged: ci, read-only, untrusted, workspace-write",
    ]


def test_json_is_the_model_an_api_would_answer(
    capsys: pytest.CaptureFixture[str], in_force: Path, proposal: Path
) -> None:
    code, out, _ = run(capsys, "small", "--against", str(proposal), "--json")
    assert code == 1
    assert ProfilesDiff.model_validate(json.loads(out)) == ProfilesDiff(
        old_search_path=(str(builtin_dir()), str(in_force)),
        new_search_path=(str(builtin_dir()), str(proposal)),
        differences=(
            ProfileDifference(
                name="small",
                change="changed",
                old_profile_hash=hashes(in_force, "small"),
                new_profile_hash=hashes(proposal, "small"),
                fields=(
                    FieldChange(field="env.EXTRA", old=None, new="1"),
                    FieldChange(field="memory_bytes", old=256 * MIB, new=1024 * MIB),
                    FieldChange(field="memory_swap_bytes", old=256 * MIB, new=1024 * MIB),
                    FieldChange(field="pids_limit", old=128, new=64),
                ),
            ),
        ),
        unchanged=(),
    )


def test_one_proposed_file_in_place_of_its_name_and_under_a_configs_caps(
    capsys: pytest.CaptureFixture[str], in_force: Path, tmp_path: Path
) -> None:
    # workspace-write changed in one file: the profiles extending it change with it
    edited = write(
        tmp_path / "edit" / "workspace-write.yaml", "extends: workspace-write\nlimits: {wall_timeout_s: 60}\n"
    )
    config = write(tmp_path / "config.yaml", "caps:\n  max_memory: 512m\n")
    code, out, _ = run(capsys, "--against", str(edited), "--config", str(config), "--json")
    assert code == 1
    result = ProfilesDiff.model_validate(json.loads(out))
    assert result.new_search_path == (str(builtin_dir()), str(in_force), str(edited))
    changed = {d.name: d for d in result.differences}
    assert sorted(changed) == ["gone", "read-only", "small", "workspace-write"]
    assert changed["small"].fields == (
        FieldChange(field="session_lifetime_s", old=300.0, new=60.0),
        FieldChange(field="wall_timeout_s", old=300.0, new=60.0),
    )
    caps = ProfileCaps(max_memory=512 * MIB)
    assert (
        changed["small"].new_profile_hash
        == ProfileRegistry([in_force, edited.parent]).resolve("small", caps=caps).profile_hash
    )
    assert result.unchanged == ("ci", "untrusted")  # each sets its own wall timeout


def test_a_set_a_service_would_refuse_exits_2_with_each_problem(
    capsys: pytest.CaptureFixture[str], in_force: Path, proposal: Path
) -> None:
    broken = write(proposal / "tiny.yaml", "description: tiny\nextends: nowhere\n")
    code, out, err = run(capsys, "--against", str(proposal))
    assert code == 2
    assert "added    tiny   (profile_hash -)" in out.splitlines()
    problem = f"{broken}:2: extends: unknown profile 'nowhere'"
    assert err.startswith(
        "sandboxctl: CONFIG.INVALID: a running service would refuse the proposed set and keep the one in force: "
        f"tiny: {problem}"
    )


def test_the_same_set_exits_0(capsys: pytest.CaptureFixture[str], in_force: Path) -> None:
    code, out, _ = run(capsys, "--against", str(in_force))
    assert code == 0
    assert out.splitlines()[-1] == "unchanged: ci, gone, read-only, small, untrusted, workspace-write"


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["nothing-here", "--against", "{in_force}"], "PROFILE.NOT_FOUND: unknown profile 'nothing-here'"),
        (["--against", "{in_force}/missing"], "CONFIG.INVALID: --against: {in_force}/missing: not a directory"),
        (["--against", "{in_force}/notes.txt"], "CONFIG.INVALID: --against: {in_force}/notes.txt: a proposed profile"),
    ],
)
def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str], in_force: Path, argv: list[str], said: str) -> None:
    write(in_force / "notes.txt", "not a profile")
    code, out, err = run(capsys, *(a.format(in_force=in_force) for a in argv))
    assert (code, out) == (2, "")
    assert err.startswith(f"sandboxctl: {said.format(in_force=in_force)}")
