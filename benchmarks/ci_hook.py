"""A GitHub Actions step through the container hook against the same command in a bare ``docker run --rm`` of
the job's image, side by side in one run (Docker backend, the pool on: ``pool: {enabled: true}``, its defaults).

* **step** — the runner's ``run_script_step`` of a script ``true``: the hook file run by node exactly as the
  runner runs it (tests/support/github_runner.py), the controller deciding and running it in a fresh sandbox,
  against ``docker run --rm IMAGE bash -e SCRIPT`` of the same script, interleaved (A B, then B A, ...).
  Target (issue 22): median ratio ≤ 1.0.
* **job** — prepare → 10 steps → cleanup through the hook, against the same 10 scripts each in a bare
  ``docker run --rm``: wall time of each, and the ratio. The steps come back to back (a real runner does work
  of its own between them): each takes the sandbox the pool fills after the step before if it is ready by
  then, else starts its own cold (a claim never waits for a fill; docs/pool.md, "Sized by demand").
* **where a step's time goes** — from the steps' own evidence records (their timestamps): the gate, the
  workspace snapshot, the claim of a sandbox (or none: a cold start) and the begin record; the command
  in its pre-started sandbox until the engine reports its end; the teardown; the side-effect record and the
  end record; the rest is the hook's (node starting, the HTTP call, the answer).

The service is a real ``sandboxctl serve`` process on loopback. Not a test: it prints figures, and a
machine-readable summary line at the end.

    .venv/bin/python benchmarks/ci_hook.py [--runs 20] [--jobs 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import yaml
from engine import docker_cli, docker_env
from options import parse
from service_overhead import TOKEN, bench_service, pct, start_server, wait_up

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from orchestrator.client import AsyncClient
from orchestrator.evidence import iter_records
from tests.support.github_runner import Runner

IMAGE = "sandbox-orchestrator/default:latest"


#: the benchmarks' policy: every step of org/* allowed (the gate still reads each script), nobody to ask
SAFETY = {
    "mode": "ask",
    "denylist": ["sudo"],
    "rules": [{"name": "ci", "action": "allow", "complex": True, "ci": {"repository": "org/*"}}],
}


def write_config(root: Path, *, pool: bool = True) -> Path:
    config = {
        "safety": SAFETY,
        "approvals": {"provider": "none"},
        "caps": {"allowed_images": ["sandbox-orchestrator/*"]},
        "evidence": {"path": str(root / "evidence.jsonl")},
        "pool": {"enabled": pool},
        "service": bench_service(root),
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def bare(work: Path, script: Path) -> float:
    """The same script in a bare container of the job image, the work directory mounted as the runner's."""
    started = time.perf_counter()
    subprocess.run(
        [
            docker_cli(),
            "run",
            "--rm",
            "-v",
            f"{work}:/__w",
            "-w",
            "/__w",
            IMAGE,
            "bash",
            "-e",
            f"/__w/_temp/{script.name}",
        ],
        check=True,
        env=docker_env(),
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


async def hook_step(runner: Runner) -> tuple[float, Path]:
    payload = runner.script_step("true\n")
    script = Path(runner.work / "_temp" / Path(payload["args"]["entryPointArgs"][-1]).name)
    started = time.perf_counter()
    run = await runner.invoke(payload)
    elapsed = time.perf_counter() - started
    assert run.exit_code == 0, run.stderr
    return elapsed, script


#: a step's phases, between two of its evidence records
PHASES = (
    ("gate, snapshot, claim, begin record", "request_received", "execution_started"),
    ("command until the engine reports its end", "execution_started", "container_died"),
    ("teardown", "container_died", "container_destroyed"),
    ("side effects, end record", "container_destroyed", "execution_finished"),
)


def phases(evidence: Path, steps: dict[str, float]) -> tuple[dict[str, list[float]], int]:
    """For the steps whose script is a key of ``steps`` (its time through the hook, s): each phase's times (ms),
    the rest (the hook's), and how many took a pre-started sandbox."""
    times: dict[str | None, dict[str, float]] = defaultdict(dict)
    script_of: dict[str, str] = {}
    pooled = 0
    for record in iter_records(evidence):
        data = record.data or {}
        times[record.execution_id][record.event] = datetime.fromisoformat(record.ts).timestamp() * 1000
        if record.event == "execution_started" and record.execution_id and isinstance(data.get("script"), dict):
            script_of[record.execution_id] = path = str(data["script"]["path"])
            if path in steps and "pooled" in data:
                pooled += 1
    out: dict[str, list[float]] = defaultdict(list)
    for execution_id, path in script_of.items():
        if path not in steps:
            continue
        seen = times[execution_id]
        inside = seen["execution_finished"] - seen["request_received"]
        for name, start, end in PHASES:
            out[name].append(seen[end] - seen[start])
        out["the hook: node, HTTP, the answer"].append(steps[path] * 1000 - inside)
    return out, pooled


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=3)
    parser.add_argument("--no-pool", action="store_true", help="the pool off: every step starts its sandbox cold")
    args = parse(parser, {"runs": 2, "jobs": 1})
    root = Path(tempfile.mkdtemp(prefix="ci-bench-"))
    config = write_config(root, pool=not args.no_pool)
    print(f"the pool {'off' if args.no_pool else 'on'}")
    server, url = start_server(config, root)
    summary: dict[str, float] = {}
    try:
        async with AsyncClient(url, TOKEN) as client:
            await wait_up(client)
        work = root / "workspaces" / "bench" / "runner-1"
        work.mkdir(parents=True)
        runner = Runner(url=url, token=TOKEN, work=work, name="runner-1")
        prepared = await runner.invoke(runner.prepare_job(IMAGE))
        assert prepared.exit_code == 0, prepared.stderr
        runner.own_work()
        hooked: list[float] = []
        plain: list[float] = []
        ratios: list[float] = []
        measured: dict[str, float] = {}  # a step's script in the sandbox → its time through the hook
        for _ in range(2):  # warm both
            _, script = await hook_step(runner)
            bare(work, script)
        for i in range(args.runs):
            if i % 2 == 0:
                a, script = await hook_step(runner)
                b = bare(work, script)
                measured[f"/__w/_temp/{script.name}"] = a
            else:
                _, script = await hook_step(runner)  # the script file, made like the runner makes it
                b = bare(work, script)
                a, mine = await hook_step(runner)
                measured[f"/__w/_temp/{mine.name}"] = a
            hooked.append(a)
            plain.append(b)
            ratios.append(a / b)
        await runner.invoke(runner.cleanup_job())
        ratio = statistics.median(ratios)
        print(f"step `true` ({args.runs} pairs, interleaved)")
        print(f"  hook run_script_step  p50 {pct(hooked, 0.5) * 1000:7.1f} ms  p95 {pct(hooked, 0.95) * 1000:7.1f} ms")
        print(f"  docker run --rm       p50 {pct(plain, 0.5) * 1000:7.1f} ms  p95 {pct(plain, 0.95) * 1000:7.1f} ms")
        print(f"  median ratio hook/docker run: {ratio:.3f}  (target ≤ 1.0: {'met' if ratio <= 1.0 else 'NOT met'})")
        summary.update(
            step_ratio=round(ratio, 3),
            step_hook_p50_ms=round(pct(hooked, 0.5) * 1000, 1),
            step_hook_p95_ms=round(pct(hooked, 0.95) * 1000, 1),
            step_bare_p50_ms=round(pct(plain, 0.5) * 1000, 1),
            step_bare_p95_ms=round(pct(plain, 0.95) * 1000, 1),
        )
        job_steps: dict[str, float] = {}

        job_times: list[float] = []
        bare_times: list[float] = []
        for j in range(args.jobs):
            name = f"runner-job-{j}"
            work = root / "workspaces" / "bench" / name
            work.mkdir(parents=True)
            runner = Runner(url=url, token=TOKEN, work=work, name=name)
            started = time.perf_counter()
            assert (await runner.invoke(runner.prepare_job(IMAGE))).exit_code == 0
            runner.own_work()
            scripts = []
            for _ in range(10):
                took, script = await hook_step(runner)
                scripts.append(script)
                job_steps[f"/__w/_temp/{script.name}"] = took
            assert (await runner.invoke(runner.cleanup_job())).exit_code == 0
            job_times.append(time.perf_counter() - started)
            started = time.perf_counter()
            for script in scripts:
                bare(work, script)
            bare_times.append(time.perf_counter() - started)
        job_ratio = statistics.median(a / b for a, b in zip(job_times, bare_times, strict=True))
        print(f"job: prepare → 10 steps → cleanup ({args.jobs} jobs)")
        print(f"  through the hook  median {statistics.median(job_times):6.2f} s")
        print(f"  10 x docker run   median {statistics.median(bare_times):6.2f} s")
        print(f"  median ratio: {job_ratio:.3f}")
        summary.update(
            job_ratio=round(job_ratio, 3),
            job_hook_s=round(statistics.median(job_times), 2),
            job_bare_s=round(statistics.median(bare_times), 2),
        )
    finally:
        server.terminate()
        server.wait(timeout=60)
    for title, steps in (("the measured steps", measured), ("the jobs' steps (back to back)", job_steps)):
        split, pooled = phases(root / "evidence.jsonl", steps)
        print(f"where a step's time goes, {title} ({pooled} of {len(steps)} from the pool), ms")
        for name, values in split.items():
            print(f"  {name:42s} p50 {pct(values, 0.5):6.1f}  p95 {pct(values, 0.95):6.1f}")
        key = "step" if steps is measured else "job_step"
        summary[f"{key}s_pooled"] = pooled
    print("SUMMARY " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
