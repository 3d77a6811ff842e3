"""sandboxctl serve: the HTTP service (the API, the approvals page, metrics)."""

from __future__ import annotations

import argparse
import os

from orchestrator.cli.output import Subparsers


def register(sub: Subparsers) -> None:
    serve = sub.add_parser("serve", help="run the HTTP service: API, approvals page, metrics")
    serve.add_argument(
        "--config", default=os.environ.get("SANDBOX_CONFIG"), metavar="FILE", help="config file ($SANDBOX_CONFIG)"
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8700, help="port (default 8700)")
    serve.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    from orchestrator.api import serve
    from orchestrator.domain.errors import InputInvalid

    if not 0 < args.port < 65536:
        raise InputInvalid("--port must be 1-65535")
    # the service's own news (where it listens, what it recovered) is for the operator's console
    logging.getLogger("orchestrator").setLevel(logging.INFO)
    return serve(Path(args.config) if args.config else None, args.host, args.port)
