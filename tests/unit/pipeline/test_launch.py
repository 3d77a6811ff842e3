from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.backends.docker import DockerBackend
from orchestrator.domain.errors import InputInvalid
from orchestrator.pipeline.governing import check_workspace


@pytest.mark.parametrize("path", ["/", "/etc", "/usr/lib", "/var", "/var/run", "/run/sandbox-orchestrator", "/proc/1"])
def test_workspaces_that_hand_over_the_host_are_refused(path: str) -> None:
    with pytest.raises(InputInvalid):
        check_workspace(Path(path))


def test_a_symlink_to_a_system_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "ws").symlink_to("/etc")
    with pytest.raises(InputInvalid) as err:
        check_workspace(tmp_path / "ws")
    assert "/etc" in err.value.message


def test_the_engine_socket_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/engine/docker.sock")
    protected = DockerBackend().capabilities.protected_paths  # the backend's: its engine's socket and state
    with pytest.raises(InputInvalid):
        check_workspace(tmp_path, protected=protected)
    check_workspace(tmp_path / "engine-sibling", protected=protected)  # a sibling project directory is fine


def test_a_project_directory_is_fine(tmp_path: Path) -> None:
    check_workspace(tmp_path)


def test_the_services_default_workspace_root_is_usable_and_nothing_else_of_the_state_dir() -> None:
    check_workspace(Path("/var/lib/sandbox-orchestrator/workspaces/team-a/default"))
    for path in (
        "/var/lib/sandbox-orchestrator/workspaces",  # every tenant at once
        "/var/lib/sandbox-orchestrator/docker",
        "/var/lib/sandbox-orchestrator",
        "/var/lib/sandbox-orchestrator/workspaces/../docker",
    ):
        with pytest.raises(InputInvalid):
            check_workspace(Path(path))
