"""Sandbox overhead: the whole pipeline against the bare engine, side by side in one run.

Phases (each can be skipped):

* **in process** — ``Orchestrator.execute({"tool": "shell_exec", "argv": ["true"]})`` (gate, evidence,
  engine events, capture, teardown) against the *same* container settings driven straight through the
  docker SDK (``APIClient``: create from the backend's own raw config, start, wait, remove). Pairs are
  interleaved (A B, then B A, ...); prints p50/p95 of each and the median of the pairwise ratios A/B,
  for runc (profile ``workspace-write``) and runsc (``untrusted``). Target (issue 3): ≤ 1.15.
* **CLI** — three sides interleaved, the order changing every round (no side always first), DOCKER_HOST
  set for all: (W) ``sandboxctl run -- true`` with a warm server, (A) the same run cold
  (``SANDBOXCTL_WARM=0``) and (B) a bare ``docker run --rm`` with the same hardening flags. Prints
  p50/p95/min of each and the median of the pairwise ratios W/B and A/B. Target (issue 3): W/B ≤ 2.0
  (``sandboxctl run`` with its warm server); A/B, a cold start, is shown but is no target. The warm
  server is the benchmark's own (``sandboxctl warm start``), in a private state dir under /tmp
  (``SANDBOX_STATE_DIR``, also set for the cold runs) and with exactly the CLI runs' environment (else
  it refuses and the client runs cold); it is stopped at the end, whatever happens. Afterwards its
  ``served`` count must have grown by exactly the number of W runs, or the W figure is marked invalid.
  Plus where CLI time goes: interpreter start, ``sandboxctl --version`` and ``sandboxctl check`` (cold
  and warm), ``sandboxctl run`` up to its first engine call (an unreachable engine), and
  ``-X importtime`` of a real ``sandboxctl run``.
* **concurrency** — N executions with C at a time (``asyncio.gather`` over one orchestrator):
  throughput and latency.
* **leaks** — many executions, then: containers with our labels left (must be 0), open fds and threads
  back to their baseline, evidence verifies.

Not a test: it prints figures and a last line ``summary: {...}`` (JSON: the ratios, the load, whether the
checks passed), and exits 1 only if a leak check fails or the warm server did not serve every warm run.
The engine is the one ``DockerBackend()`` finds (``benchmarks/engine.py``), set as DOCKER_HOST for the CLI
sides.

    .venv/bin/python benchmarks/sandbox_overhead.py [--runs 30] [--runtime runc|runsc|both]
        [--concurrency 20] [--concurrent-runs 100] [--leak-runs 500] [--leak-concurrency 20]
        [--skip-inproc] [--skip-cli] [--skip-startup] [--skip-concurrency] [--skip-leaks] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import engine_url
from options import parse

from orchestrator.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from orchestrator.backends.docker import DockerBackend
from orchestrator.backends.docker.config import container_config
from orchestrator.backends.docker.sandbox_etc import etc_directory
from orchestrator.cli.warm.client import DISABLE_ENV as WARM_ENV
from orchestrator.cli.warm.protocol import socket_path
from orchestrator.domain.ids import new_execution_id
from orchestrator.domain.requests import parse_request
from orchestrator.evidence import verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.launch import launch_spec
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles import ProfileRegistry, ResolvedProfile

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SANDBOXCTL = str(BIN / "sandboxctl")
PROFILES = {"runc": "workspace-write", "runsc": "untrusted"}
SANDBOX_UID = 1000
CONFIG = 'safety:\n  allowlist: ["true"]\napprovals:\n  provider: none\n'
TARGET_INPROC = 1.15
TARGET_CLI = 2.0
# the warm server's safety net should the benchmark die without stopping it (e.g. SIGKILL)
WARM_IDLE_TIMEOUT_S = 600


# -- figures ----------------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def print_samples(sides: list[tuple[str, list[float]]]) -> None:
    width = max(len(name) for name, _ in sides)
    for name, samples in sides:
        figures = f"p50 {ms(pct(samples, 0.5))}   p95 {ms(pct(samples, 0.95))}   min {ms(min(samples))}"
        print(f"    {name:<{width}}  {figures}")


def pairwise(label: str, a: list[float], b: list[float]) -> tuple[float, str]:
    """The median of the ratios a/b of samples taken in the same round, and a line describing them."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    ratio = statistics.median(ratios)
    return ratio, (
        f"median ratio {label} {ratio:.3f}  (p25 {pct(ratios, 0.25):.3f}, p75 {pct(ratios, 0.75):.3f}; "
        f"median difference {ms(statistics.median(x - y for x, y in zip(a, b, strict=True))).strip()})"
    )


