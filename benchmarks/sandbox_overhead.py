"""Sandbox overhead: the whole pipeline against the bare engine, side by side in one run.

Phases (each can be skipped):

* **in process** — ``Orchestrator.execute({"tool": "shell_exec", "argv": ["true"]})`` (gate, evidence,
  engine events, capture, teardown) against the *same* container settings driven straight through the
  docker SDK (``APIClient``: create from the backend's own raw config, start, wait, remove). Pairs are
  interleaved (A B, then B A, ...); prints p50/p95 of each and the median of the pairwise ratios A/B,
  for runc (profile ``workspace-write``) and runsc (``untrusted``). Target (issue 3): ≤ 1.15.
* **CLI** — ``sandboxctl run -- true`` against a bare ``docker run --rm`` with the same hardening flags,
  interleaved, DOCKER_HOST set for both. Target: ≤ 2.0. Plus where CLI time goes: interpreter start,
  ``sandboxctl --version``, ``sandboxctl run`` up to its first engine call (an unreachable engine), and
  ``-X importtime`` of a real ``sandboxctl run``.
* **concurrency** — N executions with C at a time (``asyncio.gather`` over one orchestrator):
  throughput and latency.
* **leaks** — many executions, then: containers with our labels left (must be 0), open fds and threads
  back to their baseline, evidence verifies.

Not a test: it prints figures (and exits 1 only if a leak check fails).

    .venv/bin/python benchmarks/sandbox_overhead.py [--runs 30] [--runtime runc|runsc|both]
        [--concurrency 20] [--concurrent-runs 100] [--leak-runs 500] [--leak-concurrency 20]
        [--skip-inproc] [--skip-cli] [--skip-startup] [--skip-concurrency] [--skip-leaks]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.backends.base import LABEL_MANAGED_BY, LABEL_OWNER, MANAGED_BY
from orchestrator.backends.docker import DockerBackend, discover_endpoint
from orchestrator.backends.docker.config import container_config
from orchestrator.domain.ids import new_execution_id
from orchestrator.domain.requests import parse_request
from orchestrator.evidence import verify
from orchestrator.profiles import ProfileRegistry, ResolvedProfile
from orchestrator.service.factory import build_orchestrator
from orchestrator.service.launch import launch_spec
from orchestrator.service.orchestrator import Orchestrator

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SANDBOXCTL = str(BIN / "sandboxctl")
PROFILES = {"runc": "workspace-write", "runsc": "untrusted"}
SANDBOX_UID = 1000
CONFIG = 'safety:\n  allowlist: ["true"]\napprovals:\n  provider: none\n'
TARGET_INPROC = 1.15
TARGET_CLI = 2.0


# -- figures ----------------------------------------------------------------------------------------


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def side_by_side(title: str, a_name: str, a: list[float], b_name: str, b: list[float], target: float) -> float:
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    ratio = statistics.median(ratios)
    print(f"  {title}  ({len(a)} interleaved pairs)")
    width = max(len(a_name), len(b_name))
    for name, samples in ((a_name, a), (b_name, b)):
        figures = f"p50 {ms(pct(samples, 0.5))}   p95 {ms(pct(samples, 0.95))}   min {ms(min(samples))}"
        print(f"    {name:<{width}}  {figures}")
    verdict = "meets" if ratio <= target else "MISSES"
    print(
        f"    median ratio A/B {ratio:.3f}  (p25 {pct(ratios, 0.25):.3f}, p75 {pct(ratios, 0.75):.3f}; "
        f"median difference {ms(statistics.median(x - y for x, y in zip(a, b, strict=True))).strip()})"
        f"  -> {verdict} target <= {target}"
    )
    return ratio


async def interleave(
    runs: int, warmup: int, a: Callable[[], Awaitable[None]], b: Callable[[], Awaitable[None]]
) -> tuple[list[float], list[float]]:
    """A and B alternately (A B, B A, A B, ...): drift and order effects hit both sides alike."""
    for _ in range(warmup):
        await a()
        await b()
    times: dict[str, list[float]] = {"a": [], "b": []}
    for i in range(runs):
        order = (("a", a), ("b", b)) if i % 2 == 0 else (("b", b), ("a", a))
        for key, fn in order:
            began = time.perf_counter()
            await fn()
            times[key].append(time.perf_counter() - began)
    return times["a"], times["b"]


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
        created = api.create_container_from_config(container_config(spec), name=f"bench-{spec.execution_id}")
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
    done = subprocess.run(argv, env=env, capture_output=True, cwd=ROOT, check=False)
    elapsed = time.perf_counter() - began
    if expect is not None and done.returncode != expect:
        raise RuntimeError(f"{argv[:3]}... exited {done.returncode}: {done.stderr.decode(errors='replace')[-400:]}")
    return elapsed


def cli_env(bench: Bench, *, as_is: bool = False, **extra: str) -> dict[str, str]:
    """The CLI's environment. Unless ``as_is`` (or --no-bytecode-cache), Python may cache bytecode (in a
    private prefix): an installed tool runs from cached bytecode, while with PYTHONDONTWRITEBYTECODE=1
    (set in some sandboxes) an editable install compiles every module of the project at each start."""
    env = {**os.environ, "DOCKER_HOST": bench.engine_url, "SANDBOX_STATE_DIR": str(bench.tmp / "state")}
    if not (as_is or bench.args.no_bytecode_cache):
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(bench.tmp / "pycache")
    env.update(extra)
    return env


async def phase_cli(bench: Bench, runtime: str) -> float:
    docker = shutil.which("docker")
    if docker is None:
        print("  CLI: no docker CLI on PATH: skipped")
        return float("nan")
    profile_name = PROFILES[runtime]
    profile = bench.registry.resolve(profile_name)
    seccomp_file = bench.tmp / f"seccomp-{runtime}.json"
    seccomp_file.write_text(profile.seccomp_json)  # the same resolved profile the orchestrator sends inline
    evidence = bench.evidence(f"cli-{runtime}")
    env = cli_env(bench)
    ours = [SANDBOXCTL, "run", "--config", str(bench.config), "--evidence", str(evidence),
            "--workspace", str(bench.workspace), "--profile", profile_name, "--", "true"]  # fmt: skip
    bare = docker_run_argv(docker, profile, bench.workspace, seccomp_file)

    async def a() -> None:
        timed(ours, env)

    async def b() -> None:
        timed(bare, env)

    sa, sb = await interleave(bench.args.runs, bench.args.warmup, a, b)
    ratio = side_by_side(
        f"CLI, {runtime}", "A sandboxctl run -- true", sa, f"B docker run --rm ({Path(docker)})", sb, TARGET_CLI
    )
    report = verify(evidence)
    print(f"    evidence {'verifies' if report.ok else 'DOES NOT VERIFY'} ({report.records} records)")
    return ratio


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


async def phase_startup(bench: Bench) -> None:
    runs = max(5, bench.args.runs // 2)
    env = cli_env(bench)
    python = sys.executable
    evidence = bench.evidence("startup")
    unreachable = cli_env(bench, DOCKER_HOST="unix:///nonexistent/sandbox-orchestrator-bench.sock")
    run_args = ["run", "--config", str(bench.config), "--evidence", str(evidence), "--workspace", str(bench.workspace)]
    run_true = [SANDBOXCTL, *run_args, "--", "true"]
    cases: list[tuple[str, list[str], dict[str, str], int | None]] = [
        ("python -c pass (interpreter)", [python, "-c", "pass"], env, 0),
        ("python -S -c pass", [python, "-S", "-c", "pass"], env, 0),
        ("sandboxctl --version", [SANDBOXCTL, "--version"], env, 0),
        (
            "sandboxctl check -- true (gate only)",
            [SANDBOXCTL, "check", "--config", str(bench.config), "--", "true"],
            env,
            0,
        ),
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
    for _name, argv, case_env, expect in cases:  # warm: bytecode cached, files in the page cache
        timed(argv, case_env, expect=expect)
    for _ in range(runs):  # interleaved, like everything else
        for name, argv, case_env, expect in cases:
            samples[name].append(timed(argv, case_env, expect=expect))
    print(f"  CLI start-up ({runs} runs each, interleaved)")
    for name, values in samples.items():
        print(f"    {name:<52} p50 {ms(pct(values, 0.5))}   p95 {ms(pct(values, 0.95))}")

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
        "from orchestrator.service.factory import build_orchestrator; "
        "from orchestrator.service.reaper import collect_orphans; import docker"
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
    url = discover_endpoint().url
    tmp = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    workspace = tmp / "ws"
    workspace.mkdir()
    with contextlib.suppress(PermissionError):
        os.chown(workspace, SANDBOX_UID, SANDBOX_UID)
    config = tmp / "config.yaml"
    config.write_text(CONFIG)
    bench = Bench(args, tmp, url, workspace, config, ProfileRegistry())
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
    ratios: dict[str, float] = {}
    try:
        if not args.skip_inproc:
            for runtime in runtimes:
                ratios[f"in process {runtime}"] = await phase_inprocess(bench, runtime)
        if not args.skip_cli:
            for runtime in runtimes:
                ratios[f"CLI {runtime}"] = await phase_cli(bench, runtime)
        if not args.skip_startup:
            await phase_startup(bench)
        if not args.skip_concurrency:
            for runtime in runtimes:
                await phase_concurrency(bench, runtime)
        if not args.skip_leaks:
            ok = await phase_leaks(bench)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if ratios:
        print("summary: " + json.dumps({k: round(v, 3) for k, v in ratios.items()}) + f"; {load_note()}")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=30, help="interleaved pairs per side-by-side comparison")
    parser.add_argument("--warmup", type=int, default=3, help="discarded pairs before each comparison")
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
    args = parser.parse_args()
    sys.exit(asyncio.run(amain(args)))


if __name__ == "__main__":
    main()
