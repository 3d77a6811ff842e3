"""One contract, two backends: every test here runs against Docker and against Kubernetes.

``contract`` is a :class:`Harness` over a fresh backend of each kind, with a workspace of its own
(Docker: a directory bind-mounted; Kubernetes: a sub-path of the test namespace's claim). At the end,
nothing the test launched may be left (the backend's own listing, by the test's owner label).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from orchestrator.backends.base import SandboxBackend
from tests.support.contract import Harness
from tests.support.engine import answering_or_skip
from tests.support.images import SANDBOX_UID


def _owned_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, SANDBOX_UID, SANDBOX_UID)
    return path


@pytest.fixture(
    params=[
        pytest.param("docker", marks=pytest.mark.integration),
        pytest.param("kubernetes", marks=pytest.mark.k8s),
        pytest.param("kubernetes-copy", marks=pytest.mark.k8s),  # the workspace copied in and out
    ]
)
async def contract(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    backend: SandboxBackend
    if request.param == "docker":
        from orchestrator.backends.docker import DockerBackend

        backend = DockerBackend()
        workspace = _owned_dir(tmp_path / "ws")
        await answering_or_skip(backend, "container engine")
    else:
        from orchestrator.backends.kubernetes.backend import KubernetesBackend
        from orchestrator.backends.kubernetes.settings import WorkspaceDelivery

        space = request.getfixturevalue("sandbox_space")
        if request.param == "kubernetes-copy":
            delivery = WorkspaceDelivery(mode="copy", copy_max_bytes=64 * 1024 * 1024)
            backend = KubernetesBackend(space.settings(workspace=delivery))
            workspace = _owned_dir(tmp_path / "ws")  # the controller's own directory, anywhere
        else:
            backend = KubernetesBackend(space.settings())
            workspace = space.workspace()
    harness = Harness(request.param.split("-")[0], backend, workspace)
    try:
        yield harness
        assert not await harness.left(), f"sandboxes left behind: {await harness.left()}"
    finally:
        await backend.close()
