"""Faults on a real engine (no mock): the engine restarted mid-run, the CLI killed with SIGKILL,
interrupted with SIGINT / SIGTERM, and a sandbox whose deadline passed.

What must hold on every path: a clear error within a bounded time (never a hang, never a
traceback), no sandbox of ours left behind (removed at once, or collected as an orphan with an
``execution_abandoned`` record), and an evidence chain that still verifies.

The engine-restart tests restart the **project-managed** engine only (``scripts/stop-engine.sh`` +
``scripts/setup.sh``); against any other engine they are skipped: a user's engine is never restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from orchestrator.backends.base import (
    LABEL_EXECUTION_ID,
    LABEL_MANAGED_BY,
    MANAGED_BY,
    LaunchSpec,
    ManagedSandbox,
    Workspace,
)
from orchestrator.backends.docker import DockerBackend, discover_endpoint
from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.ids import new_execution_id
from orchestrator.evidence import EvidenceWriter, verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.reaper import collect_orphans
from orchestrator.pipeline.this_process import owner_label
from orchestrator.profiles import ProfileRegistry
from tests.support.engine import engine_exclusive, managed_sandboxes
from tests.support.engine import list_managed as engine_list_managed
from tests.support.evidence import records
from tests.support.images import SANDBOX_UID

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SANDBOXCTL = str(Path(sys.executable).with_name("sandboxctl"))
MANAGED_HOST = "unix:///run/sandbox-orchestrator/docker.sock"
MANAGED_PIDFILE = Path("/run/sandbox-orchestrator/dockerd.pid")
MANAGED_DAEMON_JSON = "/var/lib/sandbox-orchestrator/daemon.json"
# generous bounds on a loaded 2-core machine; a hang is what they catch, not slowness
SANDBOX_UP_S = 60.0
RESTART_BOUND_S = 120.0
CLI_EXIT_S = 60.0

CONFIG = """\
safety:
  allowlist: ["sleep", "true"]
approvals:
  provider: none
"""


# -- helpers ------------------------------------------------------------------------------------------


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


def list_managed() -> list[ManagedSandbox]:
    return engine_list_managed(attempts=1)  # once: these tests judge what the engine says right now


def engine_answers() -> bool:
    try:
        list_managed()
    except OrchestratorError:
        return False
    return True


def owner_pid(sandbox: ManagedSandbox) -> int | None:
    parts = (sandbox.owner or "").split(":")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def wait_for_sandbox(pid: int, *, state: str = "running", timeout: float = SANDBOX_UP_S) -> ManagedSandbox:
    """The sandbox owned by process ``pid``, once it is in ``state``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for sandbox in list_managed():
            if owner_pid(sandbox) == pid and sandbox.state == state:
                return sandbox
        time.sleep(0.1)
    raise AssertionError(f"no {state} sandbox owned by pid {pid} within {timeout:g}s")


def remove_sandboxes(execution_ids: set[str]) -> list[str]:
    """Remove (forced) our sandboxes of these executions; returns the names that were still there."""
    import docker  # type: ignore[import-untyped]

    api = docker.APIClient(base_url=discover_endpoint().url, version="auto", timeout=60)
    try:
        left = [
            c
            for c in api.containers(all=True, filters={"label": f"{LABEL_MANAGED_BY}={MANAGED_BY}"})
            if c["Labels"].get(LABEL_EXECUTION_ID) in execution_ids
        ]
        for container in left:
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_container(container["Id"], force=True, v=True)
        return [name for c in left for name in c["Names"]]
    finally:
        api.close()


