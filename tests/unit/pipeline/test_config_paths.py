"""One rule for every path a config file names: a relative one counts from the file's own directory, applied
once, where the file is loaded (pipeline.config.load_config), whatever the current directory."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from orchestrator.pipeline.config import HOST_PATH_FIELDS, load_config
from orchestrator.pipeline.factory import approval_queues, evidence_path, queue_path, service_store_path

RELATIVE = {
    "approvals": {"provider": "queue", "queue_path": "state/approvals.db"},
    "evidence": {"path": "./state/evidence.jsonl"},
    "service": {
        "store": "state/service.db",
        "workspaces": "../shared/workspaces",
        "tokens": [
            {"subject": "ci", "role": "agent", "tenants": ["ci"], "token_file": "secrets/ci"},
            {"subject": "ops", "role": "admin", "token_env": "OPS_TOKEN"},
        ],
    },
    "backend": {"kind": "kubernetes", "kubernetes": {"kubeconfig": "kube/config", "workspace": {"mode": "copy"}}},
    "safety": {"trusted_program_dirs": ["/usr/bin", "bin"]},
}


@pytest.fixture
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The current directory: another one than the config's."""
    other = tmp_path / "B"
    other.mkdir()
    monkeypatch.chdir(other)
    return other


def write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def test_relative_paths_count_from_the_config_files_directory(tmp_path: Path, elsewhere: Path) -> None:
    write(tmp_path / "A" / "svc.yaml", RELATIVE)
    a = tmp_path / "A"
    config = load_config(Path("../A/svc.yaml"))  # as given on a command line run in B
    assert config.approvals.queue_path == str(a / "state" / "approvals.db")
    assert config.evidence.path == str(a / "state" / "evidence.jsonl")
    assert config.service.store == str(a / "state" / "service.db")
    assert config.service.workspaces == str(tmp_path / "shared" / "workspaces")
    assert [t.token_file for t in config.service.tokens] == [str(a / "secrets" / "ci"), None]
    assert config.backend.kubernetes.kubeconfig == str(a / "kube" / "config")
    # what every process under it uses: the service's store, the runs' queue, the evidence
    assert service_store_path(config) == a / "state" / "service.db"
    assert queue_path(config) == a / "state" / "approvals.db"
    assert approval_queues(config) == (a / "state" / "service.db", a / "state" / "approvals.db")
    assert evidence_path(config) == a / "state" / "evidence.jsonl"
    # not files of this host: left as written (a program directory, a path in a pod)
    assert config.safety.trusted_program_dirs == ["/usr/bin", "bin"]
    assert config.backend.kubernetes.workspace.root == "/var/lib/sandbox-orchestrator/workspaces"


def test_absolute_paths_are_kept(tmp_path: Path, elsewhere: Path) -> None:
    path = write(tmp_path / "A" / "svc.yaml", {"service": {"store": "/srv/so/service.db"}, "evidence": {"path": "/e"}})
    config = load_config(path)
    assert (config.service.store, config.evidence.path) == ("/srv/so/service.db", "/e")


def test_every_path_field_is_anchored(tmp_path: Path, elsewhere: Path) -> None:
    """The table of fields is the rule: each one, given relative, comes back below the config's directory."""
    assert len(HOST_PATH_FIELDS) == 6
    config = load_config(write(tmp_path / "A" / "svc.yaml", RELATIVE))
    dumped = config.model_dump()
    for loc in HOST_PATH_FIELDS:
        values: list[object] = [dumped]
        for key in loc:
            values = [item for v in values for item in v] if key == "*" else [v[key] for v in values]  # type: ignore[index]
        assert all(v is None or str(v).startswith(str(tmp_path) + "/") for v in values), (loc, values)


def test_pvc_workspaces_relative_to_the_config_are_checked_against_the_claim(tmp_path: Path, elsewhere: Path) -> None:
    """service.workspaces is made absolute before the claim's root is compared with it."""
    root = tmp_path / "claim"
    data = {
        "backend": {"kind": "kubernetes", "kubernetes": {"workspace": {"mode": "pvc", "root": str(root)}}},
        "service": {"workspaces": "claim/tenants"},
    }
    config = load_config(write(tmp_path / "svc.yaml", data))
    assert config.service.workspaces == str(root / "tenants")


def test_one_file_named_twice_is_one_queue(tmp_path: Path, elsewhere: Path) -> None:
    (tmp_path / "A" / "real").mkdir(parents=True)
    (tmp_path / "A" / "link").symlink_to("real")
    path = write(
        tmp_path / "A" / "svc.yaml", {"service": {"store": "real/q.db"}, "approvals": {"queue_path": "link/q.db"}}
    )
    assert approval_queues(load_config(path)) == (tmp_path / "A" / "real" / "q.db",)
