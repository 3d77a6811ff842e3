from __future__ import annotations

import os

# The project's scripts (the test cluster) keep using the machine's state dir, where their builds are cached.
os.environ.setdefault("SO_TESTS_HOST_STATE_DIR", os.environ.get("SANDBOX_STATE_DIR", ""))
# Tests must never reach a user's real evidence or state.
os.environ.setdefault("SANDBOX_STATE_DIR", "/tmp/sandbox-orchestrator-tests-state")

pytest_plugins = ["kube_fixtures"]
