"""The controller image in tests: built by the project's own script, started with testcontainers the way
it is meant to run (read-only root, tmpfs /tmp, a writable state dir, no capabilities). Shared by the
image's tests and by tests of the service through the image (the fixtures are in conftest.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import tomllib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import pytest
from testcontainers.core.config import testcontainers_config
from testcontainers.core.container import DockerContainer

from orchestrator.backends.docker.endpoint import discover_endpoint
from tests.support.paths import ROOT

# testcontainers' reaper is an image from a registry, which this engine can never pull: the fixtures
# remove what they start themselves.
testcontainers_config.ryuk_disabled = True

REPO = ROOT
BUILD_SCRIPT = REPO / "scripts" / "build-controller.sh"
IMAGE = "sandbox-orchestrator/controller"
UID = 10001
STATE_DIR = "/var/lib/sandbox-orchestrator"
CONFIG = "/etc/sandbox-orchestrator/config.yaml"
PORT = 8700
TEST_LABEL = "org.sandbox-orchestrator.test-owner"
BUILD_TIMEOUT_S = 1800  # a cold build: apt in the first stage, the wheels, pip install


def version() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def build_image() -> str:
    """``scripts/build-controller.sh`` (what `make image` runs once the engine is set up): a no-op when
    the image already carries this checkout's hashes. Returns the image's tag."""
    # The engine the tests use; the script keeps its wheel cache in the tests' state dir.
    env = {**os.environ, "DOCKER_HOST": discover_endpoint().url}
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    if proc.returncode != 0:
        pytest.fail(f"{BUILD_SCRIPT.name} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return f"{IMAGE}:{version()}"


def engine_client() -> docker.DockerClient:
    return docker.DockerClient(base_url=discover_endpoint().url)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def health_test(port: int) -> list[str]:
    """The image's HEALTHCHECK command with another port (for a controller on the host's network)."""
    url = f"http://127.0.0.1:{port}/healthz"
    code = f"import sys, urllib.request as u; sys.exit(u.urlopen('{url}', timeout=4).status != 200)"
    return ["CMD", "/usr/bin/python3", "-I", "-c", code]


@dataclass
class Controller:
    container: DockerContainer
    base_url: str | None  # http://127.0.0.1:PORT when started with a port

    def exec(self, *argv: str) -> tuple[int, str]:
        """Runs argv in the container as the image's user: (exit status, stdout and stderr)."""
        result = self.container.exec(list(argv))
        return result.exit_code, result.output.decode("utf-8", "replace")

    def health(self) -> str | None:
        container = self.container.get_wrapped_container()
        container.reload()
        state = container.attrs["State"]
        return state["Health"]["Status"] if "Health" in state else None

    def wait_health(self, status: str, timeout_s: float = 30.0) -> None:
        """Until the engine reports ``status`` (healthy, unhealthy) for the image's HEALTHCHECK."""
        deadline = time.monotonic() + timeout_s
        while (seen := self.health()) != status:
            if time.monotonic() > deadline:
                logs = b"".join(self.container.get_logs()).decode("utf-8", "replace")
                pytest.fail(f"health {seen!r}, not {status!r}, after {timeout_s}s; logs:\n{logs[-2000:]}")
            time.sleep(0.2)


@dataclass
class Controllers:
    """Starts controller containers; ``remove_all`` removes every one it started, and their volumes."""

    image: str
    started: list[Controller] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    owner: str = field(default_factory=lambda: f"pytest:{os.getpid()}")

    def start(
        self,
        command: list[str] | None = None,
        *,
        port: int | None = None,
        engine: bool = False,
        state_volume: bool = False,
        env: Mapping[str, str] | None = None,
        health_interval_s: float | None = None,
        user: str | None = None,
        shared: Path | None = None,
    ) -> Controller:
        """A controller as deployed: read-only root, tmpfs on /tmp, the state dir on a tmpfs owned by the
        service's user (or a fresh named volume), all capabilities dropped, no-new-privileges.

        - ``command``: default, the image's CMD (``sandboxctl serve`` on 0.0.0.0:8700); with ``port``,
          ``serve`` on 127.0.0.1:PORT.
        - ``port``: the container shares the host's network and ``base_url`` is http://127.0.0.1:PORT (an
          engine without a bridge cannot publish ports); the HEALTHCHECK is pointed at that port.
          Without one the container has no network at all (only its own loopback).
        - ``engine``: the engine's unix socket mounted at /var/run/docker.sock, with its group.
        - ``health_interval_s``: run the image's HEALTHCHECK that often (and from the start) instead of
          every 30 s after a 30 s grace period.
        - ``user``: run as this uid:gid instead of the image's user.
        - ``shared``: a host directory mounted at the same path (the engine resolves the sandboxes' bind
          mounts — workspaces, the state dir — on its host, so they must have the same paths in both).
        """
        endpoint = discover_endpoint()
        tmpfs = {"/tmp": "size=64m"}
        volumes: list[tuple[str, str, str]] = []
        if state_volume:
            self.volumes.append(f"so-test-state-{uuid.uuid4().hex[:12]}")
            volumes.append((self.volumes[-1], STATE_DIR, "rw"))
        else:
            tmpfs[STATE_DIR] = f"size=64m,uid={UID},gid={UID},mode=0700"
        kwargs: dict[str, Any] = {
            "read_only": True,
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "network_mode": "host" if port is not None else "none",
            "labels": {TEST_LABEL: self.owner},
        }
        if user is not None:
            kwargs["user"] = user
        if shared is not None:
            volumes.append((str(shared), str(shared), "rw"))
        if engine:
            if not endpoint.is_local_socket:
                pytest.skip(f"the engine at {endpoint.url} is not a local socket to mount")
            socket_path = endpoint.url.removeprefix("unix://")
            volumes.append((socket_path, "/var/run/docker.sock", "rw"))
            kwargs["group_add"] = [os.stat(socket_path).st_gid]
        healthcheck: dict[str, Any] = {}
        if port is not None:
            healthcheck["test"] = health_test(port)
            if command is None:
                command = ["sandboxctl", "serve", "--host", "127.0.0.1", "--port", str(port), "--config", CONFIG]
        if health_interval_s is not None:
            nanoseconds = int(health_interval_s * 1e9)
            healthcheck.update(interval=nanoseconds, timeout=5 * 10**9, start_period=10**6, retries=3)
        if healthcheck:
            kwargs["healthcheck"] = healthcheck
        # testcontainers reads the engine from DOCKER_HOST (and guesses networks without it).
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("DOCKER_HOST", endpoint.url)
            container = DockerContainer(self.image, command=command, env=dict(env or {}), volumes=volumes)
            container.tmpfs = tmpfs
            container.with_kwargs(**kwargs)
            controller = Controller(container, f"http://127.0.0.1:{port}" if port is not None else None)
            self.started.append(controller)  # removed at the end even if it fails to start
            container.start()
        return controller

    def remove_all(self) -> None:
        for controller in self.started:
            controller.container.stop()
        self.started.clear()
        client = engine_client()
        try:
            for name in self.volumes:
                client.volumes.get(name).remove(force=True)
            self.volumes.clear()
            left = client.containers.list(all=True, filters={"label": f"{TEST_LABEL}={self.owner}"})
        finally:
            client.close()
        assert not left, f"controller containers left on the engine: {[c.name for c in left]}"
