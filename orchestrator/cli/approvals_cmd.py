"""sandboxctl approvals: answer the store-backed approval queues (a service's, local runs') from a shell."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from orchestrator.cli.output import Subparsers, emit_json, report_error, say

if TYPE_CHECKING:
    from orchestrator.approvals.queue import ApprovalStore, Resolution


def register(sub: Subparsers) -> None:
    p = sub.add_parser("approvals", help="list and decide pending approvals (provider: queue)")
    inner = p.add_subparsers(dest="approvals_command", metavar="ACTION")
    inner.required = True

    def common(q: argparse.ArgumentParser) -> None:
        where = q.add_mutually_exclusive_group()
        where.add_argument("--db", metavar="PATH", help="this approval store only (it must exist)")
        where.add_argument(
            "--config",
            metavar="FILE",
            help="the queues under this config: its service's store (service.store) and its runs' "
            "(approvals.queue_path); without --db or --config, the defaults' (in the state dir)",
        )
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


def _stores(args: argparse.Namespace) -> tuple[list[ApprovalStore], list[Path]]:
    """The stores to read and answer, and every path looked at (for a message). ``--db``: that one, which must
    exist. Else the config's queues that exist: `sandboxctl serve --config FILE` keeps its asks in its state
    store, `sandboxctl run --config FILE` in approvals.queue_path; nothing is created (no directory, no
    database). A file that is no approval store is INPUT.INVALID naming it, never INTERNAL."""
    from orchestrator.domain.errors import InputInvalid
    from orchestrator.pipeline.config import load_config
    from orchestrator.pipeline.factory import approval_queues

    if args.db:
        path = Path(args.db)
        if not path.is_file():
            why = "it is not a file" if path.exists() else "it does not exist"
            raise InputInvalid(
                f"no approval store at {path}: {why} (--db names the store of a service or a run)",
                details={"file": str(path)},
            )
        return [_open_store(path)], [path]
    paths = list(approval_queues(load_config(Path(args.config) if args.config else None)))
    return [_open_store(path) for path in paths if path.is_file()], paths


def _open_store(path: Path) -> ApprovalStore:
    """The approval store at ``path`` (an existing file), after checking it is one: an SQLite database with
    the approvals table (a service's store or a runs' queue). Nothing is written to any other file."""
    import sqlite3

    from orchestrator.approvals.queue import ApprovalStore

    try:
        db = sqlite3.connect(f"{path.absolute().as_uri()}?mode=rw", uri=True, timeout=10)
        try:
            found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'approvals'").fetchone()
        finally:
            db.close()
    except sqlite3.Error as err:
        raise _not_a_store(path, str(err)) from err
    if found is None:
        raise _not_a_store(path, "an SQLite database without the approvals table")
    return ApprovalStore(path)


def _not_a_store(path: Path, why: str) -> Exception:
    from orchestrator.domain.errors import InputInvalid

    return InputInvalid(
        f"{path} is not an approval store ({why}): give the store of a service (service.store) or of runs"
        " (approvals.queue_path)",
        details={"file": str(path)},
    )


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """A store that checked out but fails when read (corrupt past its header): INPUT.INVALID naming it."""
    import sqlite3

    try:
        yield
    except sqlite3.DatabaseError as err:
        raise _not_a_store(path, str(err)) from err


def _list(args: argparse.Namespace) -> int:
    import time

    from orchestrator.domain.text import printable as p  # what an approver reads: exactly as asked

    stores, looked = _stores(args)
    pending = []
    for store in stores:
        with _reading(store.path):
            pending.extend(store.pending())
    pending.sort(key=lambda ask: ask.created_at)
    if args.json:  # the API's shape (GET /v1/approvals)
        from orchestrator.domain.wire import ApprovalList

        now = time.time()
        emit_json(ApprovalList(items=[ask.view(now=now) for ask in pending]).model_dump(mode="json"))
        return 0
    if not stores:  # nothing to read: say where it looked, not "no pending approvals"
        used = "this config" if args.config else "the defaults (no --config)"
        where = " or ".join(str(path) for path in looked)
        print(f"no approval queue at {where}: has a service or run used {used}?")
    elif not pending:
        print("no pending approvals")
    for ask in pending:
        s: dict[str, Any] = ask.sanitized  # the stored JSON: read defensively below
        what = s.get("command") or " ".join(s.get("argv") or []) or s.get("path") or s.get("tool")
        risk = s.get("risk", {})
        print(f"{p(ask.id)}  {p(ask.subject)}@{p(ask.tenant)}  {p(str(s.get('tool')))}: {p(str(what))}")
        print(
            f"    risk {p(str(risk.get('risk_level')))} ({p(str(risk.get('reason')))});"
            f" asked because: {p(ask.policy_reason)}; expires in {ask.deadline - time.time():.0f}s"
        )
        for label, text in _ci_lines(s):  # a CI step: its job's context, as /ui and the terminal prompt show it
            print(f"    {label + ':':<5} {text}")
    return 0


def _ci_lines(sanitized: dict[str, Any]) -> list[tuple[str, str]]:
    """The CI context of a stored ask (its request's context.ci) as an approver reads it (every value escaped);
    none for an ask without one, and a line saying so for one that does not read back."""
    from pydantic import ValidationError

    from orchestrator.approvals.terminal import ci_lines
    from orchestrator.domain.ci import CiRecord

    context = sanitized.get("context")
    ci = context.get("ci") if isinstance(context, dict) else None
    if ci is None:
        return []
    try:
        record = CiRecord.model_validate(ci)
    except ValidationError:
        return [("ci", "(a CI context that does not read back)")]
    return ci_lines(record)


def _decide(args: argparse.Namespace) -> int:
    import getpass

    from orchestrator.approvals.queue import Resolution
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
    stores, looked = _stores(args)
    resolution = Resolution(won=False, state="unknown")
    for store in stores:  # an id is in one queue at most: execution ids are unique
        with _reading(store.path):
            resolution = store.decide(args.id, outcome, f"queue:{user}", args.reason)
        if resolution.state != "unknown":
            break
    if resolution.won:
        if args.json:
            emit_json({"id": args.id, "outcome": outcome.value})
        else:
            say(f"{args.id}: {outcome.value}")
        return 0
    if resolution.state == "unknown":
        where = " or ".join(str(path) for path in looked)
        return fail("INPUT.INVALID", f"no approval {args.id!r} in {where}", 2, json_out=args.json)
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
