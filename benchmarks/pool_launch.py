"""Pre-started sandboxes (issue 11): a governed run from a ready pool against a bare ``docker run``.

* **pooled vs bare**, per runtime (runc: profile workspace-write, runsc: untrusted) -- (A) ``execute()`` of
  ``true`` in process, its sandbox taken from a ready pool (the pool is refilled between rounds, untimed),
  against (B) ``docker run --rm`` of ``true`` with the same hardening (the CLI: what an ungoverned user
  runs). Rounds interleaved (A B, B A); p50/p95, the median of the pairwise ratios A/B. Targets: <= 0.35
  (runc), <= 0.25 (runsc). Beside them (C) the same ``execute()`` cold (no pool), for reference.
* **through the service** -- (A) ``POST /v1/executions?wait=`` of ``true`` to a ``sandboxctl serve`` with
  the pool on (its sandbox pre-started: half a second between rounds, untimed, lets the service refill)
  against (B) the bare ``docker run``, runc. Target: <= 0.5.
* **burst, sustained** (``pool_demand.py``) -- 20 executions at once of a key whose pool has grown to that
  demand (target: all answered within 1.5 s), and 60 at 20 at a time, pooled against cold (target: >= 2x).
* **leaks** -- 500 executions in a row with the default sizing (each key 1-4 ready by demand): how many came
  from the pool, sandboxes of ours left on the engine after the pool closed (0), the process's open files and
  threads against before.
* **served twice** -- from the evidence's engine records: sandboxes that ran more than one command (0).

Not a test: it prints figures and a last line ``pool summary: {...}`` (JSON).

    .venv/bin/python benchmarks/pool_launch.py [--runs 20] [--runtime runc|runsc|both] [--burst 20]
        [--sustained-runs 60] [--leak-runs 500] [--quick]

The engine is the one ``DockerBackend()`` finds (``benchmarks/engine.py``): the bare ``docker run`` and the
service get it as DOCKER_HOST, whatever the calling shell has.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import docker_cli, docker_env
from options import parse
from pool_demand import demand_pool, measure_demand
from sandbox_overhead import docker_run_argv, open_fds, os_threads, pct, timed
from service_overhead import free_port, wait_up

from orchestrator.backends.docker import DockerBackend
from orchestrator.client import AsyncClient
from orchestrator.evidence import iter_records
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import Orchestrator
from orchestrator.profiles import ProfileRegistry

PROFILES = {"runc": "workspace-write", "runsc": "untrusted"}
SERVICE_TARGET = 0.5
TOKEN = "pool-bench-token-0123456789abcdef"
TARGETS = {"runc": 0.35, "runsc": 0.25}
POLICY = "safety: {mode: allow, denylist: [], rules: []}\n"


def line(name: str, samples: list[float]) -> str:
    return f"    {name:<36} p50 {pct(samples, 0.5) * 1000:8.1f} ms   p95 {pct(samples, 0.95) * 1000:8.1f} ms"


def orchestrator(tmp: Path, name: str, pool: str, *, status_channel: bool = True) -> Orchestrator:
    config = tmp / f"{name}.yaml"
    config.write_text(POLICY + f"pool: {pool}\n")
    backend = DockerBackend(status_channel=status_channel)
    return build_orchestrator(config, evidence_path=tmp / f"{name}.jsonl", backend=backend, profiles=ProfileRegistry())


async def until_ready(o: Orchestrator, count: int, timeout: float = 60.0) -> None:
    assert o.pool is not None
    deadline = time.monotonic() + timeout
    while o.pool.describe()["ready"] < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pool did not fill: {o.pool.describe()}")
        await asyncio.sleep(0.02)


async def pooled_vs_bare(tmp: Path, workspace: Path, runtime: str, runs: int) -> dict[str, float]:
    profile = ProfileRegistry().resolve(PROFILES[runtime])
    seccomp = tmp / f"seccomp-{runtime}.json"
    seccomp.write_text(profile.seccomp_json)
    argv = docker_run_argv(docker_cli(), profile, workspace, seccomp)
    env = docker_env()  # the engine DockerBackend() finds, for the bare side's CLI
    pooled = orchestrator(tmp, f"pooled-{runtime}", "{enabled: true, per_key: 1, ttl_s: 600}")
    cold = orchestrator(tmp, f"cold-{runtime}", "{enabled: false}")
    # the same pool, its sandboxes' ends the engine's account only (no status channel from their init)
    engine_only = orchestrator(
        tmp, f"engine-only-{runtime}", "{enabled: true, per_key: 1, ttl_s: 600}", status_channel=False
    )
    request = {"tool": "shell_exec", "argv": ["true"], "profile": PROFILES[runtime]}
    try:

        async def from_pool() -> None:
            result = await pooled.execute(request, workspace=workspace)
            assert result.ok, result.to_json()

        async def cold_run() -> None:
            result = await cold.execute(request, workspace=workspace)
            assert result.ok, result.to_json()

        async def bare() -> None:
            await asyncio.to_thread(timed, argv, env)

        async def from_pool_engine_only() -> None:
            result = await engine_only.execute(request, workspace=workspace)
            assert result.ok, result.to_json()

        for o in (pooled, engine_only):  # the key's first run: the pool fills from here
            await o.execute(request, workspace=workspace)
        samples: list[list[float]] = [[], [], [], []]
        sides = (from_pool, bare, cold_run, from_pool_engine_only)

        async def ready() -> None:  # the fill happens between rounds, as it would between commands
            await until_ready(pooled, 1)
            await until_ready(engine_only, 1)
            await pooled.settle()  # the confirmation of the last run, off its caller's path, not in the next one's
            await engine_only.settle()

        for _ in range(2):  # warm every side
            for side in sides:
                await ready()
                await side()
        for i in range(runs):
            order = (0, 1, 2, 3) if i % 2 == 0 else (3, 2, 1, 0)
            for k in order:
                await ready()
                began = time.perf_counter()
                await sides[k]()
                samples[k].append(time.perf_counter() - began)
        a, b, c, d = samples
        ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
        print(f"  {runtime} (profile {PROFILES[runtime]}, {runs} interleaved rounds)")
        print(line("A execute() from a ready pool", a))
        print(line("B docker run --rm, same hardening", b))
        print(line("C execute() cold", c))
        print(line("D execute() from a pool, no status channel", d))
        target = TARGETS[runtime]
        print(f"    median ratio A/B {ratio:.2f} (target <= {target}: {'met' if ratio <= target else 'NOT met'})")
        cold_ratio = statistics.median(x / y for x, y in zip(c, b, strict=True))
        print(f"    median ratio C/B {cold_ratio:.2f} (cold, for reference)")
        channel = statistics.median(x / y for x, y in zip(a, d, strict=True))
        print(
            f"    median ratio A/D {channel:.2f} (the init's status channel against the engine's account; D p50"
            f" {pct(d, 0.5) * 1000:.1f} ms)"
        )
        return {
            f"pooled/bare {runtime}": round(ratio, 2),
            f"pooled p50 ms {runtime}": round(pct(a, 0.5) * 1000, 1),
            f"pooled without status channel p50 ms {runtime}": round(pct(d, 0.5) * 1000, 1),
            f"status channel/engine's account {runtime}": round(channel, 2),
        }
    finally:
        await pooled.aclose()
        await cold.aclose()
        await engine_only.aclose()


async def through_service(tmp: Path, workspace: Path, runs: int) -> dict[str, float]:
    root = tmp / "service"
    root.mkdir()
    config = root / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "safety": {"mode": "allow", "denylist": ["sudo"]},
                "approvals": {"provider": "none"},
                "evidence": {"path": str(root / "evidence.jsonl")},
                "pool": {"enabled": True, "per_key": 1},
                "service": {
                    "tokens": [{"subject": "bench", "role": "agent", "tenants": ["bench"], "token": TOKEN}],
                    "store": str(root / "state" / "service.db"),
                    "workspaces": str(root / "workspaces"),
                    "limits": {"rate_per_s": 1e9, "burst": 10**9},
                },
            }
        )
    )
    port = free_port()
    env = docker_env(SANDBOX_STATE_DIR=str(root / "state"))  # its own state dir: the engine as DOCKER_HOST
    argv = [sys.executable, "-m", "orchestrator.cli.main", "serve", "--config", str(config), "--port", str(port)]
    server = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
    profile = ProfileRegistry().resolve("workspace-write")
    seccomp = tmp / "seccomp-service.json"
    seccomp.write_text(profile.seccomp_json)
    bare_argv = docker_run_argv(docker_cli(), profile, workspace, seccomp)
    bare_env = docker_env()
    request = {"tool": "shell_exec", "argv": ["true"], "tenant": "bench", "subject": "bench"}
    try:
        async with AsyncClient(f"http://127.0.0.1:{port}", TOKEN) as client:
            await wait_up(client)

            async def via_service() -> float:
                began = time.perf_counter()
                view = await client.submit(request, wait=60)
                assert view.state.value == "succeeded", view.error
                return time.perf_counter() - began

            await via_service()  # the key's first run: cold; the service fills it from here
            a: list[float] = []
            b: list[float] = []
            for i in range(runs):
                await asyncio.sleep(0.5)  # untimed: the service refills the key
                if i % 2 == 0:
                    a.append(await via_service())
                    b.append(await asyncio.to_thread(timed, bare_argv, bare_env))
                else:
                    b.append(await asyncio.to_thread(timed, bare_argv, bare_env))
                    a.append(await via_service())
    finally:
        server.terminate()
        server.wait(timeout=60)
    ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
    print(f"  through the service, runc ({runs} interleaved rounds)")
    print(line("A POST ?wait= from the service's pool", a))
    print(line("B docker run --rm, same hardening", b))
    verdict = "met" if ratio <= SERVICE_TARGET else "NOT met"
    print(f"    median ratio A/B {ratio:.2f} (target <= {SERVICE_TARGET}: {verdict})")
    return {"service pooled/bare runc": round(ratio, 2)}


async def demand(tmp: Path, workspace: Path, size: int, runs: int) -> dict[str, float]:
    pooled = orchestrator(tmp, "demand-pooled", demand_pool(size))
    cold = orchestrator(tmp, "demand-cold", "{enabled: false}")
    try:
        return await measure_demand(
            pooled, cold, workspace, {"tool": "shell_exec", "argv": ["true"]}, size=size, runs=runs, fill_timeout_s=60
        )
    finally:
        await pooled.aclose()
        await cold.aclose()


async def leaks(tmp: Path, workspace: Path, runs: int) -> dict[str, float]:
    fds, threads = open_fds(), os_threads()
    o = orchestrator(tmp, "leaks", "{enabled: true}")
    request = {"tool": "shell_exec", "argv": ["true"]}
    try:
        for _ in range(runs):
            result = await o.execute(request, workspace=workspace)
            assert result.ok, result.to_json()
        assert o.pool is not None
        served = len(o.pool.served)
    finally:
        await o.aclose()
    await asyncio.sleep(1.0)  # threads of the closed backend end
    ids = {r.execution_id for r in iter_records(tmp / "leaks.jsonl")}
    check = DockerBackend()
    try:
        left = [s.name for s in await check.list_managed() if s.execution_id in ids]
    finally:
        await check.close()
    print(f"  {runs} runs in a row, default sizing: {served} from the pool; sandboxes left {len(left)};"
          f" open files {fds} -> {open_fds()}, threads {threads} -> {os_threads()}")  # fmt: skip
    return {
        "leak runs": runs,
        "leak runs from pool": served,
        "sandboxes left": len(left),
        "fds delta": open_fds() - fds,
    }


def served_twice(tmp: Path) -> int:
    """Sandboxes whose engine reported more than one death across every run of this benchmark."""
    deaths: Counter[str] = Counter()
    for evidence in tmp.glob("*.jsonl"):
        for record in iter_records(evidence):
            if record.event == "container_died" and record.data:
                deaths[str(record.data["sandbox_id"])] += 1
    return sum(1 for count in deaths.values() if count > 1)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--runtime", choices=["runc", "runsc", "both"], default="both")
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--sustained-runs", type=int, default=60)
    parser.add_argument("--leak-runs", type=int, default=500)
    args = parse(parser, {"runs": 2, "burst": 2, "sustained_runs": 4, "leak_runs": 4})
    tmp = Path(tempfile.mkdtemp(prefix="so-bench-pool-"))
    workspace = tmp / "ws"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    summary: dict[str, float] = {}
    try:
        print("pooled execute() vs a bare docker run")
        for runtime in ("runc", "runsc") if args.runtime == "both" else (args.runtime,):
            summary.update(await pooled_vs_bare(tmp, workspace, runtime, args.runs))
        summary.update(await through_service(tmp, workspace, args.runs))
        print("sized by demand")
        summary.update(await demand(tmp, workspace, args.burst, args.sustained_runs))
        summary.update(await leaks(tmp, workspace, args.leak_runs))
        summary["sandboxes served twice"] = served_twice(tmp)
        print(f"  sandboxes served twice (engine records): {summary['sandboxes served twice']}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("pool summary: " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