def verdict(ratio: float, target: float) -> str:
    return f"{'meets' if ratio <= target else 'MISSES'} target <= {target}"


def side_by_side(title: str, a_name: str, a: list[float], b_name: str, b: list[float], target: float) -> float:
    print(f"  {title}  ({len(a)} interleaved pairs)")
    print_samples([(a_name, a), (b_name, b)])
    ratio, line = pairwise("A/B", a, b)
    print(f"    {line}  -> {verdict(ratio, target)}")
    return ratio


def round_orders(sides: int) -> list[tuple[int, ...]]:
    """The orders of the sides, one a round, in turn: each rotation, then its reverse (duplicates
    dropped). Two sides: A B, B A. Three: A B C, C B A, B C A, A C B, C A B, B A C: over six rounds
    each side is first, middle and last twice and runs before each other side three times, and no side
    is first twice in a row."""
    orders: list[tuple[int, ...]] = []
    for start in range(sides):
        rotated = tuple((start + k) % sides for k in range(sides))
        for order in (rotated, rotated[::-1]):
            if order not in orders:
                orders.append(order)
    return orders


async def interleave(runs: int, warmup: int, *sides: Callable[[], Awaitable[None]]) -> list[list[float]]:
    """Every side once a round, the order changing each round (see round_orders): drift and order effects
    hit every side alike. Sample i of each side comes from round i (pairwise ratios compare those)."""
    for _ in range(warmup):
        for side in sides:
            await side()
    orders = round_orders(len(sides))
    times: list[list[float]] = [[] for _ in sides]
    for i in range(runs):
        for k in orders[i % len(orders)]:
            began = time.perf_counter()
            await sides[k]()
            times[k].append(time.perf_counter() - began)
    return times


# -- the process's own resources ---------------------------------------------------------------------


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def own_threads() -> int:
    """Python threads other than the main thread and the event loop's default executor (``asyncio_N``,
    sized min(32, cpus + 4), kept for the loop's lifetime): what the orchestrator itself holds."""
    return sum(
        1 for t in threading.enumerate() if t is not threading.main_thread() and not t.name.startswith("asyncio_")
    )


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


@dataclass(frozen=True)
class Resources:
    fds: int
    threads: int  # the orchestrator's (see own_threads)
    os_threads: int
    rss: float

    @classmethod
    def now(cls) -> Resources:
        return cls(open_fds(), own_threads(), os_threads(), rss_mib())

    def __str__(self) -> str:
        return (
            f"fds {self.fds:3d}, threads {self.threads:2d} (all OS threads {self.os_threads:2d}), "
            f"rss {self.rss:.1f} MiB"
        )


