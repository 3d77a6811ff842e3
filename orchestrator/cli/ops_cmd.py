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
    doctor.add_argument(
        "--evidence", default=None, metavar="PATH", help="the evidence file to verify (default: the config's)"
    )
    doctor.add_argument(
        "--url", default=None, metavar="URL", help="a running service whose pool to show now (read from its /metrics)"
    )
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(handler=handle_doctor)
    gc = sub.add_parser("gc", help="remove orphaned sandboxes (owner gone or deadline passed) and record them")
    gc.add_argument(
        "--evidence", default=None, metavar="PATH", help="where removals are recorded (default: the config's)"
    )
    gc.add_argument("--config", default=None, metavar="PATH", help="the config whose backend to collect from")
    gc.add_argument("--json", action="store_true")
    gc.set_defaults(handler=handle_gc)


def _config_and_evidence(args: argparse.Namespace) -> tuple[Any, Any]:
    """The config (``--config``, else the defaults) and the evidence file: ``--evidence``, else the config's
    (evidence.path, else the default), the file its runs and its service write."""
    from pathlib import Path

    from orchestrator.pipeline.config import load_config
    from orchestrator.pipeline.factory import evidence_path

    config = load_config(Path(args.config) if args.config else None)
    return config, Path(args.evidence) if args.evidence else evidence_path(config)


def handle_doctor(args: argparse.Namespace) -> int:
    import asyncio

    from orchestrator.pipeline.backend_choice import backend_for
    from orchestrator.pipeline.doctor import run_doctor
    from orchestrator.pipeline.profiles_of import Profiles

    config, evidence = _config_and_evidence(args)
    # the profiles as runs under this config resolve them (its caps): the probes check what runs get
    profiles = Profiles.under(config.caps)
    service = None if args.url is None else _service_pool(args.url)

    async def main() -> list[Any]:
        backend = backend_for(config)
        try:
            return await run_doctor(
                backend, profiles, evidence, probes=not args.no_probe, pool=config.pool, service=service
            )
        finally:
            await backend.close()

    checks = asyncio.run(main())
    if args.json:
        emit_json({"ok": all(c.ok for c in checks), "checks": [c.to_json() for c in checks]})
    else:
        for check in checks:
            _print_check(check)
    return 0 if all(c.ok for c in checks) else 1


#: how long the doctor waits for a service's /metrics
METRICS_TIMEOUT_S = 10.0


def _service_pool(url: str) -> Any:
    """What the service at ``url`` says of its pool (its public /metrics): per profile, none, or why it did not
    answer (the doctor's ``pool now`` check fails then)."""
    import http.client
    import urllib.request
    from urllib.parse import urlsplit

    from orchestrator.api.metrics import read_pool
    from orchestrator.domain import routes
    from orchestrator.domain.errors import InputInvalid
    from orchestrator.pipeline.doctor_pool import ServicePool

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputInvalid("--url: http://host:port or https://host:port", details={"fields": ["--url"]})
    target = url.rstrip("/") + routes.METRICS.path
    try:
        with urllib.request.urlopen(target, timeout=METRICS_TIMEOUT_S) as answer:  # noqa: S310 (http(s) only)
            text = answer.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException, ValueError) as err:
        return ServicePool(url, error=f"{type(err).__name__}: {err}")
    try:
        return ServicePool(url, profiles=read_pool(text))
    except ValueError as err:  # not a service of ours: something else answered there
        return ServicePool(url, error=f"its {routes.METRICS.path} is not Prometheus text: {err}")


def _print_check(check: Any) -> None:
    """``ok``, ``FAIL`` or ``skip`` (not checked: an earlier check failed); a fix of several commands, one a line."""
    from orchestrator.domain.text import printable

    state = "ok  " if check.ok else "FAIL" if check.checked else "skip"
    code = f" [{check.code}]" if check.code and check.checked else ""
    print(f"{state} {check.name}: {printable(check.detail)}{code}")
    for number, line in enumerate((check.fix or "").splitlines()):
        print(f"     {'fix: ' if number == 0 else '     '}{printable(line)}")


def handle_gc(args: argparse.Namespace) -> int:
    import asyncio

    from orchestrator.evidence import EvidenceWriter
    from orchestrator.pipeline.backend_choice import backend_for
    from orchestrator.pipeline.reaper import collect_orphans

    config, evidence_path = _config_and_evidence(args)

    async def main() -> list[Any]:
        backend = backend_for(config)
        evidence = EvidenceWriter(evidence_path)
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
