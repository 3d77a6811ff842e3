"""The MCP front door against the API and the library, side by side in one run (issue 23).

Every section interleaves its sides round by round (each side once a round, the order shuffled every round:
no side always first or always after the same one, and noise hits them all), after a few warm-up rounds; it
prints p50/p95 of each side and, for each comparison, the median of the pairwise ratios (one per round) beside
the ratio of the p50s. For the sections that start sandboxes, where the time goes, from the executions' own
evidence: inside the service (first record to last: gate, engine, end record) and outside it (transport,
protocol, client); the engine's start varies by tens of ms and swamps a ratio of a few rounds, the outside is
the front door's own cost (``*_extra_ms`` in the summary: MCP's outside minus the reference's).

* **http** — over Streamable HTTP to a real ``sandboxctl serve`` on loopback (its ``/mcp``), one SDK client
  session kept open per mode (``auto``: the 2026-07-28 envelope; ``legacy``: the initialize handshake):
  ``tools/call run {argv: ["true"]}`` against ``POST /v1/executions?wait=`` of the same request through the
  project's AsyncClient; ``tools/call exec_command {cmd: "true"}`` (a session whose answer comes once it
  exits, within ``yield_time_ms``) against ``POST /v1/sessions`` of the same through the client and against
  ``POST /v1/executions?wait=`` of ``shell_command "true"`` (the same ``bash -c``). Target: ≤ 1.10.
* **stdio** — ``sandboxctl mcp --config C`` (the service in that process), SDK client over stdio, both modes:
  ``tools/call run {argv: ["true"]}`` against the library's ``Orchestrator.execute()`` in this process
  (``open_orchestrator``, as benchmarks/service_overhead.py measures the service against). Target: ≤ 1.10.
* **write_stdin** — the round trip on an open ``cat`` session through MCP (each mode its own session) against
  ``client.write_stdin`` (its own session). A session answers before ``yield_time_ms`` once its output has
  been quiet for ``SETTLE_S`` (30 ms) or once the answer is full (``max_output_bytes``), so two variants,
  both sides asking the same: **settle** — ``"x\\n"``, the default cap: the echo, then 30 ms of quiet;
  **full** — ``"xyz\\n"`` with a cap of 4 bytes (``max_output_tokens: 1`` is 4 bytes): answered the moment
  the echo is there, the transport's own cost undiluted (shown, not judged). ``yield_time_ms`` 100
  (``--yield-ms``) on both. Target (settle): ≤ 1.2. An answer without its echo (a stall past the yield) is
  polled for the rest within the same sample, and counted.
* ``--sdk-floor``: the SDK's own cost of a call, the same server (``build_server``) over a controller that
  answers at once, in memory (``auto``: the SDK's direct dispatch; ``legacy``: its JSON-RPC streams) — what
  no transport can go below.

Configs: safety ``allow`` (only ``sudo`` denied), approvals ``none``; the HTTP service and the stdio server
each with a state and evidence of their own under the temp dir (printed; kept, with the evidence).
Not a test: it prints figures, and a machine-readable summary line at the end (``targets_met``: the judged
ratios: run over both transports, exec_command against POST /v1/sessions, write_stdin settle).

    .venv/bin/python benchmarks/mcp_overhead.py [--runs 30] [--rounds 100] [--warmup 3] [--yield-ms 100]
        [--skip-http] [--skip-stdio] [--skip-stdin] [--sdk-floor] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: tests.support
sys.path.insert(0, str(Path(__file__).resolve().parent))

from engine import docker_env
from mcp import Client
from options import parse
from service_overhead import TOKEN, pct, start_server, wait_up
from service_overhead import write_config as service_config

from orchestrator.client import AsyncClient
from orchestrator.domain.wire import ExecutionState, ExecutionView, SessionAnswer
from orchestrator.evidence import iter_records, verify
from orchestrator.mcp.controller import Controller
from orchestrator.mcp.server import Caller, build_server
from orchestrator.pipeline.factory import open_orchestrator
from orchestrator.service.sessions import SETTLE_S
from tests.support.mcp import http_client, stdio_parameters, text_of

Mode = Literal["auto", "legacy"]
MODES: tuple[Mode, ...] = ("auto", "legacy")
TARGET_CALL = 1.10
TARGET_STDIN = 1.2
#: exec_command of `true` answers when it exits: the yield only bounds a wait that ends sooner
EXEC_YIELD_MS = 10_000
SEED = 23  # the rounds' orders: the same every run
RUN = {"tool": "shell_exec", "argv": ["true"]}
SHELL = {"tool": "shell_command", "command": "true"}


def write_config(root: Path) -> Path:
    """The service benchmark's config (everything allowed but sudo, nobody to ask), under ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    return service_config(root)