async def settle(baseline: Resources | None = None, timeout: float = 10.0) -> Resources:
    """Resources once threads on their way out have gone: down to ``baseline``, or (without one)
    unchanged for a second. Bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    current = Resources.now()
    stable_since = time.monotonic()
    while time.monotonic() < deadline:
        if baseline is not None and current.fds <= baseline.fds and current.threads <= baseline.threads:
            break
        if baseline is None and time.monotonic() - stable_since >= 1.0:
            break
        await asyncio.sleep(0.1)
        new = Resources.now()
        if (new.fds, new.threads) != (current.fds, current.threads):
            stable_since = time.monotonic()
        current = new
    return current


# -- set-up -----------------------------------------------------------------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    tmp: Path
    engine_url: str
    workspace: Path
    config: Path
    registry: ProfileRegistry
    state: Path  # SANDBOX_STATE_DIR of every CLI run: private, short (the warm server's socket lives there)
    warm: WarmServer | None = None  # the benchmark's own, while the CLI phases run

    def evidence(self, name: str) -> Path:
        return self.tmp / f"{name}.jsonl"

    def orchestrator(self, evidence: Path) -> Orchestrator:
        return build_orchestrator(
            self.config,
            workspace=self.workspace,
            evidence_path=evidence,
            backend=DockerBackend(),
            profiles=self.registry,
        )


def our_containers(api: Any) -> list[dict[str, Any]]:
    """Containers with our labels created by this process (owner label ``host:pid:start``)."""
    listed = api.containers(all=True, filters={"label": f"{LABEL_MANAGED_BY}={MANAGED_BY}"})
    return [c for c in listed if (c["Labels"].get(LABEL_OWNER) or "").split(":")[1:2] == [str(os.getpid())]]


def raw_api(url: str) -> Any:
    import docker  # type: ignore[import-untyped]  # noqa: PLC0415 - the bare side's own client

    return docker.APIClient(base_url=url, version="auto", timeout=60)


def request(profile: str) -> dict[str, Any]:
    return {"tool": "shell_exec", "argv": ["true"], "profile": profile}


# -- phase: in process ----------------------------------------------------------------------------------


async def phase_inprocess(bench: Bench, runtime: str) -> float:
    profile_name = PROFILES[runtime]
    profile: ResolvedProfile = bench.registry.resolve(profile_name)
    evidence = bench.evidence(f"inproc-{runtime}")
    orch = bench.orchestrator(evidence)
    api = raw_api(bench.engine_url)
    failures: list[str] = []
    raw = request(profile_name)

    async def pipeline() -> None:
        result = await orch.execute(raw, workspace=bench.workspace)
        if not result.ok:
            failures.append(f"pipeline: exit {result.outcome.exit_code} {result.error}")

    def bare_once() -> None:
        # exactly what the backend would send for this request, driven straight through the SDK
        spec = launch_spec(new_execution_id(), parse_request(raw), profile, bench.workspace)
        config = container_config(spec, etc_dir=etc_directory())
        created = api.create_container_from_config(config, name=f"bench-{spec.execution_id}")
        container_id = created["Id"]
        try:
            api.start(container_id)
            status = api.wait(container_id, timeout=None)["StatusCode"]
            if status != 0:
                failures.append(f"bare: exit {status}")
        finally:
            api.remove_container(container_id, force=True, v=True)

    async def bare() -> None:
        bare_once()  # blocking on purpose: the bare SDK, nothing around it (the loop is idle meanwhile)

    try:
        a, b = await interleave(bench.args.runs, bench.args.warmup, pipeline, bare)
    finally:
        await orch.aclose()
    ratio = side_by_side(
        f"in process, {runtime} (profile {profile_name})", "A execute()", a, "B docker SDK", b, TARGET_INPROC
    )
    report = verify(evidence)
    left = our_containers(api)
    api.close()
    print(
        f"    evidence {'verifies' if report.ok else 'DOES NOT VERIFY'} ({report.records} records); "
        f"our containers left: {len(left)}; failures: {len(failures)} {failures[:3] if failures else ''}"
    )
    return ratio


# -- phase: CLI -----------------------------------------------------------------------------------------------


def docker_run_argv(docker: str, profile: ResolvedProfile, workspace: Path, seccomp_file: Path) -> list[str]:
    argv = [docker, "run", "--rm", "--runtime", profile.runtime, "--network", "none"]
    if profile.read_only_root:
        argv.append("--read-only")
    for tmpfs in profile.tmpfs:
        argv += ["--tmpfs", f"{tmpfs.path}:{tmpfs.mount_options()}"]
    argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--security-opt", f"seccomp={seccomp_file}"]
    argv += ["--pids-limit", str(profile.pids_limit)]
    argv += ["--memory", str(profile.memory_bytes), "--memory-swap", str(profile.memory_swap_bytes)]
    argv += ["--cpus", f"{profile.nano_cpus / 1e9:g}"]
    argv += ["--ulimit", f"nofile={profile.nofile}:{profile.nofile}"]
    argv += ["--ulimit", f"fsize={profile.fsize_bytes}:{profile.fsize_bytes}"]
    argv += ["--user", profile.user, "--log-driver", "none"]
    mode = "ro" if profile.workspace.mode == "ro" else "rw"
    argv += ["-v", f"{workspace}:{profile.workspace.container_path}:{mode}", "-w", profile.workspace.container_path]
    argv += ["--entrypoint", "", profile.image, "true"]
    return argv


def timed(argv: list[str], env: dict[str, str], *, expect: int | None = 0) -> float:
    began = time.perf_counter()
    # stdin from /dev/null, as an agent's or a CI job's: a terminal on stdin makes sandboxctl run cold
    done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, capture_output=True, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - began
    if expect is not None and done.returncode != expect:
        raise RuntimeError(f"{argv[:3]}... exited {done.returncode}: {done.stderr.decode(errors='replace')[-400:]}")
    return elapsed


def cli_env(bench: Bench, *, as_is: bool = False, warm: bool = False, **extra: str) -> dict[str, str]:
    """The CLI's environment, with the benchmark's private state dir. Cold (SANDBOXCTL_WARM=0) unless
    ``warm``: then a command goes to the benchmark's warm server, started with this very environment.
    Unless ``as_is`` (or --no-bytecode-cache), Python may cache bytecode (in a private prefix): an
    installed tool runs from cached bytecode, while with PYTHONDONTWRITEBYTECODE=1 (set in some
    sandboxes) an editable install compiles every module of the project at each start."""
    env = {**os.environ, "DOCKER_HOST": bench.engine_url, "SANDBOX_STATE_DIR": str(bench.state)}
    if warm:
        env.pop(WARM_ENV, None)
    else:
        env[WARM_ENV] = "0"
    if not (as_is or bench.args.no_bytecode_cache):
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bench.tmp / "pycache")
    env.update(extra)
    return env


def is_warm_server(pid: int) -> bool:
    """Whether ``pid`` is (still) a warm server process (not a zombie, not a reused pid)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"orchestrator.cli.warm.server" in cmdline


