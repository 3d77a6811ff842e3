"""sandboxctl mcp: the MCP server over stdio (docs/mcp.md), for an agent host or an IDE that starts it."""

from __future__ import annotations

import argparse
import os

from orchestrator.cli.output import Subparsers


def register(sub: Subparsers) -> None:
    mcp = sub.add_parser(
        "mcp",
        help="serve the MCP tools over stdio (run, exec_command, write_stdin, file tools)",
        description="An MCP server on stdin/stdout. Without --url it runs the governed path in this process with"
        " the local config (asks wait in its approval queue); with --url it forwards every call to that"
        " controller with the token. The controller itself serves the same tools at /mcp (Streamable HTTP).",
    )
    mcp.add_argument(
        "--config", default=os.environ.get("SANDBOX_CONFIG"), metavar="FILE", help="config file ($SANDBOX_CONFIG)"
    )
    mcp.add_argument("--url", default=None, help="forward to this controller (default: run in this process)")
    mcp.add_argument("--token-file", metavar="PATH", help="with --url: a file holding the bearer token")
    mcp.add_argument("--token", help="with --url: the token itself (visible in the process list: prefer a file)")
    mcp.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from pathlib import Path

    from orchestrator.cli.grants_cmd import _token
    from orchestrator.domain.errors import InputInvalid
    from orchestrator.mcp.stdio import serve_stdio

    if args.url is None and (args.token or args.token_file):
        raise InputInvalid("--token and --token-file go with --url", details={"fields": ["--url"]})
    token = _token(args) if args.url is not None else None
    return serve_stdio(Path(args.config) if args.config else None, args.url, token)
