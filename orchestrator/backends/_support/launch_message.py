"""The launch message a pooled sandbox's init waits for (``images/init/sandbox-init.c``, its format).

The orchestrator writes it to the sandbox's stdin (Docker: the engine's attach stream it opened before the
container started; Kubernetes: a pipe, through the writer exec'd in the pod's sidecar): argv, the
environment (set over what the engine gave the init: the image's), the working directory, and whether the
command reads the rest of that stream (its stdin) or /dev/null. Encoded here, checked again by the init.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

from orchestrator.backends._support.spec_checks import check_spec
from orchestrator.backends.base import LaunchSpec
from orchestrator.domain.errors import InputInvalid

#: where our images keep the init (root-owned, read-only like the rest of the image)
INIT_PATH = "/usr/lib/sandbox-orchestrator/sandbox-init"
MAGIC = b"SBX1"
MAX_PAYLOAD = 1024 * 1024
MAX_ITEMS = 4096


def launch_message(argv: Sequence[str], env: Mapping[str, str], cwd: str, *, with_stdin: bool) -> bytes:
    """The message for ``argv`` run in ``cwd`` with ``env``; INPUT.INVALID past the init's
    bounds (MAX_ITEMS arguments or variables, MAX_PAYLOAD bytes) or for what it cannot carry (NUL)."""
    if not argv or not argv[0]:
        raise InputInvalid("argv must not be empty", details={"field": "argv"})
    if not cwd.startswith("/"):
        raise InputInvalid("the working directory must be absolute", details={"field": "workdir"})
    if len(argv) > MAX_ITEMS or len(env) > MAX_ITEMS:
        raise InputInvalid(f"at most {MAX_ITEMS} arguments and {MAX_ITEMS} variables", details={"field": "argv"})
    entries = [f"{name}={value}" for name, value in env.items()]
    if any(not name or "=" in name for name in env):
        raise InputInvalid("environment names must be non-empty without '='", details={"field": "env"})
    parts = ["stdin" if with_stdin else "null", cwd, str(len(argv)), *argv, str(len(entries)), *entries]
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


def spec_launch_message(spec: LaunchSpec) -> bytes:
    """The launch message of a one-shot ``spec`` for a pooled sandbox (validated like a cold run's spec);
    INPUT.INVALID for a terminal or a session, which a pooled sandbox does not run."""
    if spec.tty or spec.interactive:
        raise InputInvalid("a pooled sandbox runs a command without a terminal or session", details={"field": "tty"})
    check_spec(spec)
    return launch_message(spec.argv, spec.env, spec.workdir, with_stdin=spec.stdin is not None)
