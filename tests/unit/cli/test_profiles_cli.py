"""sandboxctl profiles list|show|validate|schema, driven through argparse as the CLI runs it."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import profiles_cmd
from orchestrator.profiles import ProfileRegistry, ResolvedProfile, profile_json_schema_text
from orchestrator.profiles.paths import ENV_VAR
from tests.support.paths import ROOT


@pytest.fixture(autouse=True)
def _no_env_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="sandboxctl")
    sub = parser.add_subparsers(dest="command", required=True)
    profiles_cmd.register(sub)
    args = parser.parse_args(["profiles", *argv])
    code = args.handler(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_human(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "list")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "RUNTIME", "IMAGE", "MEMORY", "WALL", "DESCRIPTION"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert list(rows) == ["ci", "read-only", "untrusted", "workspace-write"]
    assert rows["untrusted"][1:5] == ["runsc", "sandbox-orchestrator/default:latest", "256MiB", "60s"]
    assert rows["ci"][3:5] == ["2GiB", "1800s"]
    assert rows["workspace-write"][3:5] == ["512MiB", "300s"]


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["ci", "read-only", "untrusted", "workspace-write"]
    assert rows[2] == {
        "name": "untrusted",
        "runtime": "runsc",
        "image": "sandbox-orchestrator/default:latest",
        "memory_bytes": 256 * 1024 * 1024,
        "wall_timeout_s": 60.0,
        "extends": "workspace-write",
        "description": ProfileRegistry([]).get("untrusted").description,
    }


def test_list_reports_a_broken_profile_and_still_lists_the_others(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken.yaml").write_text("description: b\nlimits:\n  memory: lots\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    code, out, err = run(capsys, "list")
    assert code == 2
    assert "workspace-write" in out and "broken" not in out
    assert err.startswith(f"sandboxctl: CONFIG.INVALID: {tmp_path / 'broken.yaml'}:3: limits.memory: ")


def test_list_with_a_builtin_overridden_lists_every_profile(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: `extends:` of its own name was a cycle, and every profile extending it failed with it."""
    (tmp_path / "workspace-write.yaml").write_text("extends: workspace-write\nlimits:\n  memory: 1g\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    code, out, err = run(capsys, "list")
    assert (code, err) == (0, "")
    rows = {line.split()[0]: line.split()[3] for line in out.splitlines()[1:]}
    assert rows == {"ci": "2GiB", "read-only": "1GiB", "untrusted": "256MiB", "workspace-write": "1GiB"}


def test_list_names_a_broken_file_once_with_what_waits_for_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "workspace-write.yaml"
    path.write_text("extends: workspace-write\nlimits:\n  memory: lots\n")
    (tmp_path / "ci.yml").write_text("extends: ci\n")
    (tmp_path / "mine.yaml").write_text("description: mine\nlimits: {memory: 1g}\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    code, out, err = run(capsys, "list")
    assert code == 2
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["mine"]
    assert err.splitlines() == [
        f"sandboxctl: CONFIG.INVALID: {tmp_path / 'ci.yml'}: not read: profiles are NAME.yaml files: rename it to"
        " ci.yaml",
        f"sandboxctl: CONFIG.INVALID: {path}:3: limits.memory: Value error, must be a number of bytes or a size"
        " such as '64m', '1g' or '512KiB' (k, m, g, t: powers of 1024)",
        f"sandboxctl: CONFIG.INVALID: {path}: not listed until this file is fixed: ci, read-only, untrusted,"
        f" workspace-write (check it with: sandboxctl profiles validate {path})",
    ]
    code, out, json_err = run(capsys, "list", "--json")  # stdout: the good ones, as an array still
    assert (code, json_err) == (2, err)
    assert [r["name"] for r in json.loads(out)] == ["mine"]


def test_a_profile_over_a_broken_file_is_refused_not_half_applied(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review H1: untrusted sets its own memory, so the broken override's cpus and nofile reached it unchecked."""
    path = tmp_path / "workspace-write.yaml"
    path.write_text("extends: workspace-write\nlimits: {memory: lots, cpus: 4, nofile: 65536}\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    problem = (
        f"sandboxctl: CONFIG.INVALID: {path}:2: limits.memory: Value error, must be a number of bytes or a size"
        " such as '64m', '1g' or '512KiB' (k, m, g, t: powers of 1024)\n"
    )
    assert run(capsys, "show", "untrusted", "--resolved") == (2, "", problem)
    code, out, err = run(capsys, "list")
    assert (code, out.splitlines()[1:]) == (2, [])
    assert err == problem + (
        f"sandboxctl: CONFIG.INVALID: {path}: not listed until this file is fixed: ci, read-only, untrusted,"
        f" workspace-write (check it with: sandboxctl profiles validate {path})\n"
    )


def test_list_names_the_users_file_for_a_cycle_through_a_builtin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review M2: the listing said the built-in ci.yaml must be fixed for a cycle the user's file made."""
    path = tmp_path / "workspace-write.yaml"
    path.write_text("extends: ci\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    code, out, err = run(capsys, "list")
    assert (code, out.splitlines()[1:]) == (2, [])
    assert err.splitlines() == [
        f"sandboxctl: CONFIG.INVALID: {path}:1: extends: cycle: workspace-write -> ci -> workspace-write; {CYCLE_FIX}",
        f"sandboxctl: CONFIG.INVALID: {path}: not listed until this file is fixed: ci, read-only, untrusted,"
        f" workspace-write (check it with: sandboxctl profiles validate {path})",
    ]


def test_show_file_form_as_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    code, out, _ = run(capsys, "show", "read-only")
    assert code == 0
    assert out.startswith("# profile read-only (from ")
    assert "extends workspace-write" in out.splitlines()[0]
    data = yaml.safe_load(out)
    assert data == ProfileRegistry([]).get("read-only").model_dump(mode="json")
    assert data["workspace"]["mode"] == "ro"


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "ci", "--json")
    assert code == 0 and json.loads(out)["limits"]["pids"] == 512


def test_show_resolved_never_dumps_the_seccomp_json(capsys: pytest.CaptureFixture[str]) -> None:
    import yaml

    resolved = ProfileRegistry([]).resolve("untrusted")
    code, out, _ = run(capsys, "show", "untrusted", "--resolved")
    assert code == 0
    assert "SCMP_ACT" not in out and "defaultAction" not in out
    data = yaml.safe_load(out)
    assert next(iter(data)) == "profile_hash"
    assert data["profile_hash"] == resolved.profile_hash
    assert data["seccomp_sha256"] == resolved.seccomp_sha256
    assert data["memory_bytes"] == 256 * 1024 * 1024 and data["runtime"] == "runsc"


def test_show_resolved_json_is_complete(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "show", "workspace-write", "--resolved", "--json")
    assert code == 0
    assert ResolvedProfile.model_validate(json.loads(out)) == ProfileRegistry([]).resolve("workspace-write")


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_show_resolved_with_config_is_what_a_run_under_it_gets(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from orchestrator.domain.requests import parse_request
    from orchestrator.pipeline.factory import build_orchestrator

    config = _config(tmp_path, "caps:\n  max_memory: 256m\n  max_wall_timeout_s: 60\n  max_pids: 200\n")
    code, out, err = run(capsys, "show", "ci", "--resolved", "--config", config, "--json")
    assert (code, err) == (0, "")
    shown = ResolvedProfile.model_validate(json.loads(out))
    assert (shown.memory_bytes, shown.wall_timeout_s, shown.pids_limit) == (256 * 1024 * 1024, 60.0, 200)
    # the authorizer of an orchestrator built from that config resolves a run's profile the same way
    profiles = build_orchestrator(Path(config), profiles=ProfileRegistry()).authorizer.profiles
    assert profiles is not None
    request = parse_request({"tool": "shell", "command": ["true"], "profile": "ci"})
    assert profiles.resolve(request, session=False) == shown
    code, out, _ = run(capsys, "show", "ci", "--resolved", "--config", config)
    assert code == 0 and out.startswith(f"# resolved profile ci (from {ROOT / 'profiles' / 'ci.yaml'}; the caps of")


@pytest.mark.parametrize(
    ("argv", "config", "expected"),
    [
        (
            ["ci", "--config"],
            "caps: {max_memory: 1g}\n",
            "INPUT.INVALID: --config: its caps narrow the resolved profile: add --resolved",
        ),
        (
            ["untrusted", "--resolved", "--config"],
            "caps: {allowed_runtimes: [runc]}\n",
            "CONFIG.INVALID: runtime:"
            " profile 'untrusted' needs runtime 'runsc', which the policy caps do not allow (allowed_runtimes: runc)",
        ),
        (
            ["ci", "--resolved", "--config"],
            "caps:\n  max_memory: lots\n",
            "CONFIG.INVALID: {config}:2: caps.max_memory: ",
        ),
    ],
    ids=["without-resolved", "caps-forbid-the-runtime", "invalid-config"],
)
def test_show_with_config_refusals(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], config: str, expected: str
) -> None:
    path = _config(tmp_path, config)
    code, out, err = run(capsys, "show", *argv, path)
    assert (code, out) == (2, "")
    assert err.startswith("sandboxctl: " + expected.format(config=path)), err
    code, out, _ = run(capsys, "show", *argv, path, "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == expected.split(":")[0]


def test_show_resolved_with_a_missing_config(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "show", "ci", "--resolved", "--config", str(tmp_path / "absent.yaml"))
    assert code == 2 and err == f"sandboxctl: CONFIG.INVALID: {tmp_path / 'absent.yaml'}: file not found\n"


def test_show_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "show", "nope")
    assert code == 2 and out == ""
    assert err == (
        "sandboxctl: PROFILE.NOT_FOUND: unknown profile 'nope' (known: ci, read-only, untrusted, workspace-write)\n"
    )
    code, out, err = run(capsys, "show", "nope", "--json")
    assert code == 2 and json.loads(out)["error"]["code"] == "PROFILE.NOT_FOUND"


def test_validate_ok(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text("description: team\nextends: ci\nlimits:\n  memory: 4g\n")
    code, out, err = run(capsys, "validate", str(path))
    expected = ProfileRegistry([tmp_path]).resolve("team").profile_hash
    assert (code, out, err) == (0, f"ok: team (profile_hash {expected})\n", "")
    code, out, _ = run(capsys, "validate", str(path), "--json")
    assert json.loads(out) == {"ok": True, "name": "team", "profile_hash": expected, "file": str(path)}


def test_validate_a_builtin(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "validate", str(ROOT / "profiles" / "untrusted.yaml"))
    assert (
        code == 0 and out == f"ok: untrusted (profile_hash {ProfileRegistry([]).resolve('untrusted').profile_hash})\n"
    )


CYCLE_FIX = (
    "break it: extend a profile that does not lead back here (a file extends its own name only to build on the "
    "definition it overrides, lower on the search path)"
)


def test_validate_resolves_as_runs_do_when_the_files_directory_is_on_the_search_path(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review M1: validate appended the file's directory again (here the built-in one, after the user's), so it
    won over later directories and `ok: ci` was said of a profile every run refuses (a cycle)."""
    override = tmp_path / "workspace-write.yaml"
    override.write_text("extends: ci\n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    code, out, err = run(capsys, "validate", str(ROOT / "profiles" / "ci.yaml"))
    assert (code, out) == (2, "")
    cycle = "cycle: ci -> workspace-write -> ci"
    assert err == f"sandboxctl: CONFIG.INVALID: {override}:1: extends: {cycle}; {CYCLE_FIX}\n"


def test_validate_errors_name_file_line_and_field_one_per_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "tuned.yaml"
    path.write_text(
        "description: tuned\nextends: workspace-write\nlimits:\n  memory: 2gb!\n  pids: -1\ncapabilities: [NET_RAW]\n"
    )
    code, out, err = run(capsys, "validate", str(path))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"sandboxctl: CONFIG.INVALID: {path}:") for line in lines)
    assert any(f"{path}:4: limits.memory: " in line for line in lines)
    assert any(f"{path}:5: limits.pids: " in line for line in lines)
    assert any(f"{path}:6: capabilities: " in line and "NET_RAW" in line for line in lines)


def test_validate_single_file_errors_are_split_too(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text("description: p\nuser: '0:0'\nnetwork: host\n")
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2
    assert err.splitlines() == [
        f"sandboxctl: CONFIG.INVALID: {path}:2: user: Value error, must not be root: uid 0 and gid 0 are not allowed",
        f"sandboxctl: CONFIG.INVALID: {path}:3: network: Value error, 'host' is not a network setting: 'none', or "
        "{mode: allowlist, allow: [host:port, ...]} (a sandbox never gets an open network; more hosts are asked "
        "per request: sandbox_permissions.network)",
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("description: x\nextends: nobody\n", ":2: extends: unknown profile 'nobody'"),
        ("description: x\nseccomp: missing\n", "seccomp: no seccomp profile 'missing' (known: default)"),
        ("description: x\nextends: x\n", ":2: extends: 'x' is its own name: that means the x.yaml"),
    ],
)
def test_validate_refusals(capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    code, _, err = run(capsys, "validate", str(path))
    assert code == 2 and err.startswith("sandboxctl: CONFIG.INVALID: ") and needle in err


def test_validate_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(capsys, "validate", str(tmp_path / "nope" / "absent.yaml"))
    assert code == 2 and "file not found" in err


def test_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schema")
    assert code == 0 and out == profile_json_schema_text()
    assert out == (ROOT / "profiles" / "schema.json").read_text(encoding="utf-8")


def test_the_cli_module_imports_nothing_heavy() -> None:
    code = (
        "import sys; import orchestrator.cli.profiles_cmd; "
        "heavy = [m for m in ('pydantic', 'yaml', 'orchestrator.profiles') if m in sys.modules]; print(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.strip() == "[]"


def test_sandboxctl_profiles_list_end_to_end() -> None:
    from orchestrator.cli.main import build_parser

    try:
        build_parser().parse_args(["profiles", "list"])
    except SystemExit:
        pytest.skip("`profiles` is not wired into orchestrator.cli.main yet")
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "profiles", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != ENV_VAR},
    )
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == ["ci", "read-only", "untrusted", "workspace-write"]
