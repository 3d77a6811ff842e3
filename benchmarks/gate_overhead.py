"""Gate overhead: sanitize + intent + risk + policy + approval key, per request.

Runs the same typical requests through a 1,000-rule policy and through the built-in policy,
interleaved in one run (the machine is noisy), and prints p50/p95/p99 for each and their ratio.
Target (issue 2): p95 <= 0.2 ms with 1,000 rules. Not a test: it prints, it does not assert.

    .venv/bin/python benchmarks/gate_overhead.py [--rounds N]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Any

from options import parse

from orchestrator.domain.requests import Request, parse_request
from orchestrator.gate.config import SafetyConfig, default_safety_config
from orchestrator.gate.gate import Gate
from orchestrator.gate.policy import Policy, PolicySource

PROGRAMS = [
    "git",
    "make",
    "python3",
    "pytest",
    "npm",
    "node",
    "cargo",
    "go",
    "ls",
    "cat",
    "grep",
    "sed",
    "awk",
    "curl",
    "wget",
    "docker",
    "kubectl",
    "helm",
    "terraform",
    "rm",
    "cp",
    "mv",
    "tar",
    "zip",
    "ssh",
]


def thousand_rules() -> SafetyConfig:
    rules: list[dict[str, Any]] = []
    for i in range(1000):
        prog = PROGRAMS[i % len(PROGRAMS)]
        kind = i % 10
        if kind < 5:
            rules.append({"name": f"r{i}", "argv_prefix": f"{prog} sub{i}", "action": ["allow", "ask", "deny"][i % 3]})
        elif kind < 8:
            rules.append({"name": f"g{i}", "argv_glob": f"{prog} *--opt{i}*", "action": "deny"})
        elif kind == 8:
            rules.append({"name": f"p{i}", "tool": ["files"], "paths": [f"dir{i}/*"], "action": "deny"})
        else:
            rules.append({"name": f"t{i}", "tool": ["exec"], "argv_prefix": f"tool{i}", "action": "allow"})
    rules.append({"name": "critical", "risk_at_least": "critical", "action": "deny"})
    base = default_safety_config().model_dump()
    base["rules"] = rules
    return SafetyConfig.model_validate(base)


TYPICAL: list[dict[str, Any]] = [
    {"tool": "shell_exec", "argv": ["git", "status", "--short"]},
    {"tool": "shell_exec", "argv": ["ls", "-la", "src"]},
    {"tool": "shell", "command": ["pytest", "-q", "tests/unit"]},
    {"tool": "shell_command", "command": "python3 -m pytest -x -q"},
    {"tool": "shell_command", "command": "cat setup.py | grep version"},
    {"tool": "shell_command", "command": "rm -rf build && make -j2"},
    {"tool": "exec_command", "cmd": "npm test -- --watch=false"},
    {"tool": "shell_command", "command": "git diff HEAD~1 -- src/ > /tmp/patch.diff"},
    {"tool": "skill_exec", "skill": "lint", "argv": ["ruff", "check", "."]},
    {"tool": "shell_exec", "argv": ["sudo", "apt-get", "install", "x"]},
    {"tool": "file_write", "path": "src/app.py", "content": "print('hello')\n" * 20, "env": {"A": "b"}},
    {"tool": "apply_patch", "patch": "--- a/src/x.py\n+++ b/src/x.py\n@@ -1 +1 @@\n-a\n+b\n"},
    {"tool": "write_stdin", "session_id": "ex-1", "chars": "y\n"},
    {"tool": "shell_command", "command": "curl -fsSL http://localhost:1/x.sh | bash"},
]


def fixed_gate(policy: Policy) -> Gate:
    source = PolicySource.__new__(PolicySource)
    source.path = None
    source.last_error = None
    source._policy = policy
    return Gate(source)


QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3000)
    args = parse(parser, {"rounds": 100})
    requests: list[Request] = [parse_request(raw) for raw in TYPICAL]
    gates = {"1000-rule": fixed_gate(Policy(thousand_rules())), "built-in": fixed_gate(Policy(default_safety_config()))}
    samples: dict[str, list[float]] = {name: [] for name in gates}
    for gate in gates.values():  # warm-up: imports, parser, caches
        for req in requests:
            gate.evaluate(req)
    gc.collect()
    gc.disable()
    try:
        for _ in range(args.rounds):
            for req in requests:
                for name, gate in gates.items():
                    t0 = time.perf_counter_ns()
                    gate.evaluate(req)
                    samples[name].append((time.perf_counter_ns() - t0) / 1e6)
    finally:
        gc.enable()
    print(f"gate overhead per request (ms), {len(requests)} typical requests x {args.rounds} rounds, interleaved")
    print(f"{'policy':<10} {'p50':>8} {'p95':>8} {'p99':>8} {'mean':>8}")
    for name, values in samples.items():
        print(
            f"{name:<10} {pct(values, 0.5):8.4f} {pct(values, 0.95):8.4f} {pct(values, 0.99):8.4f} "
            f"{statistics.fmean(values):8.4f}"
        )
    a, b = samples["1000-rule"], samples["built-in"]
    print(f"ratio 1000-rule/built-in: p50 {pct(a, 0.5) / pct(b, 0.5):.2f}  p95 {pct(a, 0.95) / pct(b, 0.95):.2f}")
    p95 = pct(a, 0.95)
    print(f"target p95 <= 0.200 ms with 1,000 rules: {'met' if p95 <= 0.2 else 'NOT met'} ({p95:.4f} ms)")
    fresh = first_sight(gates["1000-rule"], max(1, args.rounds // 10))
    summary = {f"{name} {q} ms": round(pct(values, p), 4) for name, values in samples.items() for q, p in QUANTILES}
    summary |= {f"ratio 1000-rule/built-in {q}": round(pct(a, p) / pct(b, p), 2) for q, p in QUANTILES[:2]}
    summary |= {f"first sight 1000-rule {q} ms": round(pct(fresh, p), 4) for q, p in QUANTILES}
    summary["rounds"] = args.rounds
    print("SUMMARY " + json.dumps(summary))


def first_sight(gate: Gate, rounds: int) -> list[float]:
    """A shell string the gate has never seen (no analysis cache): the parse, the wrapper table, risk
    and policy all run. Each round makes every typical string new with a trailing comment."""
    strings = [raw["command"] for raw in TYPICAL if raw["tool"] == "shell_command"]
    samples: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for text in strings:
                request = parse_request({"tool": "shell_command", "command": f"{text} # {r}"})
                t0 = time.perf_counter_ns()
                gate.evaluate(request)
                samples.append((time.perf_counter_ns() - t0) / 1e6)
    finally:
        gc.enable()
    print(
        f"first sight of a string (no cache), 1000-rule: p50 {pct(samples, 0.5):.4f}  p95 {pct(samples, 0.95):.4f}"
        f"  p99 {pct(samples, 0.99):.4f} ms ({len(samples)} requests)"
    )
    return samples


if __name__ == "__main__":
    main()
