"""The SandboxBackend contract, the same cases on Docker and on Kubernetes (see conftest.py)."""

from __future__ import annotations

import asyncio
import os

import pytest

from orchestrator.backends.base import CommandLaunch
from orchestrator.domain.errors import SandboxStartFailed, SandboxUnavailable
from tests.support.contract import Harness, resolved


async def test_output_exit_code_and_lifecycle(contract: Harness) -> None:
    ran = await contract.run(contract.spec(["sh", "-c", "echo out; echo err >&2; exit 3"]))
    assert ran.exit_code == 3
    assert ran.stdout.data == b"out\n" and ran.stderr.data == b"err\n"
    assert (ran.stdout.total_bytes, ran.stdout.truncated) == (4, False)
    kinds = [e.kind for e in ran.events]
    assert [k for k in kinds if k != "schedule"] == ["create", "start", "die", "destroy"]
    assert all(e.sandbox_id == ran.handle.sandbox_id for e in ran.events)
    die = next(e for e in ran.events if e.kind == "die")
    assert die.exit_code == 3
    times = [e.engine_ts for e in ran.events]
    assert times == sorted(times), "the engine's timestamps follow the lifecycle"


async def test_output_past_the_limit_is_counted_not_kept(contract: Harness) -> None:
    spec = contract.spec(["sh", "-c", "head -c 300000 /dev/zero; head -c 5000 /dev/zero >&2"])
    ran = await contract.run(spec, limits=(1000, 100))
    assert (len(ran.stdout.data), ran.stdout.total_bytes, ran.stdout.truncated) == (1000, 300000, True)
    assert (len(ran.stderr.data), ran.stderr.total_bytes, ran.stderr.truncated) == (100, 5000, True)


async def test_a_flood_past_the_nodes_log_rotation_is_counted_exactly(contract: Harness) -> None:
    """24 MiB in one line and 4 MiB on stderr at once: past the kubelet's 10 MiB log rotation (a pod's
    output is read from the runtime, not from the node's log files), every byte counted."""
    size = 24 * 1024 * 1024
    spec = contract.spec(["sh", "-c", f"head -c {size} /dev/zero | tr '\\0' y & head -c 4194304 /dev/zero >&2; wait"])
    ran = await contract.run(spec, limits=(1000, 100))
    assert ran.exit_code == 0
    assert (ran.stdout.data, ran.stdout.total_bytes, ran.stdout.truncated) == (b"y" * 1000, size, True)
    assert (ran.stderr.data, ran.stderr.total_bytes) == (b"\0" * 100, 4194304)


async def test_stdin_is_delivered_whole_then_ends(contract: Harness) -> None:
    data = bytes(range(256)) * 4096 + b"\nlast line without a newline"  # 1 MiB and some, any byte
    ran = await contract.run(contract.spec(["sh", "-c", "wc -c; echo done"], kind=CommandLaunch(stdin=data)))
    assert ran.exit_code == 0, ran.stderr.data
    assert ran.stdout.data.decode().split() == [str(len(data)), "done"]


async def test_without_stdin_a_reader_sees_its_end_at_once(contract: Harness) -> None:
    ran = await contract.run(contract.spec(["sh", "-c", "cat; echo read-nothing"]), timeout=60)
    assert (ran.exit_code, ran.stdout.data) == (0, b"read-nothing\n")


async def test_user_env_workdir_and_the_workspace(contract: Harness) -> None:
    (contract.workspace / "sub").mkdir()
    os.chown(contract.workspace / "sub", 1000, 1000)
    profile = resolved()
    spec = contract.spec(
        ["sh", "-c", 'id -u; id -g; pwd; echo "$GREETING"; echo made > made.txt'],
        env={**profile.env, "GREETING": "hello"},
        workdir=f"{profile.workspace.container_path}/sub",
    )
    ran = await contract.run(spec)
    assert ran.exit_code == 0, ran.stderr.data
    assert ran.stdout.data.decode().split() == ["1000", "1000", "/workspace/sub", "hello"]
    assert (contract.workspace / "sub" / "made.txt").read_text() == "made\n"


async def test_hardening_holds_inside(contract: Harness) -> None:
    script = (
        "touch /rootfs-write 2>/dev/null && echo root-writable;"
        " grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status;"
        ' test -z "$(ls /var/run/secrets/kubernetes.io 2>/dev/null)" && echo no-token;'
        " cat /proc/net/route | awk 'NR>1 && $2==\"00000000\"' | grep -q . && echo default-route;"
        " ulimit -n; ulimit -f"
    )
    ran = await contract.run(contract.spec(["sh", "-c", script]))
    lines = ran.stdout.data.decode().split("\n")
    assert "root-writable" not in lines and "default-route" not in lines
    assert "CapEff:\t0000000000000000" in lines
    assert "NoNewPrivs:\t1" in lines
    assert "Seccomp:\t2" in lines
    assert "no-token" in lines
    profile = resolved()
    assert lines[-3:-1] == [str(profile.nofile), str(profile.fsize_bytes // 512)]


async def test_kill_stops_a_running_sandbox(contract: Harness) -> None:
    spec = contract.spec(["sleep", "300"])
    handle = await contract.backend.create(spec)
    try:
        capture = asyncio.create_task(contract.backend.capture(handle, 100, 100))
        await contract.backend.start(handle)
        managed = {s.name: s for s in await contract.backend.list_managed()}
        assert managed[handle.name].owner == contract.owner
        assert managed[handle.name].execution_id == spec.execution_id
        assert managed[handle.name].deadline_unix == pytest.approx(spec.deadline_unix, abs=1)
        await contract.backend.kill(handle)
        async with asyncio.timeout(30):
            code = await contract.backend.wait(handle)
            await capture
        assert code != 0
        state = await contract.backend.inspect(handle)
        assert state.exit_code == code and not state.oom_killed
        await contract.backend.kill(handle)  # an ended sandbox: no error
    finally:
        await contract.backend.destroy(handle)
    await contract.backend.destroy(handle)  # idempotent
    assert handle.name not in {s.name for s in await contract.backend.list_managed()}


async def test_memory_past_the_limit_is_an_oom_kill(contract: Harness) -> None:
    profile = resolved(max_memory="64m")
    spec = contract.spec(["python3", "-c", "b = bytearray(200 * 1024 * 1024); print(len(b))"], profile=profile)
    ran = await contract.run(spec)
    assert ran.oom_killed and ran.exit_code == 137
    assert "oom" in [e.kind for e in ran.events]


async def test_a_missing_image_is_unavailable(contract: Harness) -> None:
    profile = resolved().model_copy(update={"image": "sandbox-orchestrator/no-such-image:latest", "profile_hash": ""})
    profile = type(profile).model_validate(profile.model_dump())
    with pytest.raises(SandboxUnavailable):
        await contract.run(contract.spec(["true"], profile=profile))


async def test_a_missing_command_fails_to_start_or_exits_127(contract: Harness) -> None:
    try:
        ran = await contract.run(contract.spec(["/no/such/command"]))
    except SandboxStartFailed as exc:
        assert exc.details.get("command_not_found") is True
    else:  # Kubernetes: prlimit runs first and reports the missing command (exit 127)
        assert ran.exit_code == 127
        assert b"/no/such/command" in ran.stderr.data


async def test_destroy_of_a_created_never_started_sandbox(contract: Harness) -> None:
    handle = await contract.backend.create(contract.spec(["true"]))
    await contract.backend.destroy(handle)
    assert handle.name not in {s.name for s in await contract.backend.list_managed()}
