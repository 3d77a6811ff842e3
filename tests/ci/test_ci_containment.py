"""The containment battery on CI steps: a step run through the GitHub hook (hook.js, the controller's protocol, a
job whose runner asks for the engine's socket) gets the same guarantees as any run. The probes are the
battery's own (tests/integration/test_containment.py, its harness tests/support/containment.py), each run as a
``run:`` step's script in a fresh sandbox of one job of the ``ci`` profile on the Docker backend."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.pipeline.this_process import owner_label
from orchestrator.profiles import ProfileRegistry
from tests.ci.conftest import CI_POLICY
from tests.integration.test_containment import (
    FORK_PROBE,
    LEAKS_PROBE,
    MASKABLE_PROC,
    MEMORY_BOMB,
    NETWORK_PROBE,
    NO_SOCKETS,
    PRIVILEGE_PROBE,
    REFUSED_SYSCALLS,
    WRITABLE_PROBE,
    host_listeners,
)
from tests.support.containment import ZERO_CAPS, processes_mentioning, py
from tests.support.engine import list_managed
from tests.support.github_runner import HookRun, Runner
from tests.support.service import Harness, start_service, token_of, write_config

pytestmark = pytest.mark.integration

IMAGE = "sandbox-orchestrator/default:latest"
CI = ProfileRegistry().resolve("ci")
WORK = CI.workspace.container_path  # /__w

#: the probes are python on stdin (code the gate cannot read): allowed by a rule on the job's context that says so
BATTERY_POLICY: dict[str, Any] = {
    "safety": {
        "mode": "ask",
        "default": "deny",
        "rules": [
            {
                "name": "battery-steps",
                "action": "allow",
                "complex": True,
                "opaque": True,
                "risk_at_most": "critical",
                "ci": {"repository": "org/*", "ref": "refs/heads/main"},
            }
        ],
    },
    "caps": CI_POLICY["caps"],
}


@pytest.fixture
async def battery_service(tmp_path: Path, engine: Any) -> AsyncIterator[Harness]:
    h = await start_service(write_config(tmp_path, **json.loads(json.dumps(BATTERY_POLICY))))
    try:
        yield h
    finally:
        await h.stop()


@pytest.fixture
async def job(battery_service: Harness, tmp_path: Path) -> AsyncIterator[Runner]:
    """An open job (its prepare_job mounts the engine's socket, as the runner's always does), closed after."""
    work = tmp_path / "workspaces" / "team-a" / "runner-battery"
    work.mkdir(parents=True)
    runner = Runner(url=battery_service.url, token=token_of("agent-a"), work=work, name="runner-battery")
    payload = runner.prepare_job(IMAGE)
    assert "/var/run/docker.sock" in {m["targetVolumePath"] for m in payload["args"]["container"]["systemMountVolumes"]}
    prepared = await runner.invoke(payload)
    assert prepared.exit_code == 0, prepared.stderr
    assert "engine's socket (/var/run/docker.sock) is never given to a sandbox" in prepared.stderr
    runner.own_work()
    yield runner
    assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
    assert not [s for s in list_managed() if s.owner == owner_label()]


def verdict(run: HookRun) -> dict[str, Any]:
    """The probe's VERDICT line from the job log."""
    assert run.exit_code == 0, (run.exit_code, run.stderr[-2000:])
    lines = [line for line in run.stdout.splitlines() if line.startswith("VERDICT ")]
    assert len(lines) == 1, run.stdout[-2000:]
    found: dict[str, Any] = json.loads(lines[0][len("VERDICT ") :])
    return found


async def test_a_ci_step_has_no_network(job: Runner) -> None:
    with host_listeners() as ports:  # nothing reaches them
        found = verdict(await job.invoke(job.script_step(py(NETWORK_PROBE, *ports))))
    assert (found.pop("ipv4_routes"), found.pop("ipv6_routes_off_lo")) == ([], [])
    assert found == {
        "tcp_host_port": "ECONNREFUSED",  # the sandbox's own loopback
        "tcp6_host_port": "EADDRNOTAVAIL",
        "udp_sendto_host_port": "ok",  # into the sandbox's own loopback: the host's socket got nothing (above)
        "raw_inet": "EPERM",
        "raw_inet6": "EPERM",
        "packet_raw": "EPERM",
        "packet_dgram": "EPERM",
        "vsock": "EPERM",
        "alg": "EPERM",
        "netlink_route": "ok",
        "netlink_sock_diag": "EPERM",
        "netlink_audit": "EPERM",
        "netlink_kobject_uevent": "EPERM",
        "resolve_localhost_from_hosts": ["127.0.0.1"],
        "resolve_localhost_dot_via_dns": "EAI_AGAIN",
        "interfaces": ["lo"],
    }


