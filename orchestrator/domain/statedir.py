"""Where this user's state lives (evidence, approvals, the warm server's socket). Pure: a path from the
environment; nothing is created here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

APP_DIR = "sandbox-orchestrator"


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$SANDBOX_STATE_DIR``, else ``$XDG_STATE_HOME/sandbox-orchestrator``, else
    ``~/.local/state/sandbox-orchestrator``. Empty variables count as unset, and so does a relative
    XDG_STATE_HOME (the XDG spec says to ignore it); ``~`` is expanded."""
    env = os.environ if environ is None else environ
    if state_dir := env.get("SANDBOX_STATE_DIR"):
        return Path(state_dir).expanduser()
    xdg = env.get("XDG_STATE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg).expanduser() / APP_DIR
    return Path.home() / ".local" / "state" / APP_DIR
