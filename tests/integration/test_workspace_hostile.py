"""The workspace as hostile input to the host, on the real engine, runc (workspace-write) and runsc
(untrusted): a hostile command, then exact assertions on the result, the host's workspace and the
evidence (the harness of test_containment.py: every execution is checked to leave nothing behind, and
the evidence chain to verify).

* a flood of created files cannot hide a change to a file that existed;
* the write budget kills the sandbox while it writes, with a bounded overshoot (bytes and entries);
* set-uid/set-gid files made in the sandbox lose their bits on the host;
* a secret used as a file name or link target never reaches evidence or the result;
* long, undecodable names cannot keep the end record from being written.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.evidence import MAX_RECORD_BYTES, iter_records
from orchestrator.profiles import ProfileRegistry
from orchestrator.results.record import SIDE_EFFECTS_MAX_BYTES
from tests.support.containment import PROFILES, Harness, Run, assert_evidence, py
from tests.support.images import SANDBOX_UID

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("run_sandboxes")]

MIB = 1 << 20
BUDGET_BYTES = 32 * MIB
BUDGET_FILES = 2000
# What the sandbox may write after passing the budget, before the kill lands: the meter sees a write at
# once (inotify), the engine's kill takes tens of milliseconds, a loaded machine more. Measured here:
# 5-10 MiB (runc 0.8 GB/s, runsc 0.2 GB/s); the bound leaves room for a machine under load.
OVERSHOOT_BYTES = 256 * MIB
OVERSHOOT_FILES = 40_000


def _profiles(tmp_path: Path) -> ProfileRegistry:
    """`<base>-small`: the base profile with a small write budget and TOKEN allowed in its environment."""
    base = ProfileRegistry()
    directory = tmp_path / "profiles"
    directory.mkdir()
    for name in PROFILES:
        allow = [*base.get(name).env_allowlist, "TOKEN"]
        (directory / f"{name}-small.yaml").write_text(
            f"description: {name} with a small write budget\nextends: {name}\nenv_allowlist: {json.dumps(allow)}\n"
            f"limits:\n  workspace_write_bytes: {BUDGET_BYTES}\n  workspace_write_files: {BUDGET_FILES}\n"
        )
    return base.with_dir(directory)


@pytest.fixture
async def harness(tmp_path: Path, run_sandboxes: Any) -> AsyncIterator[Harness]:
    h = Harness("docker", tmp_path, sandboxes=run_sandboxes, profiles=_profiles(tmp_path))
    try:
        yield h
    finally:
        await h.close()


def side_effects(run: Run) -> dict[str, Any]:
    effects = run.finished_data()["side_effects"]
    assert isinstance(effects, dict)
    return effects


def owned(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chown(path.parent, SANDBOX_UID, SANDBOX_UID)
    path.write_bytes(data)
    os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


def host_tree(root: Path) -> tuple[int, int]:
    """(entries, bytes of regular files) under ``root``, as the host sees them."""
    entries = size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        entries += len(dirnames) + len(filenames)
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISREG(st.st_mode):
                size += st.st_size
    return entries, size


# -- changes cannot be hidden -----------------------------------------------------------------------------

FLOOD_PROBE = r"""
for i in range(1500):  # long names that sort before every other one, in the edited file's directory
    open("/workspace/src/!" + "!" * 200 + "%05d" % i, "w").close()
with open("/workspace/src/victim.py", "w") as f:
    f.write("import os; os.system('evil')\n")
