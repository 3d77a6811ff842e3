"""Which Docker engine to talk to.

Order (the same as ``scripts/setup.sh`` records and ``docs/setup-notes.md`` describes):

1. an explicit ``base_url``;
2. ``$DOCKER_HOST`` when set and not empty;
3. the file ``$SANDBOX_STATE_DIR/docker-host`` (one line, a DOCKER_HOST URL) written by ``make setup``;
4. the file ``/var/lib/sandbox-orchestrator/docker-host`` — checked as well because tests (and users)
   point ``SANDBOX_STATE_DIR`` at a private directory while the engine's record stays in the default one;
5. the default socket ``unix:///var/run/docker.sock``.

No I/O beyond reading those small files; nothing here imports the docker SDK.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_STATE_DIR = "/var/lib/sandbox-orchestrator"
DEFAULT_SOCKET_URL = "unix:///var/run/docker.sock"
HOST_FILE_NAME = "docker-host"
_SCHEMES = ("unix://", "tcp://", "http://", "https://", "ssh://", "npipe://")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An engine address and where it came from (shown by ``info()`` and in error details)."""

    url: str
    source: str  # "argument", "DOCKER_HOST", the path of a docker-host file, or "default"

    @property
    def is_local_socket(self) -> bool:
        return self.url.startswith("unix://")

    @property
    def socket_directories(self) -> tuple[str, ...]:
        """The directory of the engine's socket, when it is one on this host: whoever writes there can
        reach (or replace) the engine, so it is never a workspace, nor inside one."""
        if not self.is_local_socket:
            return ()
        return (os.path.dirname(self.url.removeprefix("unix://")),)


def _read_host_file(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            return line if line.startswith(_SCHEMES) else None
    return None


def host_files(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The docker-host files consulted, in order (duplicates removed)."""
    env = os.environ if environ is None else environ
    candidates = []
    state_dir = env.get("SANDBOX_STATE_DIR", "").strip()
    if state_dir:
        candidates.append(Path(state_dir) / HOST_FILE_NAME)
    candidates.append(Path(DEFAULT_STATE_DIR) / HOST_FILE_NAME)
    seen: list[Path] = []
    for path in candidates:
        if path not in seen:
            seen.append(path)
    return seen


def discover_endpoint(base_url: str | None = None, environ: Mapping[str, str] | None = None) -> Endpoint:
    """The engine endpoint (see the module docstring for the order)."""
    if base_url:
        return Endpoint(base_url, "argument")
    env = os.environ if environ is None else environ
    docker_host = env.get("DOCKER_HOST", "").strip()
    if docker_host:
        return Endpoint(docker_host, "DOCKER_HOST")
    for path in host_files(env):
        url = _read_host_file(path)
        if url:
            return Endpoint(url, str(path))
    return Endpoint(DEFAULT_SOCKET_URL, "default")
