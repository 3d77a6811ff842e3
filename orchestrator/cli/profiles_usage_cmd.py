"""``sandboxctl profiles usage | recommend | whatif``: what a profile's runs used, the limits they call for, and
what a change would have done to them (``pipeline.profile_usage``; the rules in docs/profiles.md).

The runs come from a running service (its store: ``--url``, the token from ``--token-file``, ``--token`` or
``$SANDBOX_TOKEN``; an admin's token sees every tenant's runs, an approver's its own tenants') or, without a
service, from an evidence file (``--evidence PATH``, held against the profiles here under ``--config``'s caps).
``--json`` prints the very model the API answers with. Errors are ``sandboxctl: CODE: message`` with the code's
exit status, never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from orchestrator.cli.output import emit_json, fail
from orchestrator.domain.text import terminal_safe

if TYPE_CHECKING:
    from pydantic import BaseModel

    from orchestrator.client import Client
    from orchestrator.domain.usage import RunUsage
    from orchestrator.pipeline.profiles_of import Profiles

DEFAULT_URL = "http://127.0.0.1:8700"
URL_ENV = "SANDBOX_URL"
TOKEN_ENV = "SANDBOX_TOKEN"  # noqa: S105 - the variable's name, not a token
EXIT_OK = 0


def register(commands: Any) -> None:
    """Add ``usage``, ``recommend`` and ``whatif`` to ``sandboxctl profiles``."""

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("name", help="the profile")
        p.add_argument(
            "--since",
            metavar="WINDOW",
            help="runs that ended in the last 30m, 12h, 7d (default), 2w …",
        )
        source = p.add_mutually_exclusive_group()
        source.add_argument(
            "--evidence",
            nargs="?",
            const="",
            metavar="PATH",
            help="read the runs from this evidence file, no service (alone: the one `sandboxctl evidence` reads)",
        )
        source.add_argument("--url", default=None, help=f"the service (default: ${URL_ENV}, else {DEFAULT_URL})")
        p.add_argument("--token-file", metavar="PATH", help=f"a file holding the bearer token (or ${TOKEN_ENV})")
        p.add_argument("--token", help="the bearer token itself (visible in the process list: prefer --token-file)")
        p.add_argument("--config", metavar="PATH", help="with --evidence: the profiles under this config's caps")
        p.add_argument("--json", action="store_true", help="one JSON document on stdout (the API's model)")

    usage = commands.add_parser("usage", help="what a profile's runs used against its limits (percentiles, ends)")
    common(usage)
    usage.add_argument("--by", choices=["tenant", "tool", "ci_repository"], help="one group per tenant, tool or repo")
    usage.set_defaults(handler=_usage)

    recommend = commands.add_parser("recommend", help="limits a profile's runs call for, with the rule and a patch")
    common(recommend)
    recommend.add_argument("--min-runs", type=_at_least_one, default=20, metavar="N", help="runs a value needs (20)")
    recommend.set_defaults(handler=_recommend)

    whatif = commands.add_parser("whatif", help="replay a profile's runs under proposed limits")
    common(whatif)
    whatif.add_argument(
        "--set",
        action="append",
        required=True,
        metavar="KEY=VALUE",
        dest="proposed",
        help="a proposed `limits:` value: memory=512m, cpus=1, wall_timeout_s=600 … (repeatable)",
    )
    whatif.add_argument("--node-cpus", type=float, metavar="N", help="a node's allocatable cores (with --node-memory)")
    whatif.add_argument("--node-memory", metavar="SIZE", help="a node's allocatable memory: 8g (with --node-cpus)")
    whatif.set_defaults(handler=_whatif)


def _at_least_one(text: str) -> int:
    """--min-runs: a whole number from 1, as the API's min_runs (argparse says which option otherwise)."""
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


# -- the two sources of runs -------------------------------------------------------------------------------


def _local(args: argparse.Namespace) -> tuple[list[RunUsage], Profiles, float, float]:
    """The runs of the evidence file in the window, and the profiles here (under --config's caps)."""
    from pathlib import Path

    from orchestrator.domain.usage import window_start
    from orchestrator.evidence.paths import default_evidence_path
    from orchestrator.evidence.usage import read_usage
    from orchestrator.pipeline.profiles_of import Profiles
    from orchestrator.profiles import ProfileRegistry

    now = time.time()
    since = window_start(args.since, now)
    caps = None
    if args.config is not None:
        from orchestrator.pipeline.config import load_config

        caps = load_config(Path(args.config)).caps
    runs = list(read_usage(args.evidence or default_evidence_path(), profile=args.name, since=since))
    return runs, Profiles.under(caps, ProfileRegistry()), since, now


