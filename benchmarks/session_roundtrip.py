"""Interactive sessions: the round trip of one byte, and the cost of opening one (issue 10).

* **round trip** -- (A) ``Sessions.write`` of one byte to a session running ``cat`` and its answer with
  that byte (``max_output_bytes: 1``: the answer goes as soon as it is there), against (B) ``docker exec
  -i`` of ``cat`` in a running container of the same image: one byte written to its stdin, read back from
  its stdout. A goes through everything a write_stdin is: the gate, its evidence records (the decision
  durable), the session's writer thread, the engine's attach stream both ways, redaction. Rounds
  interleaved (A B, B A); p50/p95 of each, the median of the pairwise ratios A/B. Target: <= 1.5.
* **open vs one-shot** -- opening a session of ``cat`` (first answer with ``yield_time_ms: 0``) and
  closing it, against ``execute()`` of ``true``, interleaved.

Not a test: it prints figures and a last line ``session summary: {...}`` (JSON).

    .venv/bin/python benchmarks/session_roundtrip.py [--rounds 200] [--opens 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from orchestrator.backends.docker import DockerBackend
from orchestrator.profiles import ProfileRegistry
from orchestrator.service.factory import build_orchestrator
from orchestrator.service.sessions import Sessions

TARGET = 1.5
CONFIG = "safety:\n  mode: allow\n  rules: []\napprovals:\n  provider: rules\n  default: approved\n"
SANDBOX_UID = 1000


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def line(name: str, samples: list[float]) -> str:
    p50, p95 = pct(samples, 0.5) * 1000, pct(samples, 0.95) * 1000
    return f"{name:<40} p50 {p50:8.2f} ms   p95 {p95:8.2f} ms   n={len(samples)}"


class DockerExecCat:
    """`docker exec -i <container> cat`: one byte in, the same byte out."""

    def __init__(self, image: str) -> None:
        self.name = f"so-bench-exec-{uuid.uuid4().hex[:8]}"
        subprocess.run(
            ["docker", "run", "-d", "--rm", "--name", self.name, "--network", "none", "--user", "1000:1000",
             "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges", image, "sleep", "3600"],
            check=True, capture_output=True,
        )  # fmt: skip
        self.proc = subprocess.Popen(
            ["docker", "exec", "-i", self.name, "cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
        )

    def round_trip(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        start = time.perf_counter()
        self.proc.stdin.write(b"x")
        got = self.proc.stdout.read(1)
        elapsed = time.perf_counter() - start
        assert got == b"x", got
        return elapsed

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)
        subprocess.run(["docker", "rm", "-f", self.name], capture_output=True, check=False)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--opens", type=int, default=10)
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="so-bench-session-"))
    workspace = tmp / "ws"
    workspace.mkdir()
    os.chown(workspace, SANDBOX_UID, SANDBOX_UID)
    (tmp / "config.yaml").write_text(CONFIG)
    orch = build_orchestrator(
        tmp / "config.yaml",
        workspace=workspace,
        evidence_path=tmp / "evidence.jsonl",
        backend=DockerBackend(),
        profiles=ProfileRegistry(),
    )
    sessions = Sessions(orch)
    image = ProfileRegistry().resolve("workspace-write").image
    baseline = DockerExecCat(image)
    summary: dict[str, float] = {}
    try:
        opened = await sessions.open({"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0}, workspace=workspace)
        sid = opened.session_id

        async def governed() -> float:
            start = time.perf_counter()
            reply = await sessions.write(
                {"tool": "write_stdin", "session_id": sid, "chars": ".", "yield_time_ms": 5000, "max_output_bytes": 1}
            )
            elapsed = time.perf_counter() - start
            assert reply.stdout == b".", reply
            return elapsed

        for _ in range(10):  # warm both
            await governed()
            baseline.round_trip()
        a: list[float] = []
        b: list[float] = []
        for i in range(args.rounds):
            if i % 2 == 0:
                a.append(await governed())
                b.append(baseline.round_trip())
            else:
                b.append(baseline.round_trip())
                a.append(await governed())
        ratio = statistics.median(x / y for x, y in zip(a, b, strict=True))
        print(f"round trip of one byte ({args.rounds} interleaved rounds, runc)")
        print(line("A write_stdin to a session of cat", a))
        print(line("B docker exec -i cat", b))
        print(f"{'median ratio A/B':<40} {ratio:.2f}   (target <= {TARGET})")
        summary["roundtrip/docker exec"] = round(ratio, 2)
        summary["roundtrip p50 ms"] = round(pct(a, 0.5) * 1000, 2)
        await sessions.close(sid, tenant="default", subject="anonymous")

        opens: list[float] = []
        one_shots: list[float] = []
        for i in range(args.opens):
            for side in ("open", "true") if i % 2 == 0 else ("true", "open"):
                start = time.perf_counter()
                if side == "open":
                    reply = await sessions.open(
                        {"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0}, workspace=workspace
                    )
                    opens.append(time.perf_counter() - start)
                    await sessions.close(reply.session_id, tenant="default", subject="anonymous")
                else:
                    result = await orch.execute({"tool": "shell_exec", "argv": ["true"]}, workspace=workspace)
                    assert result.ok
                    one_shots.append(time.perf_counter() - start)
        print(f"opening a session vs a one-shot run ({args.opens} each, interleaved)")
        print(line("open a session of cat (first answer)", opens))
        print(line("execute() of true", one_shots))
        open_ratio = statistics.median(opens) / statistics.median(one_shots)
        print(f"{'median open / one-shot':<40} {open_ratio:.2f}")
        summary["open/one-shot"] = round(open_ratio, 2)
    finally:
        baseline.close()
        await sessions.aclose()
        await orch.aclose()
        shutil.rmtree(tmp, ignore_errors=True)
    print("session summary: " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
