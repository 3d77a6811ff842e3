"""sandboxctl run: gate first, then a fresh hardened sandbox; the command's own exit status."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.cli.check_cmd import add_request_arguments, request_from_args, workspace_from_args
from orchestrator.cli.output import Subparsers, emit_json, report_error

if TYPE_CHECKING:
    from orchestrator.pipeline.orchestrator import Orchestrator

REFUSED_EXIT = 125


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="decide, then run a command in a fresh hardened sandbox",
        description="The gate decides first (asks go to the configured approver); then the command runs in a "
        "fresh container with the profile's hardening. Exit status: the command's own; 125 when refused or when "
        "the sandbox failed (timeout, OOM, workspace write budget, incomplete side-effect record, engine), with "
        "CODE: message on stderr.",
    )
    add_request_arguments(p)
    p.add_argument("--workspace", default=None, help="directory mounted as the workspace (default: current dir)")
    p.add_argument("--timeout", type=float, default=None, metavar="S", help="wall-clock limit in seconds")
    p.add_argument("--evidence", default=None, metavar="PATH", help="evidence file (default: state dir)")
    p.set_defaults(handler=handle)


def _refusal_json(err: Any, decision: str | None) -> dict[str, Any]:
    """The API's shape of a run that did not run to an end (domain.wire.RunRefusal)."""
    from orchestrator.domain.wire import RunRefusal

    return RunRefusal.of(err, decision).model_dump(mode="json")


class _Progress:
    """What is known so far, so that even a cancelled run can report its execution id."""

    execution_id: str | None = None
    decision: str | None = None


def handle(args: argparse.Namespace) -> int:
    import asyncio

    progress = _Progress()
    try:
        return asyncio.run(_run(args, progress))
    except (asyncio.CancelledError, KeyboardInterrupt):  # SIGTERM / Ctrl-C: teardown already happened inside
        if args.json:
            from orchestrator.domain.errors import ExecutionCancelled

            cancelled = ExecutionCancelled("interrupted", details={"execution_id": progress.execution_id})
            emit_json(_refusal_json(cancelled, progress.decision))
        raise KeyboardInterrupt from None


async def open_orchestrator(args: argparse.Namespace, workspace: Path) -> Orchestrator:
    """The orchestrator `run` and `session` use: --config's backend (connecting in the background while
    the gate decides), --evidence, the profiles of this host. Raises OrchestratorError (the backend closed)."""
    from orchestrator.pipeline.backend_choice import backend_for_file
    from orchestrator.pipeline.factory import build_orchestrator
    from orchestrator.profiles import ProfileRegistry

    config = Path(args.config) if args.config else None
    backend = backend_for_file(config)
    backend.prepare()
    try:
        return build_orchestrator(
            config,
            workspace=workspace,
            evidence_path=Path(args.evidence) if args.evidence else None,
            backend=backend,
            profiles=ProfileRegistry(),
        )
    except BaseException:
        await backend.close()
        raise


def _report(args: argparse.Namespace, err: Any, decision: str | None) -> int:
    if args.json:
        emit_json(_refusal_json(err, decision))
    report_error(err.code, err.message)
    return int(err.exit_code) if err.exit_code in (2, 130) else REFUSED_EXIT


async def _run(args: argparse.Namespace, progress: _Progress) -> int:
    import asyncio
    import contextlib
    import gc
    import math
    import signal

    from orchestrator.domain.errors import InputInvalid, OrchestratorError
    from orchestrator.pipeline.reaper import collect_orphans

    # start-up is over: what it built lives as long as the process (see main.entry)
    gc.freeze()
    gc.enable()

    task = asyncio.current_task()
    if task is not None:
        # SIGTERM and a hang-up end the run like Ctrl-C: the sandbox is removed on the way out. A signal
        # the caller ignores (nohup, `trap '' TERM`) stays ignored.
        for signum in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(signum) is not signal.SIG_IGN:
                asyncio.get_running_loop().add_signal_handler(signum, task.cancel)

    try:
        workspace = workspace_from_args(args)
        raw = request_from_args(args)
        if args.timeout is not None:
            if not (math.isfinite(args.timeout) and args.timeout > 0):  # nan and inf too
                raise InputInvalid("--timeout must be a positive number of seconds")
            raw["timeout_ms"] = max(1, round(args.timeout * 1000))
        if not workspace.is_dir():
            raise InputInvalid(f"workspace {workspace} is not a directory")
        orch = await open_orchestrator(args, workspace)
    except OrchestratorError as err:
        return _report(args, err, None)
    try:
        try:
            auth = await orch.authorize(raw)
            progress.execution_id = auth.execution_id
            progress.decision = auth.gate.decision.decision.value
            assert orch.backend is not None
            # orphans of earlier runs are collected beside this one (they never touch it: it is
            # registered as active before its sandbox exists), not before it: no added latency
            reaping = asyncio.create_task(collect_orphans(orch.backend, orch.evidence))
            try:
                result = await orch.run(auth, workspace=workspace)
            finally:
                with contextlib.suppress(OrchestratorError):
                    await reaping
        except OrchestratorError as err:
            return _report(args, err, progress.decision)
    finally:
        await asyncio.shield(orch.aclose())

    outcome = result.outcome
    if args.json:
        emit_json(result.to_json())
    else:  # the command's own output, raw: what the user asked for
        sys.stdout.buffer.write(outcome.stdout)
        sys.stdout.flush()
        sys.stderr.buffer.write(outcome.stderr)
        sys.stderr.flush()
    if result.error is not None:
        report_error(result.error.code, result.error.message)
    if result.sandbox_failed or outcome.exit_code is None:
        return REFUSED_EXIT
    return outcome.exit_code