# -- measuring -----------------------------------------------------------------------------------------
#: one call of a side: the execution it made (for its evidence), if any
Call = Callable[[], Awaitable[str | None]]


@dataclass
class Side:
    name: str
    call: Call
    samples: list[float] = field(default_factory=list)
    executions: list[str | None] = field(default_factory=list)  # the samples' executions, in the same order
    misses: int = 0  # a session answer without its whole echo (within yield_time_ms): polled until it came

    async def once(self) -> tuple[float, str | None]:
        started = time.perf_counter()
        execution = await self.call()
        return time.perf_counter() - started, execution


async def interleave(sides: list[Side], rounds: int, warmup: int) -> None:
    """``warmup`` rounds unrecorded, then ``rounds``: every side once a round, in an order of its own each round
    (shuffled, seeded: no side always first, nor always after the same one, whose leftovers it would meet)."""
    for _ in range(warmup):
        for side in sides:
            await side.once()
    order = random.Random(SEED)
    for _ in range(rounds):
        for side in order.sample(sides, len(sides)):
            took, execution = await side.once()
            side.samples.append(took)
            side.executions.append(execution)


def line(side: Side) -> str:
    p50, p95 = pct(side.samples, 0.5) * 1000, pct(side.samples, 0.95) * 1000
    missed = f"  ({side.misses} answers without the echo, polled for it)" if side.misses else ""
    return f"  {side.name:<46} p50 {p50:8.2f} ms  p95 {p95:8.2f} ms  n={len(side.samples)}{missed}"


def compare(a: Side, b: Side, target: float | None, key: str, summary: dict[str, Any]) -> None:
    """The median of the pairwise ratios a/b (the judged figure) and the ratio of the p50s."""
    ratio = statistics.median(x / y for x, y in zip(a.samples, b.samples, strict=True))
    of_p50 = pct(a.samples, 0.5) / pct(b.samples, 0.5)
    verdict = "" if target is None else f"  (target ≤ {target:.2f}: {'met' if ratio <= target else 'NOT met'})"
    print(f"  {a.name} / {b.name}: median ratio {ratio:.3f}, p50s {of_p50:.3f}{verdict}")
    summary[key] = round(ratio, 3)


def p50_ms(side: Side) -> float:
    return round(pct(side.samples, 0.5) * 1000, 2)


def outside(
    sides: list[Side], references: dict[str, tuple[Side, str]], evidence: list[Path], summary: dict[str, Any]
) -> None:
    """Where a call's time goes, from the executions' own evidence: inside the service (its first record to its
    last: the gate, the engine, the end record) and the rest, outside (the transport, the protocol, the client).
    The engine's start varies by tens of ms from run to run and dominates the inside; the outside is the front
    door's own cost. ``references``: a side's name -> the side its outside is compared with, the summary's key."""
    spans: dict[str, list[float]] = {}
    for path in evidence:
        for record in iter_records(path):
            if record.execution_id is None:
                continue
            at = datetime.fromisoformat(record.ts).timestamp()
            span = spans.setdefault(record.execution_id, [at, at])
            span[0], span[1] = min(span[0], at), max(span[1], at)
    rest: dict[str, list[float]] = {}
    print("  where the time goes (from the evidence: inside = first record to last), p50")
    for side in sides:
        inside = [spans[e][1] - spans[e][0] for e in side.executions if e is not None and e in spans]
        rest[side.name] = [
            took - (spans[e][1] - spans[e][0])
            for took, e in zip(side.samples, side.executions, strict=True)
            if e is not None and e in spans
        ]
        if rest[side.name]:
            print(
                f"    {side.name:<46} inside {pct(inside, 0.5) * 1000:7.1f} ms"
                f"  outside {pct(rest[side.name], 0.5) * 1000:6.2f} ms"
            )
    for name, (reference, key) in references.items():
        if rest.get(name) and rest.get(reference.name):
            extra = (pct(rest[name], 0.5) - pct(rest[reference.name], 0.5)) * 1000
            print(f"    {name} outside minus {reference.name} outside: {extra:+.2f} ms")
            summary[key] = round(extra, 2)