os.unlink("/workspace/zz-last.txt")
done()
"""


@pytest.mark.parametrize("profile", PROFILES)
async def test_a_flood_of_created_files_never_hides_a_change_to_an_existing_file(
    harness: Harness, profile: str
) -> None:
    owned(harness.workspace / "src" / "victim.py", b"print('before')\n")
    owned(harness.workspace / "zz-last.txt", b"last\n")
    run = await harness.run(py(FLOOD_PROBE), profile)
    assert (run.out["ok"], run.out["exit_code"], run.out["error"]) == (True, 0, None)
    effects = side_effects(run)
    assert [m["path"] for m in effects["modified"]] == ["src/victim.py"]
    assert effects["modified"][0]["sha256"] == hashlib.sha256(b"import os; os.system('evil')\n").hexdigest()
    assert [d["path"] for d in effects["deleted"]] == ["zz-last.txt"]
    assert (effects["created_count"], effects["modified_count"], effects["deleted_count"]) == (1500, 1, 1)
    assert (effects["complete"], effects["listing_complete"]) == (True, False)  # counted, listed in part
    assert 0 < len(effects["created"]) < 1500
    assert run.out["side_effects"] == {
        "complete": True,
        "created": 1500,
        "modified": 1,
        "deleted": 1,
        "bytes_written": 29 - 16,  # what victim.py grew
        "setid_removed": 0,
    }
    assert_evidence(run, status="succeeded", exit_code=0)


# -- the write budget ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
async def test_the_write_budget_kills_the_sandbox_with_a_bounded_overshoot(harness: Harness, profile: str) -> None:
    """2 GiB asked, 32 MiB allowed: killed while writing, SANDBOX.WORKSPACE_LIMIT, and the bytes written
    recorded (what the host's workspace really holds)."""
    command = "for i in $(seq 128); do head -c 16M /dev/zero > /workspace/f$i || exit 3; done"
    run = await harness.run(command, f"{profile}-small")
    out = run.out
    assert (out["ok"], out["exit_code"], out["timed_out"], out["oom_killed"]) == (False, 137, False, False)
    assert out["error"]["code"] == "SANDBOX.WORKSPACE_LIMIT"
    assert out["error"]["message"].startswith(f"the run grew the workspace by more than {BUDGET_BYTES} bytes")
    assert_evidence(
        run, status="workspace_limit", exit_code=137, error_code="SANDBOX.WORKSPACE_LIMIT", extra=["container_killed"]
    )
    entries, written = host_tree(harness.workspace)
    effects = side_effects(run)
    assert effects["bytes_written"] == written == out["side_effects"]["bytes_written"]
    assert effects["created_count"] == entries and effects["complete"]
    assert BUDGET_BYTES < written <= BUDGET_BYTES + OVERSHOOT_BYTES, written
    budget = effects["write_budget"]
    assert (budget["method"], budget["exceeded"], budget["blind"]) == ("inotify", "bytes", False)
    assert (budget["max_bytes"], budget["max_files"]) == (BUDGET_BYTES, BUDGET_FILES)
    assert BUDGET_BYTES < budget["peak_bytes"] <= written


FILES_PROBE = r"""
made = 0
try:
    while made < 200000:
        open("/workspace/f%06d" % made, "w").close()
        made += 1
except OSError as e:
    V["errno"] = errname(e.errno)
done()
"""


@pytest.mark.parametrize("profile", PROFILES)
async def test_the_file_budget_kills_a_flood_of_empty_files(harness: Harness, profile: str) -> None:
    run = await harness.run(py(FILES_PROBE), f"{profile}-small")
    out = run.out
    assert (out["ok"], out["exit_code"], out["error"]["code"]) == (False, 137, "SANDBOX.WORKSPACE_LIMIT")
    assert out["stdout"] == ""  # killed before it could finish
    assert_evidence(
        run, status="workspace_limit", exit_code=137, error_code="SANDBOX.WORKSPACE_LIMIT", extra=["container_killed"]
    )
    entries, _ = host_tree(harness.workspace)
    effects = side_effects(run)
    assert effects["write_budget"]["exceeded"] == "files"
    assert (effects["created_count"], effects["complete"]) == (entries, True)
    assert BUDGET_FILES < entries <= BUDGET_FILES + OVERSHOOT_FILES, entries


# -- set-id bits --------------------------------------------------------------------------------------------

SETID_PROBE = r"""
import shutil
def make(path, mode):
    shutil.copy("/bin/true", path)
    os.chmod(path, mode)
    return oct(stat.S_IMODE(os.stat(path).st_mode))
os.mkdir("/workspace/d")
V["inside"] = {
    "suid": make("/workspace/suid", 0o4755),
    "sgid": make("/workspace/sgid", 0o2755),
    "both": make("/workspace/d/both", 0o6755),
}
os.chmod("/workspace/tool", 0o4755)  # a file that existed, given the bit
V["inside"]["tool"] = oct(stat.S_IMODE(os.stat("/workspace/tool").st_mode))
done()
"""


@pytest.mark.parametrize("profile", PROFILES)
async def test_setid_files_made_in_the_sandbox_lose_their_bits_on_the_host(harness: Harness, profile: str) -> None:
    ws = harness.workspace
    owned(ws / "tool", b"#!/bin/sh\n")
    run = await harness.run(py(SETID_PROBE), profile)
    assert (run.out["ok"], run.out["error"]) == (True, None), run.out["stderr"][-2000:]
    # the sandbox could set them (its own files: no capability needed), the host does not keep them
    assert run.verdict == {"inside": {"suid": "0o4755", "sgid": "0o2755", "both": "0o6755", "tool": "0o4755"}}
    modes = {name: stat.S_IMODE(os.lstat(ws / name).st_mode) for name in ("suid", "sgid", "d/both", "tool")}
    assert modes == {"suid": 0o755, "sgid": 0o755, "d/both": 0o755, "tool": 0o755}
    effects = side_effects(run)
    assert (effects["setid_removed_count"], effects["setid_removed"]) == (4, ["tool", "d/both", "sgid", "suid"])
    changes = {c["path"]: c for c in (*effects["created"], *effects["modified"])}
    assert (changes["suid"]["mode"], changes["suid"]["note"]) == (0o4755, "set-uid/set-gid bits removed")
    assert (changes["tool"]["mode"], changes["tool"]["note"]) == (0o4755, "set-uid/set-gid bits removed")
    assert run.out["side_effects"]["setid_removed"] == 4
    assert_evidence(run, status="succeeded", exit_code=0)


# -- secrets in names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
async def test_a_secret_used_as_a_name_never_reaches_evidence_or_the_result(harness: Harness, profile: str) -> None:
    token = f"tok-{secrets.token_hex(16)}"
    command = (
        'touch "/workspace/$TOKEN"; mkdir "/workspace/d-$TOKEN"; touch "/workspace/d-$TOKEN/f"; '
        'ln -s "/home/$TOKEN/.ssh" /workspace/link; cp /bin/true "/workspace/t-$TOKEN"; '
        'chmod 4755 "/workspace/t-$TOKEN"'
    )
    run = await harness.run(command, f"{profile}-small", env={"TOKEN": token})
    assert (run.out["ok"], run.out["error"]) == (True, None), run.out["stderr"]
    assert (harness.workspace / token).exists()  # the names are the sandbox's: only their record is redacted
    assert token not in json.dumps(run.out)
    assert token.encode() not in harness.evidence_path.read_bytes()
    effects = side_effects(run)
    assert sorted((c["path"], c.get("link_target")) for c in effects["created"]) == [
        ("[REDACTED:literal]", None),
        ("d-[REDACTED:literal]", None),
        ("d-[REDACTED:literal]/f", None),
        ("link", "/home/[REDACTED:literal]/.ssh"),
        ("t-[REDACTED:literal]", None),
    ]
    assert effects["setid_removed"] == ["t-[REDACTED:literal]"]
    assert_evidence(run, status="succeeded", exit_code=0)


# -- the end record is always writable ----------------------------------------------------------------------

NAMES_PROBE = r"""
base = b"/workspace/" + bytes(range(0x80, 0xff))[:200]
os.mkdir(base)
for i in range(1500):
    name = bytes((0x80 + (i + k) % 0x7f) for k in range(250)) + b"%04d" % i
    open(base + b"/" + name, "wb").close()
    if i < 500:
        os.symlink(bytes(0x80 + k % 0x7f for k in range(4000)), base + b"/l%04d" % i + name[:200])
done()
"""


@pytest.mark.parametrize("profile", PROFILES)
async def test_long_undecodable_names_cannot_keep_the_end_record_from_being_written(
    harness: Harness, profile: str
) -> None:
    run = await harness.run(py(NAMES_PROBE), profile)
    assert (run.out["ok"], run.out["error"]) == (True, None), run.out["stderr"][-2000:]
    finished = assert_evidence(run, status="succeeded", exit_code=0)
    assert len(finished.to_json_line()) < MAX_RECORD_BYTES
    effects = side_effects(run)
    assert effects["created_count"] == 1 + 1500 + 500 and effects["complete"]
    assert len(json.dumps(effects, separators=(",", ":"), ensure_ascii=False).encode()) <= SIDE_EFFECTS_MAX_BYTES + 1024
    assert all(len(c["path"]) <= 256 for c in effects["created"])
    assert effects["created"][0]["path"].startswith("\\x80\\x81")


# -- an incomplete record is a failure ---------------------------------------------------------------------

DEEP_PROBE = r"""
import shutil
os.chdir("/workspace")
for _ in range(20):  # 20 x 250 bytes: deeper than PATH_MAX, made with relative paths
    os.mkdir("n" * 249)
    os.chdir("n" * 249)
shutil.copy("/bin/true", "hidden-tool")
os.chmod("hidden-tool", 0o4755)
done()
"""


@pytest.mark.parametrize("profile", PROFILES)
async def test_a_tree_too_deep_to_list_makes_the_record_incomplete_and_the_run_fail(
    harness: Harness, profile: str
) -> None:
    """Whatever cannot be listed is said, as a failure (ok false, a stable code), never a silent flag; the
    set-uid file hidden down there loses its bit all the same."""
    # Below PATH_MAX the write meter is blind and falls back on the growth of the workspace's whole filesystem
    # (results/write_meter.py): on the test run's shared /tmp, other tests writing beside this one would count as
    # this run's (seen: SANDBOX.WORKSPACE_LIMIT in a full parallel run). The workspace gets a filesystem of its own.
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(harness.workspace)], check=True)
    try:
        os.chown(harness.workspace, SANDBOX_UID, SANDBOX_UID)
        await _deep_tree_run(harness, profile)
    finally:
        subprocess.run(["umount", "-l", str(harness.workspace)], check=False)


