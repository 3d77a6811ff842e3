from __future__ import annotations

import os
import signal

# The project's scripts (the test cluster) keep using the machine's state dir, where their builds are cached.
os.environ.setdefault("SO_TESTS_HOST_STATE_DIR", os.environ.get("SANDBOX_STATE_DIR", ""))
# Tests must never reach a user's real evidence or state.
os.environ.setdefault("SANDBOX_STATE_DIR", "/tmp/sandbox-orchestrator-tests-state")

# A run started in the background by a shell without job control has SIGINT ignored, and every process it
# starts inherits that (a shell cannot even trap it): the tests that interrupt a CLI or a sandbox's command
# with Ctrl-C need it delivered. A handler here is reset to the default in every program the tests exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# Likewise SIGHUP under nohup: the tests that relay it to a command need the command to see it. A handler
# that does nothing keeps this run as nohup wanted it, while every program it execs gets the default.
if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN:
    signal.signal(signal.SIGHUP, lambda _signum, _frame: None)

pytest_plugins = ["tests.support.kube"]
