"""Docker backend: ``DockerBackend`` implements ``SandboxBackend`` on a Docker engine.

Importing this package does not import the docker SDK (≈100 ms): it is loaded when the first
engine client is built.
"""

from orchestrator.backends.docker.backend import DockerBackend
from orchestrator.backends.docker.endpoint import Endpoint, discover_endpoint

__all__ = ["DockerBackend", "Endpoint", "discover_endpoint"]
