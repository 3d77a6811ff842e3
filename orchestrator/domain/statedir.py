"""Where this user's state lives (evidence, approvals, the warm server's socket). Pure: a path from the
environment; nothing is created here. ``os.path`` only: the `sandboxctl` entry point imports this."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

APP_DIR = "sandbox-orchestrator"


def state_dir(environ: Mapping[str, str] | None = None) -> str:
    """``$SANDBOX_STATE_DIR``, else ``$XDG_STATE_HOME/sandbox-orchestrator``, else
    ``~/.local/state/sandbox-orchestrator``. Empty variables count as unset, and so does a relative
    XDG_STATE_HOME (the XDG spec says to ignore it); ``~`` is expanded."""
    env = os.environ if environ is None else environ
    if explicit := env.get("SANDBOX_STATE_DIR"):
        return os.path.expanduser(explicit)
    xdg = env.get("XDG_STATE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(os.path.expanduser(xdg), APP_DIR)
    return os.path.join(os.path.expanduser("~"), ".local", "state", APP_DIR)
