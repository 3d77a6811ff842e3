"""The service against the library, side by side in one run.

* **run** — ``POST /v1/executions?wait=`` of ``true`` through the Python client (AsyncClient) against
  ``Orchestrator.execute()`` in process, interleaved (A B, then B A, ...), same config, same engine.
  Prints p50/p95 of each and the median of the pairwise ratios. Target (issue 8): ≤ 1.10.
* **sse** — a command prints the time it writes; the SSE client (the Python client's ``stream()``) notes
  when the chunk arrives: p50/p95/p99. Target: p95 ≤ 50 ms.
* **decisions** — requests the policy denies, from C concurrent clients for S seconds: decisions per
  second and latency p50/p95/p99. Target: ≥ 1,000/s with p95 ≤ 25 ms at 64 clients. Afterwards every
  decision must be in the evidence (one ``decision_made`` per answered request) and the chain verify.

The service is a real ``sandboxctl serve`` process on loopback (its own core); the clients run here.
Not a test: it prints figures, and a machine-readable summary line at the end.

    .venv/bin/python benchmarks/service_overhead.py [--runs 20] [--clients 64] [--seconds 10]
        [--skip-run] [--skip-decisions] [--skip-sse] [--sse-rounds 30] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import yaml
from engine import docker_env
from options import parse

from orchestrator.client import AsyncClient
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.wire import OutputChunk
from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline.factory import open_orchestrator

TOKEN = "bench-token-0123456789abcdef"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_service(root: Path) -> dict[str, object]:
    """The benchmarks' ``service:`` section: one agent token, the state under ``root``, no rate limit."""
    return {
        "tokens": [{"subject": "bench", "role": "agent", "tenants": ["bench"], "token": TOKEN}],
        "store": str(root / "state" / "service.db"),
        "workspaces": str(root / "workspaces"),
        "limits": {"rate_per_s": 1e9, "burst": 10**9},
    }


