"""sandboxctl check: print the gate's decision for a request without running anything."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from orchestrator.cli.output import Subparsers, emit_json

if TYPE_CHECKING:
    from pathlib import Path

ARGV_TOOLS = ("shell_exec", "shell", "skill_exec")
STRING_TOOLS = ("shell_command", "exec_command")


def add_request_arguments(p: argparse.ArgumentParser) -> None:
    """Arguments shared by `check` and `run`: what is asked and how."""
    p.add_argument("--config", metavar="FILE", help="orchestrator YAML config (default: built-in policy)")
    p.add_argument(
        "--tool",
        choices=(*ARGV_TOOLS, *STRING_TOOLS),
        help="tool alias (default: shell_exec for ARGV, shell_command for --shell)",
    )
    p.add_argument("--shell", metavar="STRING", help="a shell command string instead of ARGV")
    p.add_argument("--cwd", help="working directory, relative to the workspace")
    p.add_argument("--env", action="append", default=[], metavar="K=V", help="environment (values never shown)")
    p.add_argument("--profile", help="execution profile")
    p.add_argument("--skill", default="cli", help="skill name for --tool skill_exec")
    p.add_argument("--tenant", default="default")
    p.add_argument("--subject", default=None, help="who asks (default: the current user)")
    p.add_argument(
        "--network",
        action="append",
        default=[],
        metavar="HOST:PORT",
        help="a host the command must reach through the egress proxy (repeatable; asked about unless the policy "
        "allows it): pypi.org:443, *.example.com:443",
    )
    p.add_argument("--ask-network", action="store_true", help="ask for unrestricted network (never given)")
    p.add_argument("--retry-of", metavar="ID", help="the SANDBOX.RESTRICTED execution this one retries")
    p.add_argument("--ask-writable-root", action="store_true", help="ask for a writable root (an escalation)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("argv", nargs="*", metavar="-- ARGV", help="the command, after --")


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "check",
        help="print the policy decision for a command without running it",
        description="Decide a request (allow / ask / deny) and explain why. Nothing runs. "
        "Exit 0 whenever a decision was made; 2 on invalid input or config.",
    )
    add_request_arguments(p)
    p.add_argument("--workspace", default=None, help="workspace for path analysis (default: current dir)")
    p.set_defaults(handler=handle)


def workspace_from_args(args: argparse.Namespace) -> Path:
    """--workspace, else the current directory, resolved: a path the engine can take (UTF-8 text)."""
    import os
    from pathlib import Path

    from orchestrator.domain.errors import InputInvalid
    from orchestrator.domain.text import has_surrogates

    workspace = Path(args.workspace or os.getcwd()).resolve()
    if has_surrogates(str(workspace)):
        what = "--workspace" if args.workspace else "the current directory (the default workspace)"
        raise InputInvalid(f"{what} is not valid UTF-8: give --workspace a directory whose path is UTF-8 text")
    return workspace


def request_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The raw request dict; validation (and INPUT.INVALID) happens in parse_request."""
    import getpass

    from orchestrator.domain.errors import InputInvalid

    argv = list(args.argv)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if args.shell is not None and argv:
        raise InputInvalid("give either ARGV after -- or --shell STRING, not both")
    if args.shell is None and not argv:
        raise InputInvalid("nothing to decide: give ARGV after -- or --shell STRING")
    tool = args.tool or ("shell_command" if args.shell is not None else "shell_exec")
    if args.shell is not None and tool not in STRING_TOOLS:
        raise InputInvalid(f"--tool {tool} takes ARGV after --, not --shell")
    if args.shell is None and tool not in ARGV_TOOLS:
        raise InputInvalid(f"--tool {tool} takes --shell STRING, not ARGV")
    env: dict[str, str] = {}
    for number, item in enumerate(args.env, start=1):
        key, sep, value = item.partition("=")
        if not sep:
            # never echo the argument: it may be a secret typed with ':' instead of '='
            raise InputInvalid(f"--env #{number} is not of the form K=V")
        env[key] = value
    try:
        subject = args.subject or getpass.getuser()
    except (KeyError, OSError):
        subject = "anonymous"
    raw: dict[str, Any] = {
        "tool": tool,
        "cwd": args.cwd,
        "env": env,
        "profile": args.profile,
        "tenant": args.tenant,
        "subject": subject,
        "sandbox_permissions": {
            "network": args.network or args.ask_network,
            "writable_root": args.ask_writable_root,
        },
    }
    if args.retry_of:
        raw["retry_of"] = args.retry_of
    if tool in ("shell_exec", "skill_exec"):
        raw["argv"] = argv
    if tool == "skill_exec":
        raw["skill"] = args.skill
    if tool == "shell":
        raw["command"] = argv
    if tool == "shell_command":
        raw["command"] = args.shell
    if tool == "exec_command":
        raw["cmd"] = args.shell
    return raw


def handle(args: argparse.Namespace) -> int:
    import shlex
    from pathlib import Path

    from orchestrator.domain.requests import parse_request
    from orchestrator.domain.text import printable
    from orchestrator.gate.gate import Gate
    from orchestrator.gate.policy import PolicySource
    from orchestrator.pipeline.config import load_config
    from orchestrator.pipeline.profiles_of import profile_egress
    from orchestrator.profiles import ProfileRegistry

    config = Path(args.config) if args.config else None
    if config is not None:
        load_config(config)  # the whole file must be valid, not only its safety section
    request = parse_request(request_from_args(args))
    gate = Gate(PolicySource(config), workspace=workspace_from_args(args))
    result = gate.evaluate(request, profile_egress=profile_egress(ProfileRegistry(), request, gate.default_profile))
    if args.json:
        emit_json(result.to_json())
        return 0
    d = result.decision
    p = printable  # every line quotes what the request chose: nothing a terminal would act on
    lines = [
        f"decision:     {d.decision.value}",
        f"reason:       {p(d.reason)}",
        f"matched_rule: {p(str(d.matched_rule))}",
        f"risk:         {p(d.risk.risk_level)} ({p(d.risk.reason)})",
    ]
    if d.intent is not None:
        argv = p(shlex.join(d.intent.argv)) if d.intent.argv is not None else "-"
        kind = "complex" if d.intent.is_complex else "simple"
        lines.append(f"intent:       {argv}  [{kind}: {p(d.intent.reason)}]")
    lines.append(f"approval_key: {result.approval_key}")
    lines.append(f"policy:       {d.policy_version_hash[:16]}")
    print("\n".join(lines))
    return 0