# -- the sides ------------------------------------------------------------------------------------------
def structured(result: Any) -> dict[str, Any]:
    if result.is_error:
        raise AssertionError(f"the tool call failed: {text_of(result)}")
    content = result.structured_content
    assert isinstance(content, dict), result
    return content


def mcp_run(client: Client) -> Call:
    async def call() -> str | None:
        got = structured(await client.call_tool("run", {"argv": ["true"]}))
        assert got["exit_code"] == 0, got
        return str(got["execution_id"])

    return call


def mcp_exec(client: Client) -> Call:
    async def call() -> str | None:
        got = structured(await client.call_tool("exec_command", {"cmd": "true", "yield_time_ms": EXEC_YIELD_MS}))
        assert got.get("running") is False and got.get("exit_code") == 0, got
        return str(got["session_id"])  # a session is an execution of that id

    return call


def api_submit(client: AsyncClient, request: dict[str, Any]) -> Call:
    async def call() -> str | None:
        view: ExecutionView = await client.submit(request, wait=60)
        assert view.state is ExecutionState.SUCCEEDED, view.error
        return view.execution_id

    return call


def api_open(client: AsyncClient) -> Call:
    async def call() -> str | None:
        answer: SessionAnswer = await client.open_session(
            {"tool": "exec_command", "cmd": "true", "yield_time_ms": EXEC_YIELD_MS}
        )
        assert not answer.running and answer.exit_code == 0, answer
        return answer.session_id

    return call


@contextlib.asynccontextmanager
async def mcp_over_http(url: str) -> AsyncIterator[dict[Mode, Client]]:
    async with contextlib.AsyncExitStack() as stack:
        yield {mode: await stack.enter_async_context(http_client(url, TOKEN, mode=mode)) for mode in MODES}


# -- the sections ---------------------------------------------------------------------------------------
async def bench_http(url: str, evidence: Path, runs: int, warmup: int, summary: dict[str, Any]) -> None:
    async with AsyncClient(url, TOKEN) as api, mcp_over_http(url) as mcp:
        run = {mode: Side(f"MCP run ({mode})", mcp_run(mcp[mode])) for mode in MODES}
        post = Side("POST /v1/executions?wait= (client)", api_submit(api, RUN))
        ex = {mode: Side(f"MCP exec_command ({mode})", mcp_exec(mcp[mode])) for mode in MODES}
        opened = Side("POST /v1/sessions (client)", api_open(api))
        shell = Side("POST /v1/executions?wait= bash -c (client)", api_submit(api, SHELL))
        sides = [run["auto"], run["legacy"], post, ex["auto"], ex["legacy"], opened, shell]
        await interleave(sides, runs, warmup)
    print(f"over Streamable HTTP: `true` ({runs} rounds, {len(sides)} sides interleaved)")
    for side in sides:
        print(line(side))
    for mode in MODES:
        compare(run[mode], post, TARGET_CALL, f"http_run_{mode}_ratio", summary)
    for mode in MODES:
        compare(ex[mode], opened, TARGET_CALL, f"http_exec_{mode}_vs_sessions_ratio", summary)
        compare(ex[mode], shell, None, f"http_exec_{mode}_vs_executions_ratio", summary)
    compare(opened, shell, None, "http_sessions_vs_executions_ratio", summary)
    references = {run[m].name: (post, f"http_run_{m}_extra_ms") for m in MODES} | {
        ex[m].name: (opened, f"http_exec_{m}_extra_ms") for m in MODES
    }
    outside(sides, references, [evidence], summary)
    summary["http_run_auto_p50_ms"] = p50_ms(run["auto"])
    summary["http_post_p50_ms"] = p50_ms(post)
    summary["http_exec_auto_p50_ms"] = p50_ms(ex["auto"])
    summary["http_sessions_p50_ms"] = p50_ms(opened)


