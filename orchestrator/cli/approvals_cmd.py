"""sandboxctl approvals: answer the store-backed approval queue from a shell."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from orchestrator.cli.output import Subparsers, emit_json, report_error, say

if TYPE_CHECKING:
    from orchestrator.approvals.queue import Resolution


def register(sub: Subparsers) -> None:
    p = sub.add_parser("approvals", help="list and decide pending approvals (provider: queue)")
    inner = p.add_subparsers(dest="approvals_command", metavar="ACTION")
    inner.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--db", metavar="PATH", help="approval store (default: <state dir>/approvals.db)")
        q.add_argument("--config", metavar="FILE", help="take approvals.queue_path from this config")
        q.add_argument("--json", action="store_true")

    listing = inner.add_parser("list", help="pending asks, oldest first")
    common(listing)
    listing.set_defaults(handler=_list)
    for action, help_text in (
        ("approve", "approve one ask"),
        ("deny", "deny one ask"),
        ("abort", "abort: deny and tell the agent to stop"),
    ):
        q = inner.add_parser(action, help=help_text)
        common(q)
        q.add_argument("id", help="the execution id shown by `approvals list`")
        q.add_argument("--reason", default="", help="recorded with the decision")
        if action == "approve":
            q.add_argument("--session", action="store_true", help="approve for the rest of the agent session")
        q.set_defaults(handler=_decide, action=action)


def _store(args: argparse.Namespace) -> Any:
    from pathlib import Path

    from orchestrator.approvals.queue import ApprovalStore
    from orchestrator.pipeline.config import load_config
    from orchestrator.pipeline.factory import queue_path

    if args.db:
        return ApprovalStore(Path(args.db))
    return ApprovalStore(queue_path(load_config(Path(args.config) if args.config else None)))


def _list(args: argparse.Namespace) -> int:
    import time

    from orchestrator.domain.text import printable as p  # what an approver reads: exactly as asked

    pending = _store(args).pending()
    if args.json:  # the API's shape (GET /v1/approvals)
        from orchestrator.domain.wire import ApprovalList

        now = time.time()
        emit_json(ApprovalList(items=[ask.view(now=now) for ask in pending]).model_dump(mode="json"))
        return 0
    if not pending:
        print("no pending approvals")
    for ask in pending:
        s = ask.sanitized
        what = s.get("command") or " ".join(s.get("argv") or []) or s.get("path") or s.get("tool")
        risk = s.get("risk", {})
        print(f"{p(ask.id)}  {p(ask.subject)}@{p(ask.tenant)}  {p(str(s.get('tool')))}: {p(str(what))}")
        print(
            f"    risk {p(str(risk.get('risk_level')))} ({p(str(risk.get('reason')))});"
            f" asked because: {p(ask.policy_reason)}; expires in {ask.deadline - time.time():.0f}s"
        )
    return 0


def _decide(args: argparse.Namespace) -> int:
    import getpass

    from orchestrator.cli.output import fail
    from orchestrator.domain.decisions import ApprovalOutcome

    outcome = {
        "approve": ApprovalOutcome.APPROVED_FOR_SESSION
        if getattr(args, "session", False)
        else ApprovalOutcome.APPROVED,
        "deny": ApprovalOutcome.DENIED,
        "abort": ApprovalOutcome.ABORT,
    }[args.action]
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "unknown"
    store = _store(args)
    resolution = store.decide(args.id, outcome, f"queue:{user}", args.reason)
    if resolution.won:
        if args.json:
            emit_json({"id": args.id, "outcome": outcome.value})
        else:
            say(f"{args.id}: {outcome.value}")
        return 0
    if resolution.state == "unknown":
        return fail("INPUT.INVALID", f"no approval {args.id!r} in {store.path}", 2, json_out=args.json)
    return _not_taken(args, resolution)


def _not_taken(args: argparse.Namespace, resolution: Resolution) -> int:
    """The ask left `pending` before this answer (timeout, another approver, withdrawn): say what
    the store kept — the outcome its run acted on — and exit non-zero."""
    from orchestrator.domain.decisions import ApprovalOutcome
    from orchestrator.domain.errors import ApprovalNotPending
    from orchestrator.domain.text import printable

    kept = resolution.result
    stored: str
    if kept is None:
        stored = resolution.state
        why = "it was withdrawn: the run that asked was cancelled"
    elif kept.outcome is ApprovalOutcome.TIMEOUT:
        stored = kept.outcome.value
        why = f"it timed out first ({printable(kept.reason)}) at {kept.decided_at.isoformat(timespec='milliseconds')}"
    else:
        stored = kept.outcome.value
        at = kept.decided_at.isoformat(timespec="milliseconds")
        why = f"it was already decided: {stored} by {printable(kept.approver)} at {at}"
    err = ApprovalNotPending(f"{args.id}: your answer was not taken: {why}")
    if args.json:
        emit_json({"id": args.id, "outcome": stored, "error": {"code": err.code, "message": err.message}})
    report_error(err.code, err.message)
    return err.exit_code
