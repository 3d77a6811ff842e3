"""sandboxctl doctor and sandboxctl gc: the engine's health and its leftovers."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.cli.output import Subparsers, emit_json, say


def register(sub: Subparsers) -> None:
    doctor = sub.add_parser(
        "doctor", help="check engine, runtimes, images, seccomp and the limits in force, each with its fix"
    )
    doctor.add_argument("--no-probe", action="store_true", help="skip the probe containers")
    doctor.add_argument("--config", default=None, metavar="PATH", help="the config whose backend to check")
    doctor.add_argument("--evidence", default=None, metavar="PATH")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(handler=handle_doctor)
    gc = sub.add_parser("gc", help="remove orphaned sandboxes (owner gone or deadline passed) and record them")
    gc.add_argument("--evidence", default=None, metavar="PATH")
    gc.add_argument("--config", default=None, metavar="PATH", help="the config whose backend to collect from")
    gc.add_argument("--json", action="store_true")
    gc.set_defaults(handler=handle_gc)


def _evidence_path(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from orchestrator.evidence import default_evidence_path

    return Path(args.evidence) if args.evidence else default_evidence_path()


def handle_doctor(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from orchestrator.domain.text import printable
    from orchestrator.pipeline.backend_choice import backend_for_file
    from orchestrator.pipeline.doctor import run_doctor
    from orchestrator.profiles import ProfileRegistry

    async def main() -> list[Any]:
        backend = backend_for_file(Path(args.config) if args.config else None)
        try:
            return await run_doctor(backend, ProfileRegistry(), _evidence_path(args), probes=not args.no_probe)
        finally:
            await backend.close()

    checks = asyncio.run(main())
    if args.json:
        emit_json({"ok": all(c.ok for c in checks), "checks": [c.to_json() for c in checks]})
    else:
        for check in checks:
            print(f"{'ok  ' if check.ok else 'FAIL'} {check.name}: {printable(check.detail)}")
            if check.fix:
                print(f"     fix: {printable(check.fix)}")
    return 0 if all(c.ok for c in checks) else 1


def handle_gc(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from orchestrator.evidence import EvidenceWriter
    from orchestrator.pipeline.backend_choice import backend_for_file
    from orchestrator.pipeline.reaper import collect_orphans

    async def main() -> list[Any]:
        backend = backend_for_file(Path(args.config) if args.config else None)
        evidence = EvidenceWriter(_evidence_path(args))
        try:
            return await collect_orphans(backend, evidence)
        finally:
            await evidence.close()
            await backend.close()

    reaped = asyncio.run(main())
    if args.json:
        emit_json(
            [
                {"sandbox_id": r.sandbox.sandbox_id, "execution_id": r.sandbox.execution_id, "reason": r.reason}
                for r in reaped
            ]
        )
    else:
        for r in reaped:
            say(f"removed {r.sandbox.name} ({r.reason})")
        print(f"{len(reaped)} orphan(s) removed")
    return 0