async def test_a_ci_step_has_no_privilege(job: Runner) -> None:
    found = verdict(await job.invoke(job.script_step(py(PRIVILEGE_PROBE))))
    assert found == {
        "status": {
            "CapInh": ZERO_CAPS,
            "CapPrm": ZERO_CAPS,
            "CapEff": ZERO_CAPS,
            "CapBnd": ZERO_CAPS,
            "CapAmb": ZERO_CAPS,
            "NoNewPrivs": "1",
            "Seccomp": "2",
        },
        "prctl_no_new_privs": 1,
        "prctl_seccomp_mode": 2,
        "ids": {"uid": CI.uid, "euid": CI.uid, "gid": CI.gid, "egid": CI.gid, "groups": [CI.gid]},
        "setuid_setgid_files": [],
        "unshare_cmd": {"exit": 1, "stderr": "unshare: unshare failed: Operation not permitted"},
        "syscalls": dict.fromkeys(REFUSED_SYSCALLS, "EPERM"),
    }


async def test_a_ci_steps_only_writable_places_are_the_workspace_and_its_memory(job: Runner) -> None:
    """The root is read-only; the job's workspace (/__w) and the profile's memory-backed mounts are all a step
    can write."""
    found = verdict(await job.invoke(job.script_step(py(WRITABLE_PROBE))))
    masked = [f"/proc/{name}" for name in MASKABLE_PROC if os.path.exists(f"/proc/{name}")]
    assert found == {
        "writable": sorted([WORK, "/dev/mqueue", "/dev/shm", "/tmp"]),
        "null_masks": sorted(masked),
        # the ci profile's /tmp says noexec: false (build tools run what they compile there), and the engine is
        # told exec; /dev/shm is the engine's own, noexec
        "exec:/tmp": 0,
        "exec:/dev/shm": "EACCES",
        # the probe's /workspace: the image's own directory, on the read-only root of a CI sandbox
        "exec:/workspace": "EROFS",
    }


async def test_a_ci_step_sees_no_engine_socket_host_env_or_token(job: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's prepare_job mounted the engine's socket into its job container: no step has it, nor any
    socket, nor the controller's environment; the mounts are the profile's, the workspace the only one of the
    host's disks."""
    host_secret = f"host-{secrets.token_hex(12)}"
    monkeypatch.setenv("SANDBOX_TEST_HOST_SECRET", host_secret)  # the controller runs in this process
    run = await job.invoke(job.script_step(py(LEAKS_PROBE)))
    found = verdict(run)
    for digests in (found.pop("pid1_environ"), found.pop("own_environ")):
        assert "SANDBOX_TEST_HOST_SECRET" not in digests and "SANDBOX_TOKEN" not in digests, digests
    assert found.pop("mount_points") == sorted(
        ["/", WORK, "/dev", "/dev/pts", "/dev/shm", "/proc", "/sys", "/sys/fs/cgroup", "/tmp"]
        + ["/etc/hostname", "/etc/hosts", "/etc/resolv.conf"]
        + [f"/sys/fs/cgroup/{c}" for c in ("blkio", "cpu", "cpuacct", "cpuset", "devices", "freezer")]
        + [f"/sys/fs/cgroup/{c}" for c in ("memory", "pids", "systemd")]
        + ["/dev/mqueue", "/proc/acpi", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/sys/firmware"]
        + [f"/proc/{m}" for m in MASKABLE_PROC if os.path.exists(f"/proc/{m}")]
    )
    assert found == NO_SOCKETS
    assert host_secret not in run.stdout + run.stderr


async def test_a_ci_steps_fork_bomb_stops_at_the_profiles_pids_limit(job: Runner) -> None:
    marker = f"3{secrets.randbelow(10**6):06d}.5"
    run = await job.invoke(job.script_step(py(FORK_PROBE, marker)))
    found = verdict(run)  # runc: the fork past the limit fails with EAGAIN, the probe goes on to its end
    assert found["errno"] == "EAGAIN" and CI.pids_limit - 12 <= found["forked"] <= CI.pids_limit - 2, found
    assert "SANDBOX.PIDS_LIMIT" in run.stderr and str(CI.pids_limit) in run.stderr, run.stderr
    assert not processes_mentioning(f"sleep {marker}")  # nothing of it outlived its sandbox


async def test_a_ci_steps_memory_bomb_is_oom_killed_at_the_profiles_limit(job: Runner) -> None:
    run = await job.invoke(job.script_step(f"python3 -c '{MEMORY_BOMB}'\n"))
    assert run.exit_code == 137, (run.exit_code, run.stderr[-2000:])
    assert "SANDBOX.OOM" in run.stderr and str(CI.memory_bytes) in run.stderr, run.stderr
