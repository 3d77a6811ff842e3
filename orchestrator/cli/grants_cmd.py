"""sandboxctl grants: issue, list, show and revoke grants with budgets on a running service, and read a
grant's ledger. Speaks the service's API with the Python client (the service decides who may: an admin
token, or an approver's for its own tenants).

The token comes from ``--token-file``, ``--token`` or ``$SANDBOX_TOKEN``, the first given (``--token``
is visible to other users in the process list: prefer the other two); it is never printed. Errors are
``sandboxctl: CODE: message`` (and ``{"error": ...}`` with --json), with the code's exit status, never a
traceback.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import TYPE_CHECKING

from orchestrator.cli.output import Subparsers, emit_json, fail, say

if TYPE_CHECKING:
    from orchestrator.client import Client
    from orchestrator.domain.grants import GrantCharge, GrantView

DEFAULT_URL = "http://127.0.0.1:8700"
URL_ENV = "SANDBOX_URL"
TOKEN_ENV = "SANDBOX_TOKEN"  # noqa: S105 - the variable's name, not a token
_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*$", re.IGNORECASE)
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "grants",
        help="issue, list, show and revoke grants with budgets (on a running service)",
        description="Grants let a tenant's requests that match their conditions run without asking, until an"
        " expiry, within budgets (executions, CPU seconds, output bytes, wall seconds). Needs an admin token, or"
        " an approver's for its own tenants.",
    )
    inner = p.add_subparsers(dest="grants_command", metavar="ACTION")
    inner.required = True

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument("--url", default=None, help=f"the service (default: ${URL_ENV}, else {DEFAULT_URL})")
        q.add_argument("--token-file", metavar="PATH", help=f"a file holding the bearer token (or ${TOKEN_ENV})")
        q.add_argument("--token", help="the bearer token itself (visible in the process list: prefer --token-file)")
        q.add_argument("--json", action="store_true", help="one JSON document on stdout")

    create = inner.add_parser("create", help="issue a grant")
    common(create)
    create.add_argument("--tenant", required=True, help="the tenant whose requests it covers")
    create.add_argument("--tool", action="append", metavar="NAME", help="tool name or group (exec, files, stdin)")
    create.add_argument("--argv-prefix", metavar="PATTERN", help="command pattern, e.g. 'pytest' or 'git status'")
    create.add_argument("--argv-glob", metavar="GLOB", help="fnmatch glob over each command's words")
    create.add_argument("--subject", action="append", metavar="GLOB", help="subject glob it covers (repeatable)")
    create.add_argument("--profile", action="append", metavar="NAME", help="profile it covers (repeatable)")
    create.add_argument("--ci-job-key", metavar="KEY", help="one CI job run it covers: its job_key (64 hex digits)")
    create.add_argument(
        "--ci-repository", action="append", metavar="GLOB", help="CI repository glob it covers (repeatable)"
    )
    create.add_argument(
        "--on-exhausted",
        choices=["ask", "refuse"],
        default=None,
        help="ask (default): it answers asks; refuse: a bound, charging every run it matches (approving none),"
        " refused with GRANT.EXHAUSTED once it has no room",
    )
    expiry = create.add_mutually_exclusive_group()
    expiry.add_argument("--ttl", metavar="DURATION", help="expires after this long: 3600, 90s, 30m, 8h, 7d")
    expiry.add_argument("--expires", metavar="TIME", help="expires at this ISO 8601 time with a zone (…Z, …+02:00)")
    create.add_argument("--executions", metavar="N", help="runs it may cover")
    create.add_argument("--cpu-seconds", metavar="S", help="CPU seconds its runs may use together")
    create.add_argument("--output-bytes", metavar="SIZE", help="stdout + stderr its runs may produce: 1048576, 10m")
    create.add_argument("--wall-seconds", metavar="S", help="wall-clock seconds its runs may take together")
    create.add_argument("--reason", required=True, help="why it is issued (kept with it)")
    create.set_defaults(handler=_create)

    listing = inner.add_parser("list", help="the grants of the token's tenants, oldest first")
    common(listing)
    listing.add_argument("--state", choices=["active", "revoked", "exhausted", "expired"])
    listing.add_argument("--tenant", help="only this tenant's")
    listing.set_defaults(handler=_list)

    show = inner.add_parser("show", help="one grant: terms, state, used, reserved, remaining")
    common(show)
    show.add_argument("id", help="the grant's id (grt_...)")
    show.set_defaults(handler=_show)

    revoke = inner.add_parser("revoke", help="revoke a grant: no new run is covered from now on")
    common(revoke)
    revoke.add_argument("id", help="the grant's id (grt_...)")
    revoke.add_argument("--reason", default="", help="kept with the revocation")
    revoke.set_defaults(handler=_revoke)

    charges = inner.add_parser("charges", help="a grant's ledger: each run it covered and what it was charged")
    common(charges)
    charges.add_argument("id", help="the grant's id (grt_...)")
    charges.add_argument("--limit", type=int, default=None, help="at most this many rows (default: all)")
    charges.set_defaults(handler=_charges)


# -- the connection ----------------------------------------------------------------------------------
def _token(args: argparse.Namespace) -> str:
    from orchestrator.domain.errors import InputInvalid

    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.read().strip()
        except (OSError, UnicodeDecodeError) as err:
            why = err.strerror if isinstance(err, OSError) and err.strerror else type(err).__name__
            raise InputInvalid(f"--token-file: cannot read it ({why})", details={"fields": ["--token-file"]}) from None
        if not token:
            raise InputInvalid("--token-file: the file is empty", details={"fields": ["--token-file"]})
        return token
    token = (args.token or "").strip() or os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise InputInvalid(
            f"no token: give --token-file PATH, set ${TOKEN_ENV}, or --token", details={"fields": ["--token"]}
        )
    return token


def _client(args: argparse.Namespace) -> Client:
    from orchestrator.client import Client
    from orchestrator.domain.errors import InputInvalid

    url = args.url or os.environ.get(URL_ENV) or DEFAULT_URL
    token = _token(args)
    try:
        return Client(url, token)
    except InputInvalid:
        raise InputInvalid("--url: http://host:port or https://host:port", details={"fields": ["--url"]}) from None


def _guarded(args: argparse.Namespace, action: str) -> int:
    """Run ``action`` against the service: every refusal is its code and exit status, never a traceback."""
    from orchestrator.domain.errors import OrchestratorError

    try:
        return _ACTIONS[action](args, _client(args))
    except OrchestratorError as err:
        return fail(err.code, err.message, err.exit_code, json_out=args.json)


# -- values ------------------------------------------------------------------------------------------
def _seconds(text: str, option: str) -> float:
    from orchestrator.domain.errors import InputInvalid

    match = _DURATION.match(text)
    value = float(match.group(1)) * _UNIT_S[match.group(2).lower()] if match else 0.0
    if value <= 0:
        raise InputInvalid(
            f"{option}: a positive number of seconds (or 90s, 30m, 8h, 7d)", details={"fields": [option]}
        )
    return value


def _count(text: str, option: str) -> int:
    from orchestrator.domain.errors import InputInvalid

    if not text.strip().isascii() or not text.strip().isdigit() or int(text) < 1:
        raise InputInvalid(f"{option}: a whole number, 1 or more", details={"fields": [option]})
    return int(text)


def _size(text: str, option: str) -> int:
    from orchestrator.domain.errors import InputInvalid
    from orchestrator.profiles.models import parse_size

    try:
        value = parse_size(text)
    except ValueError as err:
        raise InputInvalid(f"{option}: {err}", details={"fields": [option]}) from None
    if value < 1:
        raise InputInvalid(f"{option}: 1 byte or more", details={"fields": [option]})
    return value


def _request(args: argparse.Namespace) -> dict[str, object]:
    """The create body, from the options (the service checks it again and names the field)."""
    from datetime import datetime

    from orchestrator.domain.errors import InputInvalid

    conditions: dict[str, object] = {
        "tool": args.tool,
        "argv_prefix": args.argv_prefix,
        "argv_glob": args.argv_glob,
        "subject": args.subject,
        "profile": args.profile,
    }
    ci = {"job_key": args.ci_job_key, "repository": args.ci_repository}
    if any(v is not None for v in ci.values()):
        conditions["ci"] = {k: v for k, v in ci.items() if v is not None}
    budgets: dict[str, object] = {}
    if args.executions is not None:
        budgets["executions"] = _count(args.executions, "--executions")
    if args.cpu_seconds is not None:
        budgets["cpu_seconds"] = _seconds(args.cpu_seconds, "--cpu-seconds")
    if args.output_bytes is not None:
        budgets["output_bytes"] = _size(args.output_bytes, "--output-bytes")
    if args.wall_seconds is not None:
        budgets["wall_seconds"] = _seconds(args.wall_seconds, "--wall-seconds")
    body: dict[str, object] = {
        "tenant": args.tenant,
        "conditions": {k: v for k, v in conditions.items() if v is not None},
        "budgets": budgets,
        "reason": args.reason,
    }
    if args.on_exhausted is not None:
        body["on_exhausted"] = args.on_exhausted
    if args.ttl is not None:
        body["ttl_s"] = _seconds(args.ttl, "--ttl")
    if args.expires is not None:
        try:
            at = datetime.fromisoformat(args.expires)
        except ValueError:
            at = None
        if at is None or at.tzinfo is None:
            raise InputInvalid(
                "--expires: an ISO 8601 time with a zone, e.g. 2030-01-31T18:00:00Z", details={"fields": ["--expires"]}
            )
        body["expires_at"] = at.isoformat()
    if not budgets and args.ttl is None and args.expires is None:
        raise InputInvalid(
            "--ttl, --expires or a budget (--executions, --cpu-seconds, --output-bytes, --wall-seconds): a grant"
            " needs at least one",
            details={"fields": ["--ttl"]},
        )
    return body


# -- the actions -------------------------------------------------------------------------------------
def _create(args: argparse.Namespace) -> int:
    return _guarded(args, "create")


def _list(args: argparse.Namespace) -> int:
    return _guarded(args, "list")


def _show(args: argparse.Namespace) -> int:
    return _guarded(args, "show")


def _revoke(args: argparse.Namespace) -> int:
    return _guarded(args, "revoke")


def _charges(args: argparse.Namespace) -> int:
    return _guarded(args, "charges")


def _do_create(args: argparse.Namespace, client: Client) -> int:
    _show_grant(args, client.create_grant(_request(args)))
    return 0


def _do_list(args: argparse.Namespace, client: Client) -> int:
    grants = client.list_grants(state=args.state, tenant=args.tenant)
    if args.json:
        emit_json([g.model_dump(mode="json") for g in grants])
        return 0
    if not grants:
        say("no grants")
        return 0
    say(f"{'ID':<28}  {'TENANT':<16}  {'STATE':<9}  {'EXPIRES':<20}  {'LEFT':<40}  REASON")
    for g in grants:
        expires = g.expires_at.strftime("%Y-%m-%dT%H:%M:%SZ") if g.expires_at else "never"
        say(f"{g.id:<28}  {g.tenant:<16}  {g.state:<9}  {expires:<20}  {_left(g):<40}  {g.reason}")
    return 0


def _do_show(args: argparse.Namespace, client: Client) -> int:
    _show_grant(args, client.get_grant(args.id))
    return 0


def _do_revoke(args: argparse.Namespace, client: Client) -> int:
    _show_grant(args, client.revoke_grant(args.id, args.reason))
    return 0


def _do_charges(args: argparse.Namespace, client: Client) -> int:
    from orchestrator.domain.errors import InputInvalid

    if args.limit is not None and args.limit < 1:
        raise InputInvalid("--limit: 1 or more", details={"fields": ["--limit"]})
    rows: list[GrantCharge] = []
    cursor: str | None = None
    while True:  # page by page, up to --limit rows
        want = None if args.limit is None else min(args.limit - len(rows), 200)
        page = client.grant_charges(args.id, limit=want, cursor=cursor)
        rows.extend(page.items)
        cursor = page.next_cursor
        if cursor is None or (args.limit is not None and len(rows) >= args.limit):
            break
    if args.json:
        emit_json([r.model_dump(mode="json") for r in rows])
        return 0
    if not rows:
        say("no charges")
        return 0
    say(f"{'AT':<24}  {'EXECUTION':<36}  {'KIND':<8}  {'CPU S':>9}  {'WALL S':>9}  {'OUTPUT':>10}  STATE")
    for r in rows:
        c = r.charged
        at = r.at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        say(
            f"{at:<24}  {r.execution_id:<36}  {r.kind:<8}  {c.cpu_seconds:>9.3f}  {c.wall_seconds:>9.3f}"
            f"  {c.output_bytes:>10}  {r.state}"
        )
    return 0


_ACTIONS = {
    "create": _do_create,
    "list": _do_list,
    "show": _do_show,
    "revoke": _do_revoke,
    "charges": _do_charges,
}


# -- showing -----------------------------------------------------------------------------------------
def _left(g: GrantView) -> str:
    """What is left of each bounded budget, shortly: ``3/10 runs, 12.5/60 cpu s``."""
    parts = []
    r, b = g.remaining, g.budgets
    if b.executions is not None:
        parts.append(f"{r.executions}/{b.executions} runs")
    if b.cpu_seconds is not None:
        parts.append(f"{r.cpu_seconds:g}/{b.cpu_seconds:g} cpu s")
    if b.wall_seconds is not None:
        parts.append(f"{r.wall_seconds:g}/{b.wall_seconds:g} wall s")
    if b.output_bytes is not None:
        parts.append(f"{r.output_bytes}/{b.output_bytes} out B")
    return ", ".join(parts) or "no budget"


def _show_grant(args: argparse.Namespace, g: GrantView) -> None:
    if args.json:
        emit_json(g.model_dump(mode="json"))
        return
    conditions = g.conditions.model_dump(exclude_none=True)
    say(f"{g.id}  {g.state}  tenant {g.tenant}")
    say(f"  reason:     {g.reason}")
    say(f"  issued:     {g.created_at.isoformat(timespec='seconds')} by {g.created_by}")
    say(f"  expires:    {g.expires_at.isoformat(timespec='seconds') if g.expires_at else 'never'}")
    say(f"  conditions: {', '.join(f'{k}={v}' for k, v in conditions.items()) or 'any request of the tenant'}")
    say(f"  left:       {_left(g)}")
    if g.on_exhausted == "refuse":
        say("  a bound:    charges what it matches, approves nothing; refuses it (GRANT.EXHAUSTED) once spent")
    u, h = g.used, g.reserved
    say(
        f"  used:       {u.executions} runs, {u.cpu_seconds:g} cpu s, {u.wall_seconds:g} wall s,"
        f" {u.output_bytes} output bytes"
    )
    say(
        f"  reserved:   {h.executions} runs, {h.cpu_seconds:g} cpu s, {h.wall_seconds:g} wall s,"
        f" {h.output_bytes} output bytes"
    )
    if g.revoked_at is not None:
        say(f"  revoked:    {g.revoked_at.isoformat(timespec='seconds')} by {g.revoked_by}: {g.revoke_reason or '-'}")