async def bench_stdio(root: Path, runs: int, warmup: int, summary: dict[str, Any]) -> None:
    config = write_config(root)
    workspace = root / "inproc-workspace"
    workspace.mkdir()
    os.chown(workspace, 1000, 1000)
    env = {"SANDBOX_STATE_DIR": str(root / "state"), "DOCKER_HOST": docker_env()["DOCKER_HOST"]}
    orch = await open_orchestrator(config, evidence_path=root / "inproc-evidence.jsonl")
    try:
        async with contextlib.AsyncExitStack() as stack:
            mcp: dict[Mode, Client] = {}
            for mode in MODES:  # a server process each: `sandboxctl mcp --config C`
                params = stdio_parameters("--config", str(config), env=env)
                mcp[mode] = await stack.enter_async_context(Client(params, mode=mode))

            async def execute() -> str | None:
                result = await orch.execute(RUN, workspace=workspace)
                assert result.ok, result
                return result.authorization.execution_id

            run = {mode: Side(f"MCP run over stdio ({mode})", mcp_run(mcp[mode])) for mode in MODES}
            library = Side("execute() in process (library)", execute)
            sides = [run["auto"], run["legacy"], library]
            await interleave(sides, runs, warmup)
    finally:
        await orch.aclose()
    print(f"over stdio (sandboxctl mcp --config): `true` ({runs} rounds, {len(sides)} sides interleaved)")
    for side in sides:
        print(line(side))
    for mode in MODES:
        compare(run[mode], library, TARGET_CALL, f"stdio_run_{mode}_ratio", summary)
    evidence = [root / "evidence.jsonl", root / "inproc-evidence.jsonl"]
    outside(sides, {run[m].name: (library, f"stdio_run_{m}_extra_ms") for m in MODES}, evidence, summary)
    summary["stdio_run_auto_p50_ms"] = p50_ms(run["auto"])
    summary["library_p50_ms"] = p50_ms(library)
    summary["stdio_evidence_ok"] = verify(root / "evidence.jsonl").ok


#: a write to a session: (chars) -> the stdout of its answer
Write = Callable[[str], Awaitable[str]]


def echo_side(name: str, write: Write, chars: str) -> Side:
    """Writes ``chars`` to a session of ``cat`` until its echo is back: one answer, unless the echo took longer
    than ``yield_time_ms`` (then empty polls until it came, in the same sample, counted as a miss)."""
    side: Side

    async def call() -> str | None:
        got = await write(chars)
        if got != chars:
            side.misses += 1
            while len(got) < len(chars):
                got += await write("")
        assert got == chars, got
        return None

    side = Side(name, call)
    return side


@dataclass(frozen=True)
class Variant:
    name: str
    judged: bool  # the figure (target TARGET_STDIN); the other is shown for what it tells
    chars: str
    tokens: int | None  # MCP's max_output_tokens (None: the default cap, 64 KiB)
    max_bytes: int  # the client's max_output_bytes: the same cap


VARIANTS = (
    Variant("settle", True, "x\n", None, 65536),
    Variant("full", False, "xyz\n", 1, 4),
)


async def bench_stdin(url: str, rounds: int, warmup: int, yield_ms: int, summary: dict[str, Any]) -> None:
    async with AsyncClient(url, TOKEN) as api, mcp_over_http(url) as mcp:
        sessions: dict[Mode, str] = {}
        for mode in MODES:
            got = structured(await mcp[mode].call_tool("exec_command", {"cmd": "cat", "yield_time_ms": 0}))
            assert got["running"], got
            sessions[mode] = got["session_id"]
        own = (await api.open_session({"tool": "exec_command", "cmd": "cat", "yield_time_ms": 0})).session_id
        try:
            for variant in VARIANTS:

                def via_mcp(mode: Mode, v: Variant = variant) -> Write:
                    async def write(chars: str) -> str:
                        args: dict[str, Any] = {"session_id": sessions[mode], "chars": chars, "yield_time_ms": yield_ms}
                        if v.tokens is not None:
                            args["max_output_tokens"] = v.tokens
                        return str(structured(await mcp[mode].call_tool("write_stdin", args))["stdout"])

                    return write

                async def via_api(chars: str, v: Variant = variant) -> str:
                    answer = await api.write_stdin(own, chars, yield_time_ms=yield_ms, max_output_bytes=v.max_bytes)
                    return answer.stdout

                by_mcp = {mode: echo_side(f"MCP write_stdin ({mode})", via_mcp(mode), variant.chars) for mode in MODES}
                direct = echo_side("client.write_stdin (API)", via_api, variant.chars)
                sides = [by_mcp["auto"], by_mcp["legacy"], direct]
                await interleave(sides, rounds, warmup)
                if variant.tokens is None:
                    how = f"the default cap: the echo, then {SETTLE_S * 1000:g} ms of quiet"
                else:
                    how = f"a cap of {variant.max_bytes} bytes: answered with the echo (no target: for reference)"
                print(
                    f"write_stdin round trip, {variant.name}: {variant.chars!r} with {how}; yield_time_ms {yield_ms}"
                    f" ({rounds} rounds, {len(sides)} sides interleaved)"
                )
                for side in sides:
                    print(line(side))
                for mode in MODES:
                    target = TARGET_STDIN if variant.judged else None
                    compare(by_mcp[mode], direct, target, f"stdin_{variant.name}_{mode}_ratio", summary)
                summary[f"stdin_{variant.name}_auto_p50_ms"] = p50_ms(by_mcp["auto"])
                summary[f"stdin_{variant.name}_api_p50_ms"] = p50_ms(direct)
        finally:
            for sid in (*sessions.values(), own):  # the MCP sessions are the same token's: closed through the API
                with contextlib.suppress(Exception):
                    await api.close_session(sid)