def write_config(root: Path) -> Path:
    config = {
        "safety": {"mode": "allow", "denylist": ["sudo"]},
        "approvals": {"provider": "none"},
        "evidence": {"path": str(root / "evidence.jsonl")},
        "service": bench_service(root),
    }
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def start_server(config: Path, root: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``sandboxctl serve`` of ``config`` on a free loopback port, and its URL (stop it: ``terminate()``)."""
    port = free_port()
    # a state dir of its own: the engine goes with it as DOCKER_HOST (the docker-host file is not in there)
    env = docker_env(SANDBOX_STATE_DIR=str(root / "state"))
    server = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli.main", "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    return server, f"http://127.0.0.1:{port}"


async def wait_up(client: AsyncClient) -> None:
    for _ in range(300):
        try:
            await client.list(limit=1)
            return
        except SandboxUnavailable:
            await asyncio.sleep(0.1)
    raise SystemExit("the service did not start")


async def bench_run(url: str, config: Path, root: Path, runs: int) -> dict[str, float]:
    request = {"tool": "shell_exec", "argv": ["true"], "tenant": "bench", "subject": "bench"}
    workspace = root / "inproc-workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    orch = await open_orchestrator(config, evidence_path=root / "inproc-evidence.jsonl")
    service: list[float] = []
    inproc: list[float] = []
    ratios: list[float] = []
    async with AsyncClient(url, TOKEN) as client:

        async def via_service() -> float:
            started = time.perf_counter()
            view = await client.submit(request, wait=60)
            assert view.state.value == "succeeded", view.error
            return time.perf_counter() - started

        async def in_process() -> float:
            started = time.perf_counter()
            result = await orch.execute(request, workspace=workspace)
            assert result.ok
            return time.perf_counter() - started

        for _ in range(2):  # warm both paths
            await via_service()
            await in_process()
        for i in range(runs):
            a, b = (
                (await via_service(), await in_process())
                if i % 2 == 0
                else reversed((await in_process(), await via_service()))
            )
            service.append(a)
            inproc.append(b)
            ratios.append(a / b)
    await orch.aclose()
    print(f"run `true` ({runs} pairs, interleaved)")
    print(f"  service POST ?wait=  p50 {pct(service, 0.5) * 1000:7.1f} ms  p95 {pct(service, 0.95) * 1000:7.1f} ms")
    print(f"  in process execute() p50 {pct(inproc, 0.5) * 1000:7.1f} ms  p95 {pct(inproc, 0.95) * 1000:7.1f} ms")
    ratio = statistics.median(ratios)
    print(f"  median ratio service/in-process: {ratio:.3f}  (target ≤ 1.10: {'met' if ratio <= 1.10 else 'NOT met'})")
    return {"run_ratio": round(ratio, 3), "run_service_p50_ms": round(pct(service, 0.5) * 1000, 1)}


async def bench_decisions(url: str, clients: int, seconds: float) -> tuple[dict[str, float], int]:
    body = json.dumps({"tool": "shell_command", "command": "sudo id"}).encode()
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    latencies: list[float] = []
    statuses: dict[int, int] = {}
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as http:
        stop_at = time.perf_counter() + seconds

        async def one_client() -> None:
            while time.perf_counter() < stop_at:
                started = time.perf_counter()
                async with http.post(url + "/v1/executions", data=body, headers=headers) as response:
                    await response.read()
                    statuses[response.status] = statuses.get(response.status, 0) + 1
                latencies.append(time.perf_counter() - started)

        began = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        elapsed = time.perf_counter() - began
    rate = len(latencies) / elapsed
    print(f"decisions (denied), {clients} clients, {elapsed:.1f} s: {rate:,.0f}/s; statuses {statuses}")
    print(
        f"  latency p50 {pct(latencies, 0.5) * 1000:.1f} ms  p95 {pct(latencies, 0.95) * 1000:.1f} ms"
        f"  p99 {pct(latencies, 0.99) * 1000:.1f} ms  (target ≥ 1000/s and p95 ≤ 25 ms:"
        f" {'met' if rate >= 1000 and pct(latencies, 0.95) <= 0.025 else 'NOT met'})"
    )
    return {"decisions_per_s": round(rate), "decisions_p95_ms": round(pct(latencies, 0.95) * 1000, 1)}, statuses.get(
        403, 0
    )


async def bench_sse(url: str, rounds: int) -> dict[str, float]:
    """The command sleeps (the stream is open by then), then prints the time it writes, in ns; the SSE
    client notes when the chunk arrives. Host and sandbox read the same clock."""
    delays: list[float] = []
    async with AsyncClient(url, TOKEN) as client:
        for _ in range(rounds):
            view = await client.submit({"tool": "shell_command", "command": "sleep 0.5; date +%s%N"})
            async for item in client.stream(view.execution_id):
                if isinstance(item, OutputChunk) and item.data.strip().isdigit():
                    delays.append(time.time() - int(item.data.strip()) / 1e9)
    print(f"SSE: first byte written → chunk at the client ({len(delays)} runs)")
    print(
        f"  p50 {pct(delays, 0.5) * 1000:.1f} ms  p95 {pct(delays, 0.95) * 1000:.1f} ms"
        f"  p99 {pct(delays, 0.99) * 1000:.1f} ms"
        f"  (target p95 ≤ 50 ms: {'met' if pct(delays, 0.95) <= 0.05 else 'NOT met'})"
    )
    return {"sse_p50_ms": round(pct(delays, 0.5) * 1000, 1), "sse_p95_ms": round(pct(delays, 0.95) * 1000, 1)}


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--skip-run", action="store_true")
    parser.add_argument("--skip-decisions", action="store_true")
    parser.add_argument("--skip-sse", action="store_true")
    parser.add_argument("--sse-rounds", type=int, default=30)
    args = parse(parser, {"runs": 2, "clients": 4, "seconds": 1.0, "sse_rounds": 2})
    root = Path(tempfile.mkdtemp(prefix="service-bench-"))
    config = write_config(root)
    server, url = start_server(config, root)
    summary: dict[str, float] = {}
    try:
        async with AsyncClient(url, TOKEN) as client:
            await wait_up(client)
        if not args.skip_run:
            summary.update(await bench_run(url, config, root, args.runs))
        if not args.skip_sse:
            summary.update(await bench_sse(url, args.sse_rounds))
        if not args.skip_decisions:
            figures, denied = await bench_decisions(url, args.clients, args.seconds)
            summary.update(figures)
    finally:
        server.terminate()
        server.wait(timeout=60)
    if not args.skip_decisions:
        evidence = root / "evidence.jsonl"
        report = verify(evidence)
        decided = sum(1 for r in iter_records(evidence, event="decision_made") if r.decision == "deny")
        print(
            f"evidence: {report.records} records, ok={report.ok}; deny decisions recorded {decided}, answered {denied}"
        )
        summary["evidence_ok"] = float(report.ok and decided >= denied)
    print("SUMMARY " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