M = TypeVar("M")


def _remote(args: argparse.Namespace, call: Callable[[Client], M]) -> M:
    from orchestrator.client import Client
    from orchestrator.domain.errors import InputInvalid

    token = args.token or os.environ.get(TOKEN_ENV)
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = f.read().strip()
    if not token:
        raise InputInvalid(f"no token: give --token-file, --token or ${TOKEN_ENV} (or --evidence PATH, no service)")
    with Client(args.url or os.environ.get(URL_ENV) or DEFAULT_URL, token) as client:
        return call(client)


def _answer(args: argparse.Namespace, build: Callable[[], BaseModel], render: Callable[[Any], str]) -> int:
    from orchestrator.domain.errors import OrchestratorError

    try:
        answer = build()
    except OrchestratorError as err:
        return fail(err.code, err.message, err.exit_code, json_out=args.json)
    except OSError as err:
        return fail("INPUT.INVALID", f"{err.filename or 'file'}: {err.strerror or err}", 2, json_out=args.json)
    if args.json:
        emit_json(answer.model_dump(mode="json"))
    else:
        sys.stdout.write("".join(terminal_safe(line) + "\n" for line in render(answer).splitlines()))
    return EXIT_OK


# -- the three commands ---------------------------------------------------------------------------------------


def _usage(args: argparse.Namespace) -> int:
    from orchestrator.cli.usage_text import usage_text
    from orchestrator.domain.profile_usage import UsageReport
    from orchestrator.pipeline import profile_usage as answers

    def build() -> UsageReport:
        if args.evidence is None:
            return _remote(args, lambda c: c.profile_usage(args.name, since=args.since, by=args.by))
        runs, profiles, since, now = _local(args)
        return answers.usage(runs, profiles, args.name, since=since, until=now, by=args.by)

    return _answer(args, build, usage_text)


def _recommend(args: argparse.Namespace) -> int:
    from orchestrator.cli.usage_text import recommendation_text
    from orchestrator.domain.profile_usage import Recommendation
    from orchestrator.pipeline import profile_usage as answers

    def build() -> Recommendation:
        if args.evidence is None:
            return _remote(
                args, lambda c: c.profile_recommendation(args.name, since=args.since, min_runs=args.min_runs)
            )
        runs, profiles, _, _ = _local(args)
        return answers.recommendation(runs, profiles, args.name, min_runs=args.min_runs)

    return _answer(args, build, recommendation_text)


def _whatif(args: argparse.Namespace) -> int:
    from orchestrator.cli.usage_text import whatif_text
    from orchestrator.domain.errors import InputInvalid
    from orchestrator.domain.profile_usage import LimitsProposal, NodeSize, WhatIfProposal, WhatIfReport
    from orchestrator.pipeline import profile_usage as answers
    from orchestrator.profiles.limit_keys import parse_limits
    from orchestrator.profiles.models import parse_size

    def build() -> WhatIfReport:
        typed: dict[str, str] = {}
        for item in args.proposed:
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise InputInvalid(f"--set {item!r}: KEY=VALUE, e.g. memory=512m", details={"fields": ["set"]})
            typed[key.strip()] = value.strip()
        proposed = parse_limits(typed)  # as a profile file writes them: memory=512m; INPUT.INVALID naming the key
        node = None
        if (args.node_cpus is None) != (args.node_memory is None):
            raise InputInvalid("--node-cpus and --node-memory go together", details={"fields": ["node"]})
        if args.node_cpus is not None:
            try:
                node = NodeSize(cpus=args.node_cpus, memory_bytes=parse_size(args.node_memory))
            except ValueError as err:
                raise InputInvalid(f"node: {err}", details={"fields": ["node"]}) from None
        if args.evidence is None:
            body = WhatIfProposal(set=LimitsProposal(**proposed), since=args.since, node=node)
            return _remote(args, lambda c: c.profile_whatif(args.name, body))
        runs, profiles, _, _ = _local(args)
        return answers.what_if(runs, profiles, args.name, proposed=proposed, node=node)

    return _answer(args, build, whatif_text)
