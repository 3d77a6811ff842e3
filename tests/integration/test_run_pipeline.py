"""The whole pipeline on the real engine: gate → sandbox → evidence, through the library and the CLI."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.backends.docker import DockerBackend
from orchestrator.domain.errors import InputInvalid, ProfileNotFound, SandboxUnavailable
from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles import ProfileRegistry
from tests.support.evidence import records
from tests.support.orchestrators import docker_orchestrator

pytestmark = pytest.mark.integration
SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]
# mode allow lets through what the gate fully sees; what it cannot (python3 -c) is asked: a rule approves
ALLOW_ALL = (
    "safety:\n  mode: allow\n  denylist: [sudo]\n  rules: []\napprovals:\n  provider: rules\n  default: approved\n"
)


def workspace_dir(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    return ws


@pytest.fixture
async def orch(tmp_path: Path) -> AsyncIterator[Orchestrator]:
    config = tmp_path / "config.yaml"
    config.write_text(ALLOW_ALL)
    o = await docker_orchestrator(tmp_path, config)
    yield o
    await o.aclose()
    report = verify(tmp_path / "evidence.jsonl")
    assert report.ok, report


async def test_evidence_follows_the_lifecycle_as_the_engine_reported_it(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    result = await orch.execute(
        {"tool": "shell_exec", "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]}, workspace=ws
    )
    assert (result.outcome.exit_code, result.outcome.stdout, result.outcome.stderr) == (3, b"out\n", b"err\n")
    assert not result.ok and result.error is None
    await orch.evidence.flush()
    recs = records(tmp_path / "evidence.jsonl", result.authorization.execution_id)
    kinds = [r.event for r in recs]
    assert kinds == [
        "request_received",
        "decision_made",
        "execution_started",
        "container_created",
        "container_started",
        "container_died",
        "container_destroyed",
        "execution_finished",
    ]
    engine_ts = [r.engine_ts for r in recs if r.event.startswith("container_")]
    assert all(engine_ts) and engine_ts == sorted(engine_ts)  # type: ignore[type-var]
    died = next(r for r in recs if r.event == "container_died")
    assert died.data is not None and died.data["exit_code"] == 3
    started, finished = recs[2], recs[-1]
    assert started.profile_hash == finished.profile_hash and started.profile_hash is not None
    assert finished.status == "failed" and finished.data is not None
    assert finished.data["stdout"] == {
        "bytes": 4,
        "kept_bytes": 4,
        "sha256": hashlib.sha256(b"out\n").hexdigest(),
        "truncated": False,
    }
    assert finished.data["runtime"] == "runc" and finished.data["image"].startswith("sandbox-orchestrator/")
    assert finished.data["image_id"].startswith("sha256:")  # the image the engine really ran
    assert finished.data["lifecycle_stream"] == "complete"
    usage = finished.data["usage"]
    assert usage is not None and set(usage) == {
        "memory_peak_bytes",
        "cpu_total_ns",
        "pids_peak",
        "pids_limit_hits",
        "source",
    }
    # (a command this quick may be gone before its cgroup is first read: then the counters are unknown)
    assert usage["pids_limit_hits"] in (0, None) and finished.data["pids_limit_killed"] is False
    assert finished.outputs_digest is not None


async def test_side_effects_are_recorded_as_sizes_hashes_and_links(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    (ws / "old.txt").write_text("old")
    (ws / "gone.txt").write_text("bye")
    for p in ws.iterdir():
        os.chown(p, 1000, 1000)
    script = "printf new > new.txt; printf changed > old.txt; rm gone.txt; ln -s /etc/shadow link"
    result = await orch.execute({"tool": "shell_command", "command": script}, workspace=ws)
    assert result.ok
    await orch.evidence.flush()
    finished = records(tmp_path / "evidence.jsonl", result.authorization.execution_id)[-1]
    effects = finished.data["side_effects"]  # type: ignore[index]
    created = {c["path"]: c for c in effects["created"]}
    assert created["new.txt"]["sha256"] == hashlib.sha256(b"new").hexdigest() and created["new.txt"]["size"] == 3
    assert created["link"]["kind"] == "symlink" and created["link"]["link_target"] == "/etc/shadow"
    assert "sha256" not in created["link"]  # a link is recorded, never followed
    assert [m["path"] for m in effects["modified"]] == ["old.txt"]
    assert [d["path"] for d in effects["deleted"]] == ["gone.txt"]


async def test_secrets_are_redacted_and_never_recorded(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    secret = "s3cr3t-token-value-1234"
    orch_profiles = orch.profiles
    assert orch_profiles is not None
    allowed = orch_profiles.resolve("workspace-write").env_allowlist
    name = next(n for n in allowed if n not in ("PATH", "HOME"))
    result = await orch.execute(
        {
            "tool": "shell_command",
            "command": f'echo "value=${name}"; printf "AKIAIOSFODNN7EXAMPLE\\n"',
            "env": {name: secret},
        },
        workspace=ws,
    )
    assert secret.encode() not in result.outcome.stdout
    assert b"[REDACTED:" in result.outcome.stdout
    await orch.aclose()
    assert secret not in (tmp_path / "evidence.jsonl").read_text()


async def test_live_output_arrives_while_running_redacted_as_the_result(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    secret = "s3cr3t-live-VALUE-98765"
    assert orch.profiles is not None
    name = next(n for n in orch.profiles.resolve("workspace-write").env_allowlist if n not in ("PATH", "HOME"))
    # the secret written in two halves, a pause between them
    script = f'echo start; sleep 1; printf "%s" "${{{name}:0:9}}"; sleep 0.5; printf "%s\\n" "${{{name}:9}}"; echo end'
    got: list[tuple[str, bytes, float]] = []
    result = await orch.execute(
        {"tool": "shell_command", "command": script, "env": {name: secret}},
        workspace=ws,
        on_output=lambda stream, data: got.append((stream, data, time.monotonic())),
    )
    ended = time.monotonic()
    assert result.ok, result.error
    assert got[0][1] == b"start\n"
    assert ended - got[0][2] > 1.2, "the first chunk came only at the end"
    for _, chunk, _ in got:
        assert secret[:9].encode() not in chunk and secret[9:].encode() not in chunk
    stdout = b"".join(data for stream, data, _ in got if stream == "stdout")
    assert stdout == result.outcome.stdout == b"start\n[REDACTED:literal]\nend\n"


async def test_a_failing_output_callback_never_breaks_the_run(
    orch: Orchestrator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ws = workspace_dir(tmp_path)
    calls: list[bytes] = []

    def on_output(stream: str, data: bytes) -> None:
        calls.append(data)
        raise ConnectionResetError(f"client gone, dropping {data!r}")

    with caplog.at_level(logging.WARNING):
        result = await orch.execute(
            {"tool": "shell_command", "command": "echo one; sleep 0.3; echo two"}, workspace=ws, on_output=on_output
        )
    assert result.ok and result.outcome.stdout == b"one\ntwo\n"
    assert calls == [b"one\n"]
    assert "ConnectionResetError" in caplog.text and "dropping" not in caplog.text


async def test_refusals_never_downgrade(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    with pytest.raises(ProfileNotFound):
        await orch.execute({"tool": "shell_exec", "argv": ["true"], "profile": "nope"}, workspace=ws)
    # an approved network escalation cannot be given: refused, never run without it
    orch.approvals = RuleApprover(RuleApprovalsConfig(default="approved"))
    with pytest.raises(SandboxUnavailable):
        await orch.execute(
            {"tool": "shell_exec", "argv": ["true"], "sandbox_permissions": {"network": True}}, workspace=ws
        )
    with pytest.raises(InputInvalid):
        await orch.execute({"tool": "shell_exec", "argv": ["true"], "env": {"NOT_ALLOWED_X": "1"}}, workspace=ws)
    with pytest.raises(InputInvalid):
        await orch.execute({"tool": "shell_exec", "argv": ["true"], "cwd": "../.."}, workspace=ws)
    await orch.evidence.flush()
    codes = [r.error_code for r in iter_records(tmp_path / "evidence.jsonl") if r.event == "run_failed"]
    assert codes == ["PROFILE.NOT_FOUND", "SANDBOX.UNAVAILABLE", "INPUT.INVALID", "INPUT.INVALID"]


async def test_cwd_and_read_only_profile(orch: Orchestrator, tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    (ws / "sub").mkdir()
    os.chown(ws / "sub", 1000, 1000)
    result = await orch.execute({"tool": "shell_exec", "argv": ["pwd"], "cwd": "sub"}, workspace=ws)
    assert result.outcome.stdout == b"/workspace/sub\n"
    ro = await orch.execute(
        {"tool": "shell_command", "command": "touch x 2>&1; echo rc=$?", "profile": "read-only"}, workspace=ws
    )
    assert b"Read-only file system" in ro.outcome.stdout and b"rc=1" in ro.outcome.stdout
    assert not (ws / "x").exists()


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SANDBOXCTL, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_cli_run_exit_status_json_and_refusals(tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("safety:\n  allowlist: [ls, 'true', 'false', echo]\napprovals:\n  provider: none\n")
    evidence = str(tmp_path / "e.jsonl")
    base = ["run", "--config", str(config), "--evidence", evidence]
    ok = cli(*base, "--json", "--", "echo", "hello", cwd=ws)
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert set(out) == {
        "ok",
        "execution_id",
        "decision",
        "exit_code",
        "stdout",
        "stderr",
        "truncated",
        "timed_out",
        "oom_killed",
        "duration_ms",
        "side_effects",
        "error",
    }
    assert (out["ok"], out["decision"], out["exit_code"], out["stdout"], out["error"]) == (
        True,
        "allow",
        0,
        "hello\n",
        None,
    )
    assert out["side_effects"] == {
        "complete": True,
        "created": 0,
        "modified": 0,
        "deleted": 0,
        "bytes_written": 0,
        "setid_removed": 0,
    }
    assert cli(*base, "--", "false", cwd=ws).returncode == 1  # the command's own status
    denied = cli(*base, "--json", "--", "sudo", "id", cwd=ws)
    assert denied.returncode == 125 and "POLICY.DENIED" in denied.stderr
    assert json.loads(denied.stdout)["error"]["code"] == "POLICY.DENIED"
    asked = cli(*base, "--", "make", cwd=ws)
    assert asked.returncode == 125 and "CONFIG.NO_APPROVAL_PROVIDER" in asked.stderr
    bad = cli(*base, "--timeout", "-1", "--", "true", cwd=ws)
    assert bad.returncode == 2 and "INPUT.INVALID" in bad.stderr
    assert "Traceback" not in ok.stderr + denied.stderr + asked.stderr + bad.stderr
    assert cli("evidence", "verify", "--path", evidence, cwd=ws).returncode == 0


def test_doctor_checks_everything_and_names_fixes(tmp_path: Path) -> None:
    proc = cli("doctor", "--json", "--evidence", str(tmp_path / "e.jsonl"), cwd=tmp_path)
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and report["ok"], report
    names = [c["name"] for c in report["checks"]]
    assert "engine" in names and "seccomp support" in names
    assert {"limits in force (workspace-write, runc)", "limits in force (untrusted, runsc)"} <= set(names)
    assert any(n.startswith("image sandbox-orchestrator/") for n in names)
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"}
    down = subprocess.run([*SANDBOXCTL, "doctor", "--no-probe"], capture_output=True, text=True, env=env, timeout=60)
    assert down.returncode == 1
    assert "FAIL engine: SANDBOX.UNAVAILABLE" in down.stdout and "fix: run `make setup`" in down.stdout
    assert "Traceback" not in down.stdout + down.stderr


async def test_a_cancelled_run_records_what_it_changed_and_leaves_nothing(orch: Orchestrator, tmp_path: Path) -> None:
    import asyncio

    ws = workspace_dir(tmp_path)
    task = asyncio.create_task(
        orch.execute({"tool": "shell_command", "command": "touch made-before-cancel; sleep 30"}, workspace=ws)
    )
    for _ in range(200):
        if (ws / "made-before-cancel").exists():
            break
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await orch.evidence.flush()
    (failed,) = [r for r in iter_records(tmp_path / "evidence.jsonl") if r.event == "run_failed"]
    assert (failed.status, failed.error_code) == ("cancelled", "EXECUTION.CANCELLED")
    assert failed.profile_hash is not None
    created = [c["path"] for c in failed.data["side_effects"]["created"]]  # type: ignore[index]
    assert created == ["made-before-cancel"]
    assert orch.backend is not None
    left = [s for s in await orch.backend.list_managed() if s.execution_id == failed.execution_id]
    assert left == []


def test_policy_caps_narrow_the_profile(tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(ALLOW_ALL + "caps:\n  max_memory: 128m\n  max_pids: 64\n")
    evidence = str(tmp_path / "e.jsonl")
    probe = "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max"
    out = cli("run", "--config", str(config), "--evidence", evidence, "--json", "--shell", probe, cwd=ws)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["stdout"].split() == [str(128 * 1024 * 1024), "64"]
    denied = tmp_path / "d.yaml"
    denied.write_text(ALLOW_ALL + "caps:\n  allowed_runtimes: [runc]\n")
    refused = cli(
        "run", "--config", str(denied), "--evidence", evidence, "--profile", "untrusted", "--", "true", cwd=ws
    )
    # the caps and the profile disagree: a config error, refused — never silently run on runc instead
    assert refused.returncode == 2 and "CONFIG.INVALID" in refused.stderr and "runsc" in refused.stderr


def test_run_json_is_one_full_object_even_for_early_refusals(tmp_path: Path) -> None:
    ws = workspace_dir(tmp_path)
    out = cli("run", "--json", "--timeout", "-3", "--", "true", cwd=ws)
    assert out.returncode == 2
    body = json.loads(out.stdout)
    assert body["ok"] is False and body["error"]["code"] == "INPUT.INVALID" and "exit_code" in body
    root = cli("run", "--json", "--workspace", "/", "--", "true", cwd=ws)
    assert root.returncode in (2, 125) and "INPUT.INVALID" in root.stderr
    assert json.loads(root.stdout)["error"]["code"] == "INPUT.INVALID"


def test_run_json_escapes_what_the_command_printed_and_plain_run_passes_it_through(tmp_path: Path) -> None:
    """The command's output is hostile: with --json it is data (controls and bidi as \\uXXXX, the same
    text once parsed); without --json it is what the user asked to see, byte for byte."""
    ws = workspace_dir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text("safety:\n  allowlist: [printf]\napprovals:\n  provider: none\n")
    hostile = "\x1b]0;pwned\x07\x1b[2K\r\u202egnp.exe\u2067x\u2069\u2028\U000e0041"
    hostile_bytes = hostile.encode()
    argv = [*SANDBOXCTL, "run", "--config", str(config), "--evidence", str(tmp_path / "e.jsonl")]
    # spelled in octal: the request itself stays plain ASCII (a control character in it would be asked)
    printf = ["--", "printf", "".join(chr(b) if 0x20 < b < 0x7F and b != 0x5C else f"\\{b:03o}" for b in hostile_bytes)]
    as_json = subprocess.run([*argv, "--json", *printf], capture_output=True, cwd=ws, timeout=120)
    assert as_json.returncode == 0, as_json.stderr
    text = as_json.stdout.decode("utf-8")
    assert not any(ch in text for ch in "\x1b\x07\r\u202e\u2067\u2069\u2028\U000e0041")
    assert json.loads(text)["stdout"] == hostile
    plain = subprocess.run([*argv, *printf], capture_output=True, cwd=ws, timeout=120)
    assert plain.returncode == 0 and plain.stdout == hostile_bytes
    undecodable = subprocess.run([*argv, "--json", "--", "printf", "\\377"], capture_output=True, cwd=ws, timeout=120)
    assert undecodable.returncode == 0 and json.loads(undecodable.stdout)["stdout"] == "\ufffd"


FORK_BOMB = (
    "echo before the bomb; python3 -c '"
    "import os\n"
    "n = 0\n"
    "try:\n"
    "    while n < 5000:\n"
    "        if os.fork() == 0:\n"
    '            os.execv("/bin/sleep", ["sleep", "30"])\n'
    "        n += 1\n"
    "except OSError as e:\n"
    '    print("refused:", e.strerror, flush=True)\n'
    "'"
)


@pytest.mark.parametrize("profile", ["workspace-write", "untrusted"])
def test_cli_fork_bomb_reports_the_pids_limit(tmp_path: Path, profile: str) -> None:
    """`sandboxctl run` at the pids limit: SANDBOX.PIDS_LIMIT on stderr, the output so far on stdout.
    runsc: the runtime stopped the sandbox, so 125 (gVisor's own exit 2 is never passed off as the
    command's, nor mistaken for the CLI's invalid-input 2); runc: the command went on and its own exit
    status stands, with the code as a note."""
    ws = workspace_dir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(ALLOW_ALL)
    evidence = tmp_path / "e.jsonl"
    args = ["run", "--config", str(config), "--evidence", str(evidence), "--profile", profile, "--timeout", "60"]
    done = cli(*args, "--shell", FORK_BOMB, cwd=ws)
    assert "Traceback" not in done.stderr
    assert "sandboxctl: SANDBOX.PIDS_LIMIT: " in done.stderr
    if profile == "untrusted":
        assert (done.returncode, done.stdout) == (125, "before the bomb\n"), done.stderr
    else:
        assert (done.returncode, done.stdout) == (0, "before the bomb\nrefused: Resource temporarily unavailable\n")
    (finished,) = [r for r in iter_records(evidence) if r.event in ("execution_finished", "run_failed")]
    assert (finished.event, finished.error_code) == ("execution_finished", "SANDBOX.PIDS_LIMIT")
    assert finished.status == ("pids_limit" if profile == "untrusted" else "succeeded")
    assert verify(evidence).ok


# exactly the limit (itself and 15 children of a 16-process cap), never a fork beyond it
FILL_TO_THE_LIMIT = (
    "import os, time\n"
    "for _ in range(15):\n"
    "    if os.fork() == 0:\n"
    '        os.execv("/bin/sleep", ["sleep", "30"])\n'
    "time.sleep(0.5)\n"
    'print("full")\n'
)


def test_a_run_at_its_pids_limit_is_noted_even_with_no_fork_refused(tmp_path: Path) -> None:
    """The refused-fork count can be lost when a run ends at once (see exit_watch); the peak, kept in the
    sandbox's own parent cgroup, cannot: a run that filled its limit gets the note, its exit status stands."""
    ws = workspace_dir(tmp_path)
    config = tmp_path / "c.yaml"
    config.write_text(ALLOW_ALL + "caps:\n  max_pids: 16\n")
    evidence = tmp_path / "e.jsonl"
    args = ["run", "--config", str(config), "--evidence", str(evidence), "--profile", "workspace-write", "--json"]
    done = cli(*args, "--", "python3", "-c", FILL_TO_THE_LIMIT, cwd=ws)
    out = json.loads(done.stdout)
    assert (done.returncode, out["exit_code"], out["stdout"]) == (0, 0, "full\n"), done.stderr
    assert out["error"]["code"] == "SANDBOX.PIDS_LIMIT"
    assert "reached its limit of 16 processes" in out["error"]["message"]
    (finished,) = [r for r in iter_records(evidence) if r.event == "execution_finished"]
    # no refusal counted: 0 when the count was read as its processes exited, else unknown (a count read earlier is
    # no proof at the limit); never a refusal that did not happen
    assert finished.data["usage"]["pids_peak"] == 16 and finished.data["usage"]["pids_limit_hits"] in (0, None)


async def test_a_run_whose_workspace_holds_its_policy_is_refused_and_recorded(tmp_path: Path) -> None:
    """Built without a workspace (a library user, the service), each run checks the workspace it is
    given: the policy file inside it is refused before a sandbox exists, and recorded."""
    ws = workspace_dir(tmp_path)
    config = ws / "policy.yaml"
    config.write_text(ALLOW_ALL)
    evidence = tmp_path / "evidence.jsonl"
    backend = DockerBackend()
    o = build_orchestrator(config, evidence_path=evidence, backend=backend, profiles=ProfileRegistry())
    try:
        with pytest.raises(InputInvalid) as err:
            await o.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=ws)
        other = tmp_path / "other"
        other.mkdir()
        os.chown(other, 1000, 1000)
        fine = await o.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=other)
    finally:
        await o.aclose()
    assert f"the policy file (--config) {config} is within a sandbox's reach" in err.value.message
    events = [r.event for r in iter_records(evidence, execution_id=err.value.details["execution_id"])]
    assert events == ["request_received", "decision_made", "run_failed"]  # no sandbox was created
    assert fine.ok
    assert verify(evidence).ok