async def _deep_tree_run(harness: Harness, profile: str) -> None:
    run = await harness.run(py(DEEP_PROBE), profile)
    out = run.out
    assert (out["ok"], out["exit_code"]) == (False, 0)
    assert out["error"]["code"] == "SANDBOX.SIDE_EFFECTS_INCOMPLETE"
    assert out["error"]["message"].startswith(
        "the workspace side-effect record is incomplete (path_too_long: deeper than 4096 bytes of path"
    )
    assert out["side_effects"] == {
        "complete": False,
        "created": 4096 // 250 + 1,  # the directories within PATH_MAX, and the one that passes it
        "modified": 0,
        "deleted": 0,
        "bytes_written": 0,
        "setid_removed": 1,
    }
    finished = assert_evidence(run, status="succeeded", exit_code=0, error_code="SANDBOX.SIDE_EFFECTS_INCOMPLETE")
    assert finished.data is not None
    effects = finished.data["side_effects"]
    assert [p["kind"] for p in effects["problems"]] == ["path_too_long"]
    assert effects["setid_removed"] == ["…/hidden-tool"]
    fd = os.open(harness.workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(20):
            child = os.open("n" * 249, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        assert stat.S_IMODE(os.stat("hidden-tool", dir_fd=fd, follow_symlinks=False).st_mode) == 0o755
    finally:
        os.close(fd)


def test_the_cli_exits_125_when_the_budget_kills_the_run(tmp_path: Path, run_sandboxes: Any) -> None:
    """`sandboxctl run`: the code on stderr, `ok: false` in the JSON, exit 125 (the sandbox failed)."""
    _profiles(tmp_path)
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, SANDBOX_UID, SANDBOX_UID)
    config = tmp_path / "c.yaml"
    config.write_text("safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: none}\n")
    evidence = tmp_path / "e.jsonl"
    env = {**os.environ, "SANDBOX_PROFILES_PATH": str(tmp_path / "profiles"), "SANDBOXCTL_WARM": "0"}
    argv = [sys.executable, "-m", "orchestrator.cli.main", "run", "--json", "--config", str(config)]
    argv += ["--evidence", str(evidence), "--profile", "workspace-write-small", "--"]
    argv += ["bash", "-c", "for i in $(seq 64); do head -c 16M /dev/zero > /workspace/f$i || exit 3; done"]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ws, env=env, timeout=120, check=False)
    out = json.loads(done.stdout)
    run_sandboxes.add(out["execution_id"])
    assert done.returncode == 125, done.stderr
    assert (out["ok"], out["exit_code"], out["error"]["code"]) == (False, 137, "SANDBOX.WORKSPACE_LIMIT")
    assert "sandboxctl: SANDBOX.WORKSPACE_LIMIT: the run grew the workspace by more than" in done.stderr
    (finished,) = iter_records(evidence, execution_id=out["execution_id"], event="execution_finished")
    assert (finished.status, finished.error_code) == ("workspace_limit", "SANDBOX.WORKSPACE_LIMIT")
