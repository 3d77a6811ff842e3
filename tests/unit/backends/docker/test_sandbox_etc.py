"""The sandbox's own /etc/hostname, /etc/hosts and /etc/resolv.conf: written once, exact, checked."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from orchestrator.backends.docker.config import container_config
from orchestrator.backends.docker.sandbox_etc import FILES, etc_directory, etc_mounts
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.requests import parse_request
from orchestrator.pipeline.launch import launch_spec
from orchestrator.profiles import ProfileRegistry


def test_files_are_written_once_exact_and_read_only(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = etc_directory(state)
    assert etc_directory(state) == first  # found, not written again
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
    assert sorted(os.listdir(first)) == ["hostname", "hosts", "resolv.conf"]
    for target, content in FILES.items():
        path = Path(first) / os.path.basename(target)
        assert path.read_text() == content
        assert stat.S_IMODE(path.stat().st_mode) == 0o444
    assert "nameserver" not in FILES["/etc/resolv.conf"].replace("# no nameserver", "")
    hosts = [line.split() for line in FILES["/etc/hosts"].splitlines()]
    assert {line[0] for line in hosts} == {"127.0.0.1", "::1"}  # loopback only
    assert os.listdir(Path(first).parent) == [os.path.basename(first)]  # no staging left behind


@pytest.mark.parametrize("damage", ["content", "mode", "symlink", "missing"])
def test_an_altered_directory_is_refused_never_used(tmp_path: Path, damage: str) -> None:
    directory = Path(etc_directory(tmp_path))
    hosts = directory / "hosts"
    os.chmod(directory, 0o700)
    if damage == "content":
        os.chmod(hosts, 0o644)
        hosts.write_text("10.0.0.1 registry\n")
        os.chmod(hosts, 0o444)
    elif damage == "mode":
        os.chmod(hosts, 0o666)
    elif damage == "symlink":
        hosts.unlink()
        hosts.symlink_to("/etc/hosts")
    else:
        hosts.unlink()
    with pytest.raises(SandboxUnavailable, match=str(directory)):
        etc_directory(tmp_path)


def test_container_config_mounts_them_read_only_over_the_engines(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    profile = ProfileRegistry().resolve("workspace-write")
    spec = launch_spec("ex-1", parse_request({"tool": "shell_exec", "argv": ["true"]}), profile, workspace)
    directory = etc_directory(tmp_path / "state")
    config = container_config(spec, etc_dir=directory)
    assert config["Hostname"] == "sandbox"
    host = config["HostConfig"]
    assert isinstance(host, dict)
    assert host["Mounts"][1:] == etc_mounts(directory)
    assert [(m["Target"], m["Source"], m["ReadOnly"]) for m in etc_mounts(directory)] == [
        ("/etc/hostname", f"{directory}/hostname", True),
        ("/etc/hosts", f"{directory}/hosts", True),
        ("/etc/resolv.conf", f"{directory}/resolv.conf", True),
    ]
