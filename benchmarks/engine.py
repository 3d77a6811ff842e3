"""The Docker engine a benchmark talks to: the one the project's own code finds.

``discover_endpoint`` (orchestrator/backends/docker/endpoint.py) resolves it as ``DockerBackend`` and the
tests do: ``$DOCKER_HOST``, else the docker-host file ``make setup`` writes, else the default socket. The
in-process sides get it from ``DockerBackend()``; a side that runs the ``docker`` CLI (the bare baselines)
or a child process with a state dir of its own (``sandboxctl serve``) gets it from ``docker_env()``, so no
benchmark depends on the caller's shell having run ``eval "$(scripts/engine-env.sh)"``.
"""

from __future__ import annotations

import os
import shutil

from orchestrator.backends.docker import discover_endpoint


def engine_url() -> str:
    """The engine's URL, as ``DockerBackend()`` finds it."""
    return str(discover_endpoint().url)


def docker_env(**extra: str) -> dict[str, str]:
    """This process's environment with ``DOCKER_HOST`` set to the engine (for the ``docker`` CLI and for
    child processes that run with a ``SANDBOX_STATE_DIR`` of their own), plus ``extra``."""
    return {**os.environ, "DOCKER_HOST": engine_url(), **extra}


def docker_cli() -> str:
    """The ``docker`` CLI (``make setup`` installs it with the engine)."""
    found = shutil.which("docker")
    if found is None:
        raise SystemExit("no docker CLI on PATH: run `make setup`")
    return found
