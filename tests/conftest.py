from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.engine import engine_exclusive, engine_shared

# The project's scripts (the test cluster) keep using the machine's state dir, where their builds are cached.
os.environ.setdefault("SO_TESTS_HOST_STATE_DIR", os.environ.get("SANDBOX_STATE_DIR", ""))
# Tests must never reach a user's real evidence or state.
# Each pytest-xdist worker has its own (state files are per process: one run's key, queue and store).
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
os.environ.setdefault("SANDBOX_STATE_DIR", "/tmp/sandbox-orchestrator-tests-state" + (f"-{_WORKER}" if _WORKER else ""))

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


# Under pytest-xdist (make test), the tests that wait on the same daemon run one after another on one worker,
# as they would alone (they share the engine's or the cluster's capacity, and some time what they see); the
# tiers run beside each other and the unit tests fill the other workers. First match wins.
XDIST_GROUPS: tuple[tuple[str, str, str], ...] = (
    # (marker, path prefix under tests/, group)
    # the cluster's containment battery beside its other tests: the node fits two 1-CPU pods at once
    ("k8s", "integration/test_containment", "k8s-containment"),
    ("k8s", "", "k8s"),
    ("integration", "api/", "docker-api"),
    ("integration", "ci/", "docker-api"),  # the CI front doors drive the service too
    ("integration", "mcp/", "docker-api"),  # so does the MCP front door
    ("firsthour", "", "first-hour"),
    ("integration", "", "docker"),
)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its worker suffixes each grouped test's id)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:  # before -m selects: a `long_on_kubernetes` test's Kubernetes variant is `long`
        callspec = getattr(item, "callspec", None)
        on_kubernetes = callspec is not None and callspec.params.get("where") == "kubernetes"
        if on_kubernetes and item.get_closest_marker("long_on_kubernetes") is not None:
            item.add_marker(pytest.mark.long)
    if not config.pluginmanager.hasplugin("xdist"):
        return
    tests = Path(__file__).parent
    for item in items:
        where = item.path.relative_to(tests).as_posix()
        for marker, prefix, group in XDIST_GROUPS:
            if item.get_closest_marker(marker) is not None and where.startswith(prefix):
                item.add_marker(pytest.mark.xdist_group(group))
                break


@pytest.fixture(autouse=True)
def _engine_in_use(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test on the engine (the Docker tier; the cluster's tests build and import images from it) holds it
    shared; the engine-restart tests (test_faults) and those marked ``engine_exclusive`` hold it alone: they
    wait until the running tests end, and no test starts meanwhile."""
    on_engine = request.node.get_closest_marker("integration") or request.node.get_closest_marker("k8s")
    if request.node.get_closest_marker("engine_exclusive") is not None:
        # it kills a controller and judges who collects its orphans: no other test's reaper may take them
        with engine_exclusive():
            yield
    elif not on_engine or "restarted" in request.fixturenames:  # the restart fixture takes the engine itself
        yield
    else:
        with engine_shared():
            yield
