"""Workspace write budget: how far past it a sandbox gets before the kill lands, on runc and runsc.

Each round runs, per runtime, one execution that writes 2 GiB (16 MiB files) against a 32 MiB budget and
one that creates 200,000 empty files against a 2,000-entry budget, through the whole pipeline on the real
engine. It prints, per runtime, the overshoot (what the host's workspace holds past the budget) and the
run's duration, min / median / max. Not a test: it prints, it does not assert.

    .venv/bin/python benchmarks/workspace_budget.py [--rounds N] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from options import parse

from orchestrator.backends.docker import DockerBackend
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.profiles import ProfileRegistry

MIB = 1 << 20
BUDGET_BYTES = 32 * MIB
BUDGET_FILES = 2000
PROFILES = {"runc": "workspace-write", "runsc": "untrusted"}
POLICY = "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"
WRITE_BYTES = "for i in $(seq 128); do head -c 16M /dev/zero > /workspace/f$i || exit 3; done"
WRITE_FILES = 'python3 -c \'exec("for i in range(200000): open(\\"/workspace/f%06d\\" % i, \\"w\\").close()")\''


def host_tree(root: Path) -> tuple[int, int]:
    entries = size = 0
    for dirpath, dirnames, filenames in os.walk(root):
        entries += len(dirnames) + len(filenames)
        size += sum(os.lstat(os.path.join(dirpath, n)).st_size for n in filenames)
    return entries, size


async def one(base: Path, profiles: ProfileRegistry, profile: str, command: str) -> dict[str, Any]:
    workspace = Path(tempfile.mkdtemp(dir=base))
    os.chown(workspace, 1000, 1000)
    config = base / "policy.yaml"
    config.write_text(
        "safety: {mode: allow, denylist: [], rules: []}\napprovals: {provider: rules, default: approved}\n"
    )
    orch = build_orchestrator(
        config, workspace=workspace, evidence_path=base / "evidence.jsonl", backend=DockerBackend(), profiles=profiles
    )
    try:
        result = await orch.execute(
            {"tool": "shell_command", "command": command, "profile": profile}, workspace=workspace
        )
    finally:
        await orch.aclose()
    entries, size = host_tree(workspace)
    shutil.rmtree(workspace)
    out = result.to_json()
    return {
        "code": out["error"]["code"] if out["error"] else None,
        "bytes_over": size - BUDGET_BYTES,
        "entries_over": entries - BUDGET_FILES,
        "duration_s": out["duration_ms"] / 1000,
    }


def spread(values: list[float]) -> str:
    return f"{min(values):g} / {statistics.median(values):g} / {max(values):g}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    args = parse(parser, {"rounds": 1})
    base = Path(tempfile.mkdtemp(prefix="ws-budget-"))
    os.chmod(base, 0o755)
    directory = base / "profiles"
    directory.mkdir()
    for name in PROFILES.values():
        (directory / f"{name}-small.yaml").write_text(
            f"description: small budget\nextends: {name}\n"
            f"limits:\n  workspace_write_bytes: {BUDGET_BYTES}\n  workspace_write_files: {BUDGET_FILES}\n"
        )
    profiles = ProfileRegistry().with_dir(directory)
    seen: dict[str, list[dict[str, Any]]] = {}
    try:
        for round_ in range(args.rounds):
            for runtime, profile in PROFILES.items():
                for kind, command in (("bytes", WRITE_BYTES), ("files", WRITE_FILES)):
                    figures = await one(base, profiles, f"{profile}-small", command)
                    seen.setdefault(f"{runtime}.{kind}", []).append(figures)
                    print(f"round {round_ + 1} {runtime:>5} {kind:>5}: {figures}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary: dict[str, Any] = {}
    for key, runs in seen.items():
        over = [r["bytes_over"] / MIB if key.endswith("bytes") else r["entries_over"] for r in runs]
        unit = "MiB" if key.endswith("bytes") else "entries"
        durations = [r["duration_s"] for r in runs]
        codes = sorted({str(r["code"]) for r in runs})
        print(f"{key:>12}: over the budget (min/median/max) {spread(over)} {unit}; run {spread(durations)} s; {codes}")
        summary[key] = {"over_median": statistics.median(over), "over_max": max(over), "unit": unit, "codes": codes}
    print("SUMMARY " + json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main())
