"""Workspace scanner cost: time and peak memory of the side-effect record for 200,000 files.

Two scenarios, each measured in a fresh child process (so peak RSS is the scan's own):

* ``created``: the workspace is empty before the run, the run leaves 200,000 small files (200 directories
  of 1,000). Measured: everything after the sandbox ended (the after scan and the evidence form).
* ``existing``: the workspace holds 200,000 files before the run; the run modifies, creates and deletes
  10 each. Measured: the before snapshot, then the after scan.

With ``--compare DIR`` (a tree holding another version's ``orchestrator`` package, e.g. from
``git archive <rev> orchestrator | tar -x -C DIR``) both versions are measured interleaved, round by round
(the machine is noisy), and the medians are printed side by side:

    .venv/bin/python benchmarks/workspace_scan.py [--compare DIR] [--rounds N] [--files N] [--quick]

Not a test: it prints figures (and a machine-readable ``SUMMARY`` line), it does not assert; it exits 1
when a measurement could not be taken.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from options import parse

import orchestrator
import orchestrator.results as results

try:
    from orchestrator.pipeline.end_record import side_effects_json
except ImportError:  # earlier versions (--compare): the executor built the record
    from orchestrator.pipeline.executor import side_effects_json

DIRS = 200


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _make_files(root: Path, count: int, prefix: str = "f") -> None:
    per_dir = max(1, count // DIRS)
    for d in range(DIRS):
        sub = root / f"d{d:03d}"
        sub.mkdir(exist_ok=True)
        for i in range(per_dir):
            fd = os.open(sub / f"{prefix}{i:05d}.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, b"sixteen bytes..\n")
            os.close(fd)


def _after(before: Any, root: Path) -> dict[str, Any]:
    """The after-run work of whichever version is importable, down to the evidence form."""
    if hasattr(results, "collect"):  # this version: one bounded pass, the record bounded in advance
        effects = results.collect(before, root, redactor=results.Redactor(literals=["s3cr3t-value"]))
    else:  # earlier versions: a second snapshot, then a diff
        effects = results.diff(before, results.snapshot(root), root)
    record = side_effects_json(effects)
    assert record is not None
    return {
        "record_bytes": len(json.dumps(record)),
        "created": record["created_count"] if "created_count" in record else record.get("created"),
        "modified": record.get("modified_count", record.get("modified")),
    }


def child(scenario: str, root: Path, count: int) -> None:
    base = _rss_mib()
    figures: dict[str, Any] = {"scenario": scenario, "baseline_rss_mib": round(base, 1)}
    if scenario == "created":
        before = results.snapshot(root)
        _make_files(root, count)
        started = time.perf_counter()
        figures.update(_after(before, root))
        figures["after_s"] = round(time.perf_counter() - started, 2)
    else:
        started = time.perf_counter()
        before = results.snapshot(root)
        figures["snapshot_s"] = round(time.perf_counter() - started, 2)
        for i in range(10):
            (root / f"d{i:03d}" / "f00000.txt").write_bytes(b"changed\n")
            (root / f"d{i:03d}" / "new.txt").write_bytes(b"new\n")
            (root / f"d{i:03d}" / "f00001.txt").unlink()
        if hasattr(results, "collect"):  # this version also starts the write meter before the run
            write_meter = importlib.import_module("orchestrator.results.write_meter")  # absent before
            started = time.perf_counter()
            meter = write_meter.WorkspaceMeter(root, before, write_meter.WriteBudget(1 << 30, 100_000), lambda: None)
            meter.start()
            figures["meter_start_s"] = round(time.perf_counter() - started, 2)
            meter.stop()
        started = time.perf_counter()
        figures.update(_after(before, root))
        figures["after_s"] = round(time.perf_counter() - started, 2)
    figures["peak_rss_mib"] = round(_peak_mib(), 1)
    figures["peak_over_baseline_mib"] = round(_peak_mib() - base, 1)
    print(json.dumps(figures))


def _measure(scenario: str, root: Path, files: int, pythonpath: str | None) -> dict[str, Any] | None:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, __file__, "--files", str(files), "--child", scenario, str(root)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    if out.returncode != 0:
        print(f"{scenario}: failed: {out.stderr[-3000:]}")
        return None
    figures: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--compare", metavar="DIR", help="a tree holding another version's orchestrator package")
    parser.add_argument("--child", nargs=2, metavar=("SCENARIO", "ROOT"), help=argparse.SUPPRESS)
    args = parse(parser, {"files": 2000, "rounds": 1})
    if args.child:
        child(args.child[0], Path(args.child[1]), args.files)
        return
    versions: dict[str, str | None] = {"this": None}
    if args.compare:
        versions["compared"] = str(Path(args.compare).resolve())
    print(f"this: orchestrator from {Path(orchestrator.__file__).parent}; compared: {args.compare or '-'}")
    seen: dict[str, dict[str, list[dict[str, Any]]]] = {v: {"created": [], "existing": []} for v in versions}
    failed = 0
    base = Path(tempfile.mkdtemp(prefix="ws-bench-"))
    try:
        for round_ in range(args.rounds):
            for scenario in ("created", "existing"):
                for version, pythonpath in versions.items():
                    root = base / f"{scenario}-{version}-{round_}"
                    root.mkdir()
                    if scenario == "existing":
                        _make_files(root, args.files)
                    figures = _measure(scenario, root, args.files, pythonpath)
                    shutil.rmtree(root)
                    if figures is None:
                        failed += 1
                    else:
                        seen[version][scenario].append(figures)
                        print(f"round {round_ + 1} {version:>8} {scenario:>8}: {figures}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    summary: dict[str, Any] = {}
    for version, scenarios in seen.items():
        for scenario, runs in scenarios.items():
            if not runs:
                continue
            keys = [k for k in runs[0] if isinstance(runs[0][k], float) and k != "baseline_rss_mib"]
            medians = {k: round(statistics.median(r[k] for r in runs), 2) for k in keys}
            summary[f"{version}.{scenario}"] = medians
            print(f"median {version:>8} {scenario:>8}: {medians}")
    print("SUMMARY " + json.dumps(summary, sort_keys=True))
    if failed:
        raise SystemExit(f"{failed} measurement(s) failed (above)")


if __name__ == "__main__":
    main()