@dataclass
class WarmServer:
    """The benchmark's own warm server (see warm_server)."""

    env: dict[str, str]  # what it was started with: exactly the warm CLI runs' environment
    pid: int | None = None

    def sandboxctl_warm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [SANDBOXCTL, "warm", *args], env=self.env, capture_output=True, text=True, cwd=ROOT, check=False, timeout=90
        )

    def status(self) -> dict[str, Any]:
        """``sandboxctl warm status --json``; {"running": false} when none answers."""
        try:
            status = json.loads(self.sandboxctl_warm("status", "--json").stdout)
        except (ValueError, subprocess.TimeoutExpired):
            return {"running": False}
        return status if isinstance(status, dict) else {"running": False}

    def served(self) -> int | None:
        """Commands it has run so far; None when it does not answer."""
        status = self.status()
        return int(status["served"]) if status.get("running") else None

    def check_served(self, before: int | None, expected: int, what: str) -> bool:
        """Whether it ran exactly ``expected`` commands since it had served ``before`` (printed either way)."""
        after = self.served()
        grown = None if before is None or after is None else after - before
        if grown == expected:
            print(f"    warm server served {grown} of the {expected} {what} (served {before} -> {after})")
            return True
        print(
            f"    !!! WARNING: the warm server served {'?' if grown is None else grown} of the {expected} {what} "
            f"(served {before} -> {after}; None: not answering): the others ran cold, the warm figures are INVALID"
        )
        with contextlib.suppress(OSError):
            for line in (Path(self.env["SANDBOX_STATE_DIR"]) / "warm.log").read_text().splitlines()[-5:]:
                print(f"    !!! warm.log: {line}")
        return False

    def stop(self) -> None:
        """``sandboxctl warm stop`` (it waits for the server to go); SIGTERM to its pid should it still run."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.sandboxctl_warm("stop")
        if self.pid is None:
            return
        deadline = time.monotonic() + 5.0
        while is_warm_server(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if is_warm_server(self.pid):
            print(f"warm server pid {self.pid} still runs after `sandboxctl warm stop`: SIGTERM")
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
        else:
            print(f"warm server pid {self.pid} stopped")


@contextlib.contextmanager
def warm_server(bench: Bench) -> Iterator[WarmServer]:
    """A warm server of the benchmark's own, in its private state dir, started with exactly the warm CLI
    runs' environment (a server refuses a client whose PYTHON* or locale variables differ from its own:
    the client then runs cold), and stopped at the end, also on an error or an interrupt."""
    server = WarmServer(cli_env(bench, warm=True))
    path = socket_path(server.env)
    if len(str(path).encode()) > 107:
        raise RuntimeError(f"{path}: too long for an AF_UNIX socket")
    try:
        started = server.sandboxctl_warm("start", "--idle-timeout", str(WARM_IDLE_TIMEOUT_S))
        status = server.status()
        if started.returncode != 0 or not status.get("running"):
            output = (started.stdout + started.stderr).strip()[-400:]
            raise RuntimeError(f"sandboxctl warm start exited {started.returncode}: {output}")
        server.pid = int(status["pid"])
        print(f"warm server pid {server.pid} at {status['socket']} (the benchmark's own)")
        yield server
    finally:
        server.stop()


async def phase_cli(bench: Bench, runtime: str) -> dict[str, float | None]:
    """W/B and A/B (see the module's docstring); W/B is None when not every W run was served warm."""
    docker = shutil.which("docker")
    if docker is None:
        print("  CLI: no docker CLI on PATH: skipped")
        return {}
    server = bench.warm
    if server is None:
        raise RuntimeError("the CLI phase needs the benchmark's warm server")
    profile_name = PROFILES[runtime]
    profile = bench.registry.resolve(profile_name)
    seccomp_file = bench.tmp / f"seccomp-{runtime}.json"
    seccomp_file.write_text(profile.seccomp_json)  # the same resolved profile the orchestrator sends inline
    evidence = bench.evidence(f"cli-{runtime}")
    cold, warm = cli_env(bench), cli_env(bench, warm=True)
    ours = [SANDBOXCTL, "run", "--config", str(bench.config), "--evidence", str(evidence),
            "--workspace", str(bench.workspace), "--profile", profile_name, "--", "true"]  # fmt: skip
    bare = docker_run_argv(docker, profile, bench.workspace, seccomp_file)

    async def w() -> None:
        timed(ours, warm)

    async def a() -> None:
        timed(ours, cold)

    async def b() -> None:
        timed(bare, cold)

    runs, warmup = bench.args.runs, bench.args.warmup
    served_before = server.served()
    sw, sa, sb = await interleave(runs, warmup, w, a, b)
    print(f"  CLI, {runtime}  ({runs} interleaved rounds of W, A and B, the order changing each round)")
    print_samples(
        [
            ("W sandboxctl run -- true, warm server", sw),
            ("A sandboxctl run -- true, cold", sa),
            (f"B docker run --rm ({Path(docker)})", sb),
        ]
    )
    served = server.check_served(served_before, warmup + runs, f"W runs ({warmup} warm-up + {runs} measured)")
    w_ratio, w_line = pairwise("W/B", sw, sb)
    a_ratio, a_line = pairwise("A/B", sa, sb)
    if served:
        print(f"    {w_line}  -> {verdict(w_ratio, TARGET_CLI)} (sandboxctl run with its warm server)")
    else:
        print(f"    {w_line}  -> INVALID (not every W run was served warm): no verdict")
    print(f"    {a_line}  -> cold start (no warm server), not a target")
    report = verify(evidence)
    print(f"    evidence {'verifies' if report.ok else 'DOES NOT VERIFY'} ({report.records} records)")
    return {f"CLI {runtime} warm": w_ratio if served else None, f"CLI {runtime} cold": a_ratio}


@dataclass(frozen=True)
class ImportRow:
    cumulative_us: int
    self_us: int
    module: str
    depth: int
    parent: str | None


def importtime(argv: list[str], env: dict[str, str]) -> list[ImportRow]:
    """Every import of a Python command, from ``-X importtime`` (children are printed before parents)."""
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=ROOT, check=False)
    parsed = []
    for line in done.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| ( *)(\S+)", line)
        if m:
            parsed.append((int(m.group(2)), int(m.group(1)), m.group(4), (len(m.group(3)) - 1) // 2))
    rows: list[ImportRow] = []
    stack: list[tuple[int, str]] = []  # walking backwards, the enclosing imports
    for cumulative, own, module, depth in reversed(parsed):
        while stack and stack[-1][0] >= depth:
            stack.pop()
        rows.append(ImportRow(cumulative, own, module, depth, stack[-1][1] if stack else None))
        stack.append((depth, module))
    rows.reverse()
    return rows


def by_package(rows: list[ImportRow], *, own: bool) -> dict[str, int]:
    """µs per top-level package: ``own`` sums its modules' own time (exclusive); otherwise its
    cumulative time each time it is entered from another package (its dependencies included, e.g.
    docker's requests and urllib3)."""
    totals: dict[str, int] = {}
    for row in rows:
        top = row.module.split(".")[0]
        if own:
            totals[top] = totals.get(top, 0) + row.self_us
        elif row.parent is None or row.parent.split(".")[0] != top:
            totals[top] = totals.get(top, 0) + row.cumulative_us
    return totals


def print_imports(title: str, rows: list[ImportRow], n: int) -> None:
    total = sum(r.cumulative_us for r in rows if r.depth == 0)
    print(f"    {title}: {total / 1000:.0f} ms of imports (under -X importtime)")
    for own, label in ((True, "own time"), (False, "with its dependencies")):
        packages = sorted(by_package(rows, own=own).items(), key=lambda kv: -kv[1])[:n]
        listing = ", ".join(f"{name} {us / 1000:.0f}" for name, us in packages)
        print(f"      by package, {label}: {listing} (ms)")
    heaviest = sorted(rows, key=lambda r: -r.self_us)[:n]
    print(
        "      heaviest modules, own time: "
        + ", ".join(f"{r.module} {r.self_us / 1000:.1f}" for r in heaviest)
        + " (ms)"
    )


async def phase_startup(bench: Bench) -> bool:
    """Where CLI time goes. False when the warm server did not serve every warm start-up run."""
    runs = max(5, bench.args.runs // 2)
    env = cli_env(bench)
    warm_env = cli_env(bench, warm=True)
    python = sys.executable
    evidence = bench.evidence("startup")
    unreachable = cli_env(bench, DOCKER_HOST="unix:///nonexistent/sandbox-orchestrator-bench.sock")
    run_args = ["run", "--config", str(bench.config), "--evidence", str(evidence), "--workspace", str(bench.workspace)]
    run_true = [SANDBOXCTL, *run_args, "--", "true"]
    check_true = [SANDBOXCTL, "check", "--config", str(bench.config), "--", "true"]
    warm_cases: list[tuple[str, list[str], dict[str, str], int | None]] = []
    if bench.warm is not None:
        warm_cases = [
            ("sandboxctl --version, warm server", [SANDBOXCTL, "--version"], warm_env, 0),
            ("sandboxctl check -- true (gate only), warm server", check_true, warm_env, 0),
        ]
    cases: list[tuple[str, list[str], dict[str, str], int | None]] = [
        ("python -c pass (interpreter)", [python, "-c", "pass"], env, 0),
        ("python -S -c pass", [python, "-S", "-c", "pass"], env, 0),
        ("sandboxctl --version", [SANDBOXCTL, "--version"], env, 0),
        ("sandboxctl check -- true (gate only)", check_true, env, 0),
        *warm_cases,
        (
            "sandboxctl run, up to the engine (unreachable)",
            run_true,
            unreachable,
            125,
        ),
        (
            "sandboxctl run -- true (whole)",
            run_true,
            env,
            0,
        ),
    ]
    if os.environ.get("PYTHONDONTWRITEBYTECODE") and not bench.args.no_bytecode_cache:
        cases.append(("sandboxctl run -- true, PYTHONDONTWRITEBYTECODE=1", run_true, cli_env(bench, as_is=True), 0))
    samples: dict[str, list[float]] = {name: [] for name, *_ in cases}
    served_before = bench.warm.served() if bench.warm is not None else None
    for _name, argv, case_env, expect in cases:  # warm: bytecode cached, files in the page cache
        timed(argv, case_env, expect=expect)
    for _ in range(runs):  # interleaved, like everything else
        for name, argv, case_env, expect in cases:
            samples[name].append(timed(argv, case_env, expect=expect))
    print(f"  CLI start-up ({runs} runs each, interleaved)")
    for name, values in samples.items():
        print(f"    {name:<52} p50 {ms(pct(values, 0.5))}   p95 {ms(pct(values, 0.95))}")
    served = True
    if bench.warm is not None:
        expected = len(warm_cases) * (1 + runs)
        served = bench.warm.check_served(served_before, expected, f"warm start-up runs (1 + {runs} per warm line)")

    run_argv = ["-m", "orchestrator.cli.main", *run_args, "--", "true"]
    print_imports(
        "import orchestrator.cli.main (what every sandboxctl command pays)",
        importtime([python, "-X", "importtime", "-c", "import orchestrator.cli.main"], env),
        8,
    )
    handler = (
        "import asyncio, signal, pathlib; import orchestrator.cli.run_cmd; "
        "from orchestrator.backends.docker import DockerBackend; "
        "from orchestrator.domain.errors import InputInvalid, OrchestratorError; "
        "from orchestrator.profiles import ProfileRegistry; "
        "from orchestrator.pipeline.factory import build_orchestrator; "
        "from orchestrator.pipeline.reaper import collect_orphans; import docker"
    )
    print_imports(
        "the run handler's imports (+ docker, imported at the first engine call)",
        importtime([python, "-X", "importtime", "-c", handler], env),
        12,
    )
    print_imports(
        "a real `sandboxctl run -- true` (everything it imports, in order of cost)",
        importtime([python, "-X", "importtime", *run_argv], env),
        12,
    )
    return served


# -- phase: concurrency ------------------------------------------------------------------------------------------


async def run_many(orch: Orchestrator, bench: Bench, raw: dict[str, Any], total: int, concurrency: int) -> list[float]:
    gate = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    failures: list[str] = []

    async def one() -> None:
        async with gate:
            began = time.perf_counter()
            try:
                result = await orch.execute(raw, workspace=bench.workspace)
            except Exception as exc:  # counted and shown, the run goes on
                failures.append(f"{type(exc).__name__}: {exc}")
                return
            latencies.append(time.perf_counter() - began)
            if not result.ok:
                failures.append(f"exit {result.outcome.exit_code} {result.error}")

    await asyncio.gather(*(one() for _ in range(total)))
    if failures:
        print(f"    {len(failures)} failed run(s), e.g. {failures[:3]}")
    return latencies


async def phase_concurrency(bench: Bench, runtime: str) -> None:
    profile_name = PROFILES[runtime]
    evidence = bench.evidence(f"concurrency-{runtime}")
    orch = bench.orchestrator(evidence)
    total, concurrency = bench.args.concurrent_runs, bench.args.concurrency
    raw = request(profile_name)
    try:
        await run_many(orch, bench, raw, min(concurrency, total), concurrency)  # warm-up
        began = time.perf_counter()
        latencies = await run_many(orch, bench, raw, total, concurrency)
        wall = time.perf_counter() - began
    finally:
        await orch.aclose()
    report = verify(evidence)
    print(f"  concurrency, {runtime}: {total} executions, {concurrency} at a time")
    print(
        f"    throughput {len(latencies) / wall:.2f} runs/s (wall {wall:.1f} s)   latency p50 "
        f"{ms(pct(latencies, 0.5))}   p95 {ms(pct(latencies, 0.95))}   max {ms(max(latencies))}"
    )
    print(f"    evidence {'verifies' if report.ok else 'DOES NOT VERIFY'} ({report.records} records)")


# -- phase: leaks -------------------------------------------------------------------------------------------------


async def phase_leaks(bench: Bench) -> bool:
    runs, concurrency = bench.args.leak_runs, bench.args.leak_concurrency
    evidence = bench.evidence("leaks")
    raw = request(PROFILES["runc"])
    before = await settle()  # what earlier phases started has wound down
    orch = bench.orchestrator(evidence)
    await run_many(orch, bench, raw, max(2 * concurrency, 10), concurrency)  # pools and connections warm
    warm = await settle()
    began = time.perf_counter()
    await run_many(orch, bench, raw, runs, concurrency)
    wall = time.perf_counter() - began
    after_runs = await settle(warm)
    await orch.aclose()
    closed = await settle(before)
    api = raw_api(bench.engine_url)
    left = our_containers(api)
    api.close()
    report = verify(evidence)
    print(f"  leaks: {runs} executions, {concurrency} at a time, in {wall:.1f} s")
    print(f"    before the orchestrator    {before}")
    print(f"    warm (after warm-up)       {warm}")
    print(f"    after {runs:>4} runs          {after_runs}")
    print(f"    after aclose()             {closed}")
    checks = {
        "containers with our labels left == 0": not left,
        "open fds back to warm baseline after the runs": after_runs.fds <= warm.fds,
        "threads back to warm baseline after the runs": after_runs.threads <= warm.threads,
        "open fds back to baseline after aclose()": closed.fds <= before.fds,
        "threads back to baseline after aclose()": closed.threads <= before.threads,
        "evidence verifies": report.ok,
    }
    for name, ok in checks.items():
        print(f"    {'ok  ' if ok else 'FAIL'} {name}")
    if left:
        print(f"    left: {[c['Names'] for c in left][:10]}")
    print(f"    evidence: {report.records} records")
    return all(checks.values())


# -- main ------------------------------------------------------------------------------------------------------------


def load_note() -> str:
    try:
        load1, load5, _ = os.getloadavg()
    except OSError:
        return "load unknown"
    return f"load average {load1:.2f} (1 min) {load5:.2f} (5 min) on {os.cpu_count()} cpus"


async def amain(args: argparse.Namespace) -> int:
    runtimes = ["runc", "runsc"] if args.runtime == "both" else [args.runtime]
    url = engine_url()  # as DockerBackend() finds it; the CLI runs get it as DOCKER_HOST (cli_env)
    tmp = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    workspace = tmp / "ws"
    workspace.mkdir()
    with contextlib.suppress(PermissionError):
        os.chown(workspace, SANDBOX_UID, SANDBOX_UID)
    config = tmp / "config.yaml"
    config.write_text(CONFIG)
    # the CLI runs' state dir, the warm server's socket in it: short (AF_UNIX paths: 107 bytes at most)
    state = Path(tempfile.mkdtemp(prefix="sbw-", dir="/tmp"))
    bench = Bench(args, tmp, url, workspace, config, ProfileRegistry(), state)
    backend = DockerBackend()
    try:
        info = await backend.info()
    finally:
        await backend.close()
    print(f"engine {info.engine_version} at {url}; runtimes {sorted(info.runtimes)}; {load_note()}")
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        how = (
            "as is"
            if args.no_bytecode_cache
            else "with bytecode cached in a private prefix (--no-bytecode-cache: as is)"
        )
        print(f"note: PYTHONDONTWRITEBYTECODE is set here; CLI runs are measured {how}")
    ok = True
    ratios: dict[str, float | None] = {}
    try:
        if not args.skip_inproc:
            for runtime in runtimes:
                ratios[f"in process {runtime}"] = await phase_inprocess(bench, runtime)
        if not (args.skip_cli and args.skip_startup):
            with warm_server(bench) as bench.warm:
                if not args.skip_cli:
                    for runtime in runtimes:
                        ratios.update(cli := await phase_cli(bench, runtime))
                        ok = ok and None not in cli.values()
                if not args.skip_startup:
                    ok = await phase_startup(bench) and ok
            bench.warm = None
        if not args.skip_concurrency:
            for runtime in runtimes:
                await phase_concurrency(bench, runtime)
        if not args.skip_leaks:
            ok = await phase_leaks(bench) and ok
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)
    figures: dict[str, object] = {k: None if v is None else round(v, 3) for k, v in ratios.items()}
    with contextlib.suppress(OSError):
        figures["load 1 min"], figures["load 5 min"] = (round(x, 2) for x in os.getloadavg()[:2])
    figures |= {"cpus": os.cpu_count(), "checks ok": ok}
    print(f"summary: {json.dumps(figures)}")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="interleaved rounds per side-by-side comparison")
    parser.add_argument("--warmup", type=int, default=3, help="discarded rounds before each comparison")
    parser.add_argument("--runtime", choices=["runc", "runsc", "both"], default="both")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--concurrent-runs", type=int, default=100)
    parser.add_argument("--leak-runs", type=int, default=500)
    parser.add_argument("--leak-concurrency", type=int, default=20, help="1 for strictly sequential runs")
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="run the CLI with the environment as it is (by default bytecode may be cached in a private prefix)",
    )
    for phase in ("inproc", "cli", "startup", "concurrency", "leaks"):
        parser.add_argument(f"--skip-{phase}", action="store_true")
    quick = {"runs": 2, "warmup": 1, "concurrency": 2, "concurrent_runs": 4, "leak_runs": 10, "leak_concurrency": 2}
    sys.exit(asyncio.run(amain(parse(parser, quick))))


if __name__ == "__main__":
    main()
