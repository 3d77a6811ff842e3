"""``sandboxctl evidence verify|show|tail``: check and read the evidence file.

Exit codes: 0 ok; 1 the evidence is corrupt (``EVIDENCE.CORRUPT: line N (seq S): <problem>`` on stderr);
2 the file does not exist or cannot be read, or bad arguments; 3 (verify) the chain is intact but an
execution began and never ended (``EVIDENCE.INCOMPLETE: ...`` on stderr, one line per execution).
Errors are printed as ``CODE: message``, never as a traceback. Heavy imports (pydantic models) happen
inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.output import Subparsers
from orchestrator.domain.errors import (
    EvidenceCorrupt,
    EvidenceIncomplete,
    EvidenceUnavailable,
    InputInvalid,
    OrchestratorError,
)
from orchestrator.domain.text import json_safe, printable, terminal_safe

if TYPE_CHECKING:
    from orchestrator.evidence.records import EvidenceRecord
    from orchestrator.evidence.verify import VerifyReport

EXIT_OK = 0
EXIT_CORRUPT = 1
EXIT_UNAVAILABLE = 2
EXIT_INCOMPLETE = 3
_REASON_WIDTH = 160
_UNENDED_SHOWN = 20

__all__ = ["printable", "register"]  # printable: controls and bidi characters escaped (records hold
# text that agents chose), the same function the approval prompt and `check` use


def register(subparsers: Subparsers) -> None:
    """Add ``evidence`` (with ``verify``, ``show``, ``tail``) to a sandboxctl-style parser."""
    parser = subparsers.add_parser(
        "evidence",
        help="verify and read the tamper-evident evidence file",
        description="Verify and read the hash-chained evidence file. The path defaults to "
        "$SANDBOX_EVIDENCE_PATH, else $SANDBOX_STATE_DIR/evidence.jsonl, else "
        "$XDG_STATE_HOME/sandbox-orchestrator/evidence.jsonl, else "
        "~/.local/state/sandbox-orchestrator/evidence.jsonl.",
    )
    commands = parser.add_subparsers(dest="evidence_command", metavar="COMMAND", required=True)

    verify = commands.add_parser(
        "verify",
        help="check every record, the hash chain and the head anchor",
        description="Check every record, the hash chain and the head anchor, and that every execution that "
        "began also ended. Exit 0 when intact (executions whose deadline has not passed may still be running), "
        "1 when corrupt (the first bad line is named on stderr), 2 when the file cannot be read, 3 when intact "
        "but an execution began and never ended (each is named on stderr; JSON: unended, complete).",
    )
    _add_path(verify)
    verify.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    verify.set_defaults(handler=_verify)

    show = commands.add_parser("show", help="print records in order, optionally filtered")
    _add_path(show)
    show.add_argument("--execution-id", metavar="ID", help="only the records of this execution")
    show.add_argument("--event", metavar="E", help="only records of this event (e.g. decision_made)")
    show.add_argument(
        "--json", action="store_true", help="print the stored JSONL lines (controls and bidi characters as \\uXXXX)"
    )
    show.set_defaults(handler=_show)

    tail = commands.add_parser("tail", help="print the last records (read from the end of the file)")
    _add_path(tail)
    tail.add_argument("-n", "--lines", dest="n", type=_count, default=10, metavar="N", help="how many (default 10)")
    tail.add_argument(
        "--json", action="store_true", help="print the stored JSONL lines (controls and bidi characters as \\uXXXX)"
    )
    tail.set_defaults(handler=_tail)


def _add_path(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--path", metavar="P", help="the evidence file (default: see `evidence --help`)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


# ---- handlers ------------------------------------------------------------------------------------


def _verify(args: argparse.Namespace) -> int:
    def run() -> int:
        from orchestrator.evidence.verify import verify

        report = verify(_path(args))
        if args.json:
            print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
        for warning in report.warnings:
            print(terminal_safe(f"warning: {warning}"), file=sys.stderr)
        if not report.ok:
            print(terminal_safe(f"{EvidenceCorrupt.code}: {report.location()}: {report.problem}"), file=sys.stderr)
            return EXIT_CORRUPT
        _print_unended(report)
        if not args.json:
            anchored = f"head anchor matches (seq {report.head_seq})" if report.head_checked else "no head anchor"
            print(terminal_safe(f"OK: {report.records} record(s), chain intact, {anchored}: {report.path}"))
        return EXIT_OK if report.complete else EXIT_INCOMPLETE

    return _guarded(run)


def _print_unended(report: VerifyReport) -> None:
    """One line on stderr per execution that began and did not end."""
    for shown, item in enumerate(report.unended):
        if shown == _UNENDED_SHOWN:
            print(f"... and {len(report.unended) - shown} more (see --json)", file=sys.stderr)
            break
        began = f"line {item.line} (seq {item.seq}, {item.started_ts})"
        where = f"execution {printable(item.execution_id)} began at {began}"
        if item.running:
            print(f"note: {where} and has not ended yet: its deadline has not passed", file=sys.stderr)
        else:
            due = "" if item.deadline_unix is None else f" (its deadline passed at unix {item.deadline_unix:.0f})"
            print(
                f"{EvidenceIncomplete.code}: {where} and never ended: no execution_finished, run_failed or "
                f"execution_abandoned record{due}",
                file=sys.stderr,
            )


def _show(args: argparse.Namespace) -> int:
    def run() -> int:
        from orchestrator.evidence.reader import iter_raw

        lines = iter_raw(_path(args), execution_id=args.execution_id, event=args.event)
        _print_records(((raw, record) for _, raw, record in lines), as_json=args.json)
        return EXIT_OK

    return _guarded(run)


def _tail(args: argparse.Namespace) -> int:
    def run() -> int:
        from orchestrator.evidence.reader import tail_raw

        _print_records(iter(tail_raw(_path(args), args.n)), as_json=args.json)
        return EXIT_OK

    return _guarded(run)


# ---- helpers -------------------------------------------------------------------------------------


def _path(args: argparse.Namespace) -> Path:
    if args.path:
        return Path(args.path).expanduser()
    from orchestrator.evidence.paths import default_evidence_path

    return default_evidence_path()


def _guarded(run: Callable[[], int]) -> int:
    try:
        return run()
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except OrchestratorError as err:
        sys.stdout.flush()
        print(terminal_safe(str(err)), file=sys.stderr)
        if isinstance(err, EvidenceCorrupt):
            return EXIT_CORRUPT
        if isinstance(err, EvidenceUnavailable | InputInvalid):
            return EXIT_UNAVAILABLE
        return err.exit_code
    except OSError as err:
        sys.stdout.flush()
        where = f": {err.filename}" if err.filename else ""
        print(terminal_safe(f"{EvidenceUnavailable.code}: {err.strerror or err}{where}"), file=sys.stderr)
        return EXIT_UNAVAILABLE


def _silence_stdout() -> None:
    """After EPIPE (``... | head``), send what is left to /dev/null so the exit flush does not fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _print_records(records: Iterator[tuple[bytes, EvidenceRecord]], *, as_json: bool) -> None:
    """``--json``: each record's line as stored, but with controls and bidi characters written as
    \\uXXXX (the same record once parsed: its hash still verifies)."""
    write = sys.stdout.write
    for raw, record in records:
        write(json_safe(raw.decode("utf-8")) if as_json else _human(record) + "\n")


def _human(record: EvidenceRecord) -> str:
    parts = [f"{record.seq:>6}", record.ts, f"{record.event:<20}", record.execution_id or "-"]
    for name in ("decision", "status", "error_code"):
        value = getattr(record, name)
        if value is not None:
            parts.append(f"{name}={value}")
    if record.reason:
        reason = record.reason if len(record.reason) <= _REASON_WIDTH else record.reason[: _REASON_WIDTH - 3] + "..."
        parts.append(f"reason: {reason}")
    return printable(" ".join(parts))
