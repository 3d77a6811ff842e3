"""Where the evidence file lives by default."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from orchestrator.domain.statedir import state_dir

FILE_NAME = "evidence.jsonl"


def default_evidence_path(environ: Mapping[str, str] | None = None) -> Path:
    """The evidence file: ``$SANDBOX_EVIDENCE_PATH``, else ``evidence.jsonl`` in the state directory
    (see :func:`orchestrator.domain.statedir.state_dir`); ``~`` is expanded."""
    env = os.environ if environ is None else environ
    if explicit := env.get("SANDBOX_EVIDENCE_PATH"):
        return Path(explicit).expanduser()
    return Path(state_dir(env)) / FILE_NAME
