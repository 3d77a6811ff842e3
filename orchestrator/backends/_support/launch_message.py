"""The launch message a pooled sandbox's init waits for (``images/init/sandbox-init.c``, its format).

The orchestrator writes it to the sandbox's stdin (Docker: the engine's attach stream it opened before the
container started; Kubernetes: a pipe, through the writer exec'd in the pod's sidecar): argv, the
environment (set over what the engine gave the init: the image's), the working directory, and whether the
command reads the rest of that stream (its stdin) or /dev/null. Encoded here, checked again by the init.

A launch may carry a report token (``new_report_token``): an init that cannot run the command says why on
stderr under it, a line only that init can write (``init_refusal``), so the caller can tell "the command
never ran" from anything the command itself prints, and answer as a cold start that failed.
"""

from __future__ import annotations

import re
import secrets
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.backends._support.spec_checks import check_spec
from orchestrator.backends.base import CommandLaunch, LaunchSpec, SessionLaunch, StreamCapture
from orchestrator.domain.errors import InputInvalid

#: where our images keep the init (root-owned, read-only like the rest of the image)
INIT_PATH = "/usr/lib/sandbox-orchestrator/sandbox-init"
MAGIC = b"SBX3"
MAX_PAYLOAD = 1024 * 1024
MAX_ITEMS = 4096
REPORT_LEN = 32  # hex digits of a report token
#: the descriptor a supervising init reports the command's end on (the message's status field)
STATUS_FD = "3"
_TOKEN = re.compile(rb"[0-9a-f]{%d}" % REPORT_LEN)


def new_report_token() -> str:
    """A fresh token for one launch: unguessable, so no command can write the init's refusal line."""
    return secrets.token_hex(REPORT_LEN // 2)


def launch_message(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str,
    *,
    with_stdin: bool,
    report: str = "",
    status_channel: bool = False,
) -> bytes:
    """The message for ``argv`` run in ``cwd`` with ``env`` (``report``: "" or a ``new_report_token``;
    ``status_channel``: the init supervises the command and reports its end on descriptor 3, see
    ``init_status``); INPUT.INVALID past the init's bounds (MAX_ITEMS arguments or variables, MAX_PAYLOAD
    bytes) or for what it cannot carry (NUL)."""
    if report and not _TOKEN.fullmatch(report.encode("ascii", "replace")):
        raise ValueError("a report token is REPORT_LEN lowercase hex digits")
    if status_channel and not report:
        raise ValueError("a status channel needs a report token: its line is the init's by the token")
    if not argv or not argv[0]:
        raise InputInvalid("argv must not be empty", details={"field": "argv"})
    if not cwd.startswith("/"):
        raise InputInvalid("the working directory must be absolute", details={"field": "workdir"})
    if len(argv) > MAX_ITEMS or len(env) > MAX_ITEMS:
        raise InputInvalid(f"at most {MAX_ITEMS} arguments and {MAX_ITEMS} variables", details={"field": "argv"})
    entries = [f"{name}={value}" for name, value in env.items()]
    if any(not name or "=" in name for name in env):
        raise InputInvalid("environment names must be non-empty without '='", details={"field": "env"})
    status = STATUS_FD if status_channel else ""
    parts = [report, status, "stdin" if with_stdin else "null", cwd, str(len(argv)), *argv, str(len(entries)), *entries]
    encoded = [part.encode("utf-8", "surrogateescape") for part in parts]
    if any(b"\0" in part for part in encoded):
        raise InputInvalid("argv, env and the working directory cannot hold NUL", details={"field": "argv"})
    payload = b"".join(part + b"\0" for part in encoded)
    if len(payload) > MAX_PAYLOAD:
        raise InputInvalid(
            f"argv and env take {len(payload)} bytes, more than a pooled launch carries ({MAX_PAYLOAD})",
            details={"field": "argv"},
        )
    return MAGIC + struct.pack(">I", len(payload)) + payload


def spec_launch_message(spec: LaunchSpec, *, report: str = "", status_channel: bool = False) -> bytes:
    """The launch message of ``spec`` for a waiting sandbox (validated like a cold run's spec): a one-shot
    command, or a session's (its stdin is what the session sends after the message); INPUT.INVALID for a
    terminal, which a waiting sandbox does not have."""
    if not isinstance(spec.kind, CommandLaunch | SessionLaunch) or spec.kind.tty:
        raise InputInvalid("a pooled sandbox runs a command without a terminal", details={"field": "tty"})
    check_spec(spec)
    return launch_message(
        spec.argv,
        spec.env,
        spec.workdir,
        with_stdin=spec.stdin is not None or spec.session,
        report=report,
        status_channel=status_channel,
    )


def fits_launch(spec: LaunchSpec) -> bool:
    """Whether ``spec`` can be launched into a waiting sandbox: a command (one-shot or a session's) without a
    terminal whose argv, env and working directory a launch message carries (every backend's ``fits_launch``)."""
    try:
        spec_launch_message(spec)
    except InputInvalid:
        return False
    return True


@dataclass(frozen=True, slots=True)
class InitRefusal:
    """Why a pooled sandbox's init ran nothing, from its own stderr line."""

    status: int  # its exit: 125 a bad message or working directory, 126 the program cannot run, 127 not found
    reason: str  # the init's words, after its prefix


def init_refusal(report: str, stdout: StreamCapture, stderr: StreamCapture) -> InitRefusal | None:
    """The init's refusal, when the output is that and nothing else: no stdout, stderr beginning with the
    line under ``report`` (only the init that read this launch's message knows the token, and it writes
    that line only in place of running the command). None for anything else: the command ran."""
    if not report or stdout.total_bytes or stderr.truncated:
        return None
    found = re.match(rb"sandbox-init\[%s:(12[567])\]: " % re.escape(report.encode()), stderr.data)
    if found is None:
        return None
    reason = stderr.data[found.end() :].decode("utf-8", "replace").rstrip("\n")
    return InitRefusal(status=int(found.group(1)), reason=reason)