def assert_verifies(evidence: Path) -> None:
    report = verify(evidence)
    assert report.ok, f"evidence does not verify: {report.location()}: {report.problem}"
    cli = subprocess.run(
        [SANDBOXCTL, "evidence", "verify", "--path", str(evidence)], capture_output=True, text=True, timeout=60
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr


def sandboxctl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SANDBOXCTL, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def start_cli_run(config: Path, evidence: Path, workspace: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            SANDBOXCTL,
            "run",
            "--config",
            str(config),
            "--evidence",
            str(evidence),
            "--workspace",
            str(workspace),
            "--",
            *argv,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def kill_quietly(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    with contextlib.suppress(Exception):
        proc.communicate(timeout=30)


@pytest.fixture(scope="module")
def engine() -> str:
    url = discover_endpoint().url
    if not engine_answers():
        pytest.skip(f"no container engine at {url}; run `make setup`")
    return url


@dataclass
class Env:
    workspace: Path
    config: Path
    evidence: Path


def make_env(base: Path) -> Env:
    base.mkdir(parents=True, exist_ok=True)
    workspace = base / "ws"
    workspace.mkdir()
    os.chown(workspace, SANDBOX_UID, SANDBOX_UID)  # the sandbox user owns its workspace
    config = base / "config.yaml"
    config.write_text(CONFIG)
    return Env(workspace, config, base / "evidence.jsonl")


@pytest.fixture
def env(tmp_path: Path, engine: str) -> Env:
    return make_env(tmp_path)


# -- the engine restarted mid-run ------------------------------------------------------------------------


def _managed_dockerd_pid() -> int | None:
    try:
        pid = int(MANAGED_PIDFILE.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    if Path(cmdline[0].decode()).name != "dockerd" or MANAGED_DAEMON_JSON.encode() not in cmdline:
        return None
    return pid


def _engine_scripts_env() -> dict[str, str]:
    """The scripts must act on the default (project-managed) engine, not on the tests' private state dir."""
    drop = {"SANDBOX_STATE_DIR", "SANDBOX_RUN_DIR", "DOCKER_HOST", "SANDBOX_ENGINE"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def _ensure_engine_up() -> None:
    if engine_answers():
        return
    subprocess.run(["bash", "scripts/setup.sh"], cwd=ROOT, env=_engine_scripts_env(), timeout=300, check=False)
    deadline = time.monotonic() + 60
    while not engine_answers():
        assert time.monotonic() < deadline, "the project-managed engine did not come back (see dockerd.log)"
        time.sleep(0.5)


@dataclass
class RestartRun:
    """What one engine restart under two running executions (in process and CLI) produced."""

    env: Env
    cli_env: Env
    restart_rc: int = -1
    restart_output: str = ""
    # in process
    inproc_execution_id: str | None = None
    inproc_error: BaseException | None = None
    inproc_result: Any = None
    inproc_after_restart_s: float | None = None  # from the start of the restart to the end of execute()
    inproc_left_after_restart: list[ManagedSandbox] = field(default_factory=list)
    inproc_reaped: list[str] = field(default_factory=list)
    inproc_left_after_reap: list[ManagedSandbox] = field(default_factory=list)
    logged_tracebacks: list[str] = field(default_factory=list)
    # CLI
    cli_execution_id: str | None = None
    cli_rc: int | None = None
    cli_stderr: str = ""
    cli_after_restart_s: float | None = None
    cli_left_after_restart: list[ManagedSandbox] = field(default_factory=list)
    cli_gc: str = ""
    cli_left_after_gc: list[ManagedSandbox] = field(default_factory=list)


class _TracebackCatcher:
    """Collects log records that carry a traceback (what a CLI without logging setup prints to stderr)."""

    def __init__(self) -> None:
        import logging

        self.found: list[str] = []
        catcher = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.exc_info:
                    catcher.found.append(f"{record.name}: {record.getMessage()}")

        self.handler = Handler()

    def __enter__(self) -> _TracebackCatcher:
        import logging

        logging.getLogger("orchestrator").addHandler(self.handler)
        return self

    def __exit__(self, *exc: object) -> None:
        import logging

        logging.getLogger("orchestrator").removeHandler(self.handler)


async def _restart_scenario(run: RestartRun) -> None:
    env = run.env
    orch = build_orchestrator(
        env.config,
        workspace=env.workspace,
        evidence_path=env.evidence,
        backend=DockerBackend(),
        profiles=ProfileRegistry(),
    )
    cli = start_cli_run(run.cli_env.config, run.cli_env.evidence, run.cli_env.workspace, "sleep", "30")
    task = asyncio.create_task(orch.execute({"tool": "shell_exec", "argv": ["sleep", "30"]}, workspace=env.workspace))
    try:
        mine = await asyncio.to_thread(wait_for_sandbox, os.getpid())
        theirs = await asyncio.to_thread(wait_for_sandbox, cli.pid)
        run.inproc_execution_id, run.cli_execution_id = mine.execution_id, theirs.execution_id

        began = time.monotonic()
        restart = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            "bash scripts/stop-engine.sh && bash scripts/setup.sh",
            cwd=ROOT,
            env=_engine_scripts_env(),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            run.inproc_result = await asyncio.wait_for(asyncio.shield(task), RESTART_BOUND_S)
        except TimeoutError:
            run.inproc_error = TimeoutError(f"execute() still running {RESTART_BOUND_S:g}s into the restart")
        except BaseException as exc:  # recorded, judged by the tests
            run.inproc_error = exc
        run.inproc_after_restart_s = time.monotonic() - began
        out, _ = await asyncio.wait_for(restart.communicate(), 300)
        run.restart_rc = restart.returncode if restart.returncode is not None else -1
        run.restart_output = out.decode(errors="replace")

        try:
            _, run.cli_stderr = await asyncio.to_thread(cli.communicate, timeout=CLI_EXIT_S)
            run.cli_rc = cli.returncode
        except subprocess.TimeoutExpired:
            run.cli_stderr = f"still running {CLI_EXIT_S:g}s after the restart"
        run.cli_after_restart_s = time.monotonic() - began
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        kill_quietly(cli)
        with contextlib.suppress(Exception):
            await orch.aclose()
        await asyncio.to_thread(_ensure_engine_up)

    managed = await managed_sandboxes()
    run.inproc_left_after_restart = [s for s in managed if s.execution_id == run.inproc_execution_id]
    run.cli_left_after_restart = [s for s in managed if s.execution_id == run.cli_execution_id]

    # the CLI is gone: the next gc collects what it left
    gc = await asyncio.to_thread(sandboxctl, "gc", "--json", "--evidence", str(run.cli_env.evidence))
    run.cli_gc = gc.stdout
    run.cli_left_after_gc = [s for s in await managed_sandboxes() if s.execution_id == run.cli_execution_id]

    # the in-process controller is still alive: what does its own reaper do now?
    backend = DockerBackend()
    writer = EvidenceWriter(env.evidence)
    try:
        reaped = await collect_orphans(backend, writer)
    finally:
        await writer.close()
        await backend.close()
    run.inproc_reaped = [r.sandbox.execution_id or "" for r in reaped]
    run.inproc_left_after_reap = [s for s in await managed_sandboxes() if s.execution_id == run.inproc_execution_id]


@pytest.fixture(scope="module")
def restarted(engine: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartRun]:
    """One restart of the project-managed engine while an in-process execution and a CLI run of
    ``sleep 30`` are running; the tests below judge what it left."""
    if engine != MANAGED_HOST:
        pytest.skip(f"the engine is {engine}, not the project-managed one ({MANAGED_HOST}): never restarted by tests")
    if _managed_dockerd_pid() is None:
        pytest.skip(f"no project-managed dockerd (pidfile {MANAGED_PIDFILE}) serves {MANAGED_HOST}")
    if os.geteuid() != 0:
        pytest.skip("restarting the project-managed engine needs root")
    base = tmp_path_factory.mktemp("restart")
    run = RestartRun(env=make_env(base / "inproc"), cli_env=make_env(base / "cli"))
    try:
        with engine_exclusive():  # no other test on the engine meanwhile (make test runs the tiers side by side)
            try:
                with _TracebackCatcher() as catcher:
                    _run(_restart_scenario(run))
                run.logged_tracebacks = catcher.found
            finally:
                _ensure_engine_up()
        yield run
    finally:
        remove_sandboxes({e for e in (run.inproc_execution_id, run.cli_execution_id) if e})


def test_engine_restart_in_process_fails_clearly(restarted: RestartRun) -> None:
    run = restarted
    assert run.restart_rc == 0, run.restart_output
    assert run.inproc_execution_id is not None
    err = run.inproc_error
    assert err is not None, f"execute() returned {run.inproc_result!r} although the engine went away under it"
    assert isinstance(err, OrchestratorError), f"not a clear error: {type(err).__name__}: {err}"
    assert err.code in ("SANDBOX.UNAVAILABLE", "SANDBOX.START_FAILED"), err
    assert err.details.get("execution_id") == run.inproc_execution_id
    assert run.inproc_after_restart_s is not None and run.inproc_after_restart_s < RESTART_BOUND_S
    (failed,) = records(run.env.evidence, run.inproc_execution_id, "run_failed")
    assert failed.error_code == err.code
    assert_verifies(run.env.evidence)


def test_engine_restart_in_process_leaves_no_sandbox(restarted: RestartRun) -> None:
    run = restarted
    left = run.inproc_left_after_restart
    if left:  # acceptable only when the controller's own reaper collects it, with its record
        assert run.inproc_execution_id in run.inproc_reaped, f"left behind: {[s.name for s in left]}"
        assert not run.inproc_left_after_reap
        assert records(run.env.evidence, str(run.inproc_execution_id), "execution_abandoned")
    assert_verifies(run.env.evidence)


def test_engine_restart_logs_no_traceback(restarted: RestartRun) -> None:
    assert "Traceback" not in restarted.cli_stderr, restarted.cli_stderr
    assert not restarted.logged_tracebacks, restarted.logged_tracebacks


def test_engine_restart_cli_fails_clearly_and_its_orphan_is_collected(restarted: RestartRun) -> None:
    run = restarted
    assert run.cli_execution_id is not None
    assert run.cli_rc == 125, f"exit {run.cli_rc}: {run.cli_stderr}"
    assert "sandboxctl: SANDBOX.UNAVAILABLE: " in run.cli_stderr or "sandboxctl: SANDBOX.START_FAILED: " in (
        run.cli_stderr
    ), run.cli_stderr
    assert run.cli_after_restart_s is not None and run.cli_after_restart_s < RESTART_BOUND_S + CLI_EXIT_S
    (failed,) = records(run.cli_env.evidence, run.cli_execution_id, "run_failed")
    assert failed.error_code in ("SANDBOX.UNAVAILABLE", "SANDBOX.START_FAILED")
    # whatever the failed run left is collected by the next gc, with its record
    assert not run.cli_left_after_gc, [s.name for s in run.cli_left_after_gc]
    if run.cli_left_after_restart:
        reaped = {r["execution_id"]: r["reason"] for r in json.loads(run.cli_gc)}
        assert "is gone" in reaped[run.cli_execution_id]
        (abandoned,) = records(run.cli_env.evidence, run.cli_execution_id, "execution_abandoned")
        assert abandoned.reason is not None and "is gone" in abandoned.reason
    assert_verifies(run.cli_env.evidence)


# -- the CLI killed with SIGKILL mid-run ----------------------------------------------------------------


@pytest.mark.engine_exclusive
def test_sigkilled_cli_leaves_an_orphan_that_the_next_run_collects(env: Env) -> None:
    proc = start_cli_run(env.config, env.evidence, env.workspace, "sleep", "60")
    execution_id: str | None = None
    try:
        sandbox = wait_for_sandbox(proc.pid)
        execution_id = sandbox.execution_id
        assert execution_id is not None
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL

        # nobody removed it: the sandbox outlives its controller
        (orphan,) = [s for s in list_managed() if s.execution_id == execution_id]
        assert orphan.state == "running"

        # the next start collects it before running anything
        nxt = sandboxctl(
            "run",
            "--config",
            str(env.config),
            "--evidence",
            str(env.evidence),
            "--workspace",
            str(env.workspace),
            "--",
            "true",
        )
        assert nxt.returncode == 0, nxt.stderr
        assert "Traceback" not in nxt.stderr
        assert not [s for s in list_managed() if s.execution_id == execution_id]

        (abandoned,) = records(env.evidence, execution_id, "execution_abandoned")
        assert abandoned.status == "abandoned"
        assert abandoned.reason == f"orphan removed: owner {orphan.owner} is gone"
        assert abandoned.data is not None and abandoned.data["sandbox_id"] == orphan.sandbox_id
        # the killed run wrote its begin record and nothing after it; the chain is intact anyway
        assert records(env.evidence, execution_id, "execution_started")
        assert not records(env.evidence, execution_id, "execution_finished")
        assert_verifies(env.evidence)
    finally:
        kill_quietly(proc)
        if execution_id:
            remove_sandboxes({execution_id})


# -- Ctrl-C and SIGTERM -------------------------------------------------------------------------------------


@dataclass
class Interrupted:
    env: Env
    execution_id: str
    returncode: int | None
    stderr: str
    left: list[ManagedSandbox]


@pytest.fixture(scope="module")
def interrupted(request: pytest.FixtureRequest, engine: str, tmp_path_factory: pytest.TempPathFactory) -> Interrupted:
    """A CLI run of ``sleep 60`` interrupted by the signal named by the parameter once its sandbox runs."""
    signame: str = request.param
    env = make_env(tmp_path_factory.mktemp(signame.lower()))
    proc = start_cli_run(env.config, env.evidence, env.workspace, "sleep", "60")
    execution_id: str | None = None
    try:
        execution_id = wait_for_sandbox(proc.pid).execution_id
        assert execution_id is not None
        proc.send_signal(getattr(signal, signame))
        try:
            _, stderr = proc.communicate(timeout=CLI_EXIT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"sandboxctl run still running {CLI_EXIT_S:g}s after {signame}")
        # listed right after the CLI exited: removal must have happened before it did
        left = [s for s in list_managed() if s.execution_id == execution_id]
        return Interrupted(env, execution_id, proc.returncode, stderr, left)
    finally:
        kill_quietly(proc)
        if execution_id:
            remove_sandboxes({execution_id})


SIGNALS = ["SIGINT", "SIGTERM"]


@pytest.mark.parametrize("interrupted", SIGNALS, indirect=True)
def test_interrupt_removes_the_sandbox_and_records_the_cancellation(interrupted: Interrupted) -> None:
    run = interrupted
    assert not run.left, f"sandbox left behind after the CLI exited: {[s.name for s in run.left]}"
    (failed,) = records(run.env.evidence, run.execution_id, "run_failed")
    assert failed.error_code == "EXECUTION.CANCELLED"
    assert records(run.env.evidence, run.execution_id, "container_destroyed")
    assert_verifies(run.env.evidence)


@pytest.mark.parametrize(
    "interrupted",
    ["SIGINT", "SIGTERM"],
    indirect=True,
)
def test_interrupt_exits_130_without_a_traceback(interrupted: Interrupted) -> None:
    assert interrupted.returncode == 130, f"exit {interrupted.returncode}: {interrupted.stderr}"
    assert "Traceback" not in interrupted.stderr, interrupted.stderr
    assert interrupted.stderr.startswith("sandboxctl: "), interrupted.stderr


# -- an orphan whose deadline passed -------------------------------------------------------------------------


async def _create_expired(env: Env) -> tuple[str, str]:
    profile = ProfileRegistry().resolve("workspace-write")
    execution_id = new_execution_id()
    deadline = time.time() - 3600
    spec = LaunchSpec(
        execution_id=execution_id,
        argv=("sleep", "60"),
        profile=profile,
        workspace=Workspace(str(env.workspace)),
        workdir=profile.workspace.container_path,
        env=dict(profile.env),
        owner=owner_label(),  # this process: alive, so only the deadline can make it an orphan
        deadline_unix=deadline,
    )
    backend = DockerBackend()
    try:
        handle = await backend.create(spec)
    finally:
        await backend.close()  # closes streams and the client; the container stays
    return execution_id, handle.sandbox_id


@pytest.mark.engine_exclusive
def test_gc_collects_a_sandbox_whose_deadline_passed(env: Env) -> None:
    execution_id, sandbox_id = _run(_create_expired(env))
    try:
        (listed,) = [s for s in list_managed() if s.execution_id == execution_id]
        assert listed.deadline_unix is not None and listed.deadline_unix < time.time()

        gc = sandboxctl("gc", "--json", "--evidence", str(env.evidence))
        assert gc.returncode == 0, gc.stderr
        reaped = {r["execution_id"]: r for r in json.loads(gc.stdout)}
        assert reaped[execution_id]["reason"] == "deadline passed"
        assert reaped[execution_id]["sandbox_id"] == sandbox_id
        assert not [s for s in list_managed() if s.execution_id == execution_id]

        (abandoned,) = records(env.evidence, execution_id, "execution_abandoned")
        assert abandoned.reason == "orphan removed: deadline passed"
        assert abandoned.data is not None and abandoned.data["sandbox_id"] == sandbox_id
        assert_verifies(env.evidence)
    finally:
        remove_sandboxes({execution_id})