async def bench_sdk_floor(rounds: int, warmup: int, summary: dict[str, Any]) -> None:
    """The SDK's cost of one tools/call: our server over a controller that answers at once, in memory."""
    now = datetime.now(UTC)
    done = ExecutionView.model_validate(
        {
            "execution_id": "ex-floor",
            "state": "succeeded",
            "tenant": "bench",
            "subject": "bench",
            "tool": "shell_exec",
            "created_at": now,
            "updated_at": now,
            "request": {},
            "result": {
                "ok": True,
                "execution_id": "ex-floor",
                "decision": "allow",
                "exit_code": 0,
                "stdout": "",
                "stderr": "",
                "truncated": False,
                "timed_out": False,
                "oom_killed": False,
                "duration_ms": 0,
                "side_effects": None,
                "error": None,
            },
        }
    )

    class Instant:
        """Only what ``run`` calls (a cast, not the whole Controller protocol)."""

        async def submit(self, raw: dict[str, Any], *, wait_s: float) -> ExecutionView:
            return done

        async def wait(self, execution_id: str, *, wait_s: float) -> ExecutionView:
            return done

    instant = cast(Controller, Instant())
    server = build_server("stdio", lambda ctx: Caller(instant, "floor"))
    async with contextlib.AsyncExitStack() as stack:
        sides = []
        for mode in MODES:
            client = await stack.enter_async_context(Client(server, mode=mode))
            sides.append(Side(f"in memory tools/call run ({mode})", mcp_run(client)))
        await interleave(sides, rounds, warmup)
    print(f"the SDK's own cost: tools/call run, in memory, a controller that answers at once ({rounds} rounds)")
    for side in sides:
        print(line(side))
        summary[f"sdk_floor_{side.name.split('(')[1].rstrip(')')}_p50_ms"] = p50_ms(side)


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30, help="rounds of the http and stdio sections")
    parser.add_argument("--rounds", type=int, default=100, help="rounds of the write_stdin section (per variant)")
    parser.add_argument("--warmup", type=int, default=3, help="unrecorded rounds before each section")
    parser.add_argument("--yield-ms", type=int, default=100, help="write_stdin's yield_time_ms (both sides)")
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--skip-stdio", action="store_true")
    parser.add_argument("--skip-stdin", action="store_true")
    parser.add_argument("--sdk-floor", action="store_true", help="also the SDK's own per-call cost, in memory")
    args = parse(parser, {"runs": 2, "rounds": 2, "warmup": 1})
    root = Path(tempfile.mkdtemp(prefix="mcp-bench-"))
    print(f"configs, state and evidence under {root}")
    summary: dict[str, Any] = {}
    if not (args.skip_http and args.skip_stdin):
        config = write_config(root / "http")
        server, url = start_server(config, root / "http")
        try:
            async with AsyncClient(url, TOKEN) as client:
                await wait_up(client)
            if not args.skip_http:
                await bench_http(url, root / "http" / "evidence.jsonl", args.runs, args.warmup, summary)
            if not args.skip_stdin:
                await bench_stdin(url, args.rounds, args.warmup, args.yield_ms, summary)
        finally:
            server.terminate()
            server.wait(timeout=60)
        summary["http_evidence_ok"] = verify(root / "http" / "evidence.jsonl").ok
    if not args.skip_stdio:
        await bench_stdio(root / "stdio", args.runs, args.warmup, summary)
    if args.sdk_floor:
        await bench_sdk_floor(max(args.rounds, 100), args.warmup, summary)
    targets = [v for k, v in summary.items() if k.endswith("_ratio") and ("_run_" in k or "_vs_sessions" in k)]
    stdin = [v for k, v in summary.items() if k.startswith("stdin_settle_") and k.endswith("_ratio")]
    summary["targets_met"] = all(r <= TARGET_CALL for r in targets) and all(r <= TARGET_STDIN for r in stdin)
    print("SUMMARY " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
