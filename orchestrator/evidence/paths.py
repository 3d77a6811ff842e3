"""Where the evidence file lives by default."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

APP_DIR = "sandbox-orchestrator"
FILE_NAME = "evidence.jsonl"


def default_evidence_path(environ: Mapping[str, str] | None = None) -> Path:
    """The evidence file: ``$SANDBOX_EVIDENCE_PATH``, else ``$SANDBOX_STATE_DIR/evidence.jsonl``, else
    ``$XDG_STATE_HOME/sandbox-orchestrator/evidence.jsonl``, else
    ``~/.local/state/sandbox-orchestrator/evidence.jsonl``. Empty variables count as unset, and so does a
    relative XDG_STATE_HOME (the XDG spec says to ignore it); ``~`` is expanded.
    """
    env = os.environ if environ is None else environ
    if explicit := env.get("SANDBOX_EVIDENCE_PATH"):
        return Path(explicit).expanduser()
    if state_dir := env.get("SANDBOX_STATE_DIR"):
        return Path(state_dir).expanduser() / FILE_NAME
    xdg = env.get("XDG_STATE_HOME")
    if xdg and Path(xdg).is_absolute():  # the XDG spec: relative values are invalid and ignored
        return Path(xdg).expanduser() / APP_DIR / FILE_NAME
    return Path.home() / ".local" / "state" / APP_DIR / FILE_NAME
