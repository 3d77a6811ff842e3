from __future__ import annotations

import os

# Tests must never reach a user's real evidence or state.
os.environ.setdefault("SANDBOX_STATE_DIR", "/tmp/sandbox-orchestrator-tests-state")
