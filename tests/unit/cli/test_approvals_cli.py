"""sandboxctl approvals --config: the queues a config's processes ask in (the service's store, the runs' queue).
Against a real `sandboxctl serve`: tests/api/test_approvals_cli_served.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from orchestrator.approvals.queue import ApprovalStore
from orchestrator.cli.main import main
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest
from orchestrator.domain.requests import parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.sanitize import sanitize


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state = tmp_path / "state"
    for name in ("SANDBOX_EVIDENCE_PATH", "XDG_STATE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SANDBOX_STATE_DIR", str(state))
    return state


def ask(store: ApprovalStore, execution_id: str, command: str) -> None:
    sanitized, _ = sanitize(parse_request({"tool": "shell_command", "command": command}))
    store.submit(
        ApprovalRequest(
            execution_id=execution_id,
            approval_key=approval_key(sanitized),
            sanitized=sanitized,
            policy_reason="asked",
            timeout_s=60,
        )
    )


def config(tmp_path: Path, **sections: object) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(sections))
    return str(path)


def listed(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(["approvals", "list", *argv, "--json"]) == 0
    return [item["approval_id"] for item in json.loads(capsys.readouterr().out)["items"]]


def test_config_finds_the_services_store_and_the_runs_queue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    service, runs = ApprovalStore(tmp_path / "service.db"), ApprovalStore(tmp_path / "runs.db")
    ask(service, "ex-service", "uname -a")
    ask(runs, "ex-run", "uname -m")
    path = config(
        tmp_path,
        approvals={"provider": "queue", "queue_path": str(runs.path)},
        service={"store": str(service.path)},
    )
    assert listed(capsys, "--config", path) == ["ex-service", "ex-run"]  # oldest first
    assert main(["approvals", "approve", "ex-service", "--config", path]) == 0
    assert main(["approvals", "deny", "ex-run", "--config", path, "--reason", "no"]) == 0
    assert capsys.readouterr().out == "ex-service: approved\nex-run: denied\n"
    service_result, run_result = service.result("ex-service"), runs.result("ex-run")
    assert service_result is not None and service_result.outcome is ApprovalOutcome.APPROVED
    assert run_result is not None and run_result.outcome is ApprovalOutcome.DENIED
    assert listed(capsys, "--config", path) == []


def test_the_default_store_of_a_service_is_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], _state_dir: Path
) -> None:
    ask(ApprovalStore(_state_dir / "service.db"), "ex-1", "uname -a")  # where serve keeps it with no service.store
    assert listed(capsys, "--config", config(tmp_path, approvals={"provider": "queue"})) == ["ex-1"]
    assert listed(capsys) == ["ex-1"]  # no config: the defaults' queues


def test_a_listing_creates_no_database(tmp_path: Path, capsys: pytest.CaptureFixture[str], _state_dir: Path) -> None:
    """No queue at all is not "no pending approvals": it says where it looked, and creates nothing there."""
    assert main(["approvals", "list", "--config", config(tmp_path, safety={"mode": "ask"})]) == 0
    assert capsys.readouterr().out == (
        f"no approval queue at {_state_dir / 'service.db'} or {_state_dir / 'approvals.db'}:"
        " has a service or run used this config?\n"
    )
    assert not _state_dir.exists()
    assert main(["approvals", "list"]) == 0
    assert capsys.readouterr().out == (
        f"no approval queue at {_state_dir / 'service.db'} or {_state_dir / 'approvals.db'}:"
        " has a service or run used the defaults (no --config)?\n"
    )
    ApprovalStore(_state_dir / "approvals.db")  # a queue, empty
    assert main(["approvals", "list"]) == 0
    assert capsys.readouterr().out == "no pending approvals\n"


def test_relative_paths_count_from_the_configs_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`serve --config svc.yaml` run in A keeps its asks in A/state/service.db: from B, `--config ../A/svc.yaml`
    finds them there (not in B/state/service.db)."""
    (tmp_path / "A").mkdir()
    (tmp_path / "B").mkdir()
    config(tmp_path / "A", service={"store": "state/service.db"}, approvals={"queue_path": "state/runs.db"})
    ask(ApprovalStore(tmp_path / "A" / "state" / "service.db"), "ex-a", "uname -a")
    monkeypatch.chdir(tmp_path / "B")
    assert listed(capsys, "--config", "../A/config.yaml") == ["ex-a"]
    assert main(["approvals", "approve", "ex-a", "--config", "../A/config.yaml"]) == 0
    assert capsys.readouterr().out == "ex-a: approved\n"
    assert not (tmp_path / "B" / "state").exists()


def test_a_db_that_does_not_exist_is_refused_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for argv in (["list"], ["approve", "ex-1"], ["deny", "ex-1"]):
        assert main(["approvals", *argv, "--db", "typo/x.db"]) == 2
        assert capsys.readouterr().err == (
            "sandboxctl: INPUT.INVALID: no approval store at typo/x.db: it does not exist"
            " (--db names the store of a service or a run)\n"
        )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"not a database at all\n" * 10, "file is not a database"),
        (b"SQLite format 3\x00" + b"\xff" * 84 + b"garbage" * 100, "file is not a database"),
    ],
    ids=["text", "corrupt-sqlite"],
)
def test_a_file_that_is_no_store_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, why: str
) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(content)
    for argv in (["list"], ["approve", "ex-1"]):
        assert main(["approvals", *argv, "--db", str(bad)]) == 2
        assert capsys.readouterr().err == (
            f"sandboxctl: INPUT.INVALID: {bad} is not an approval store ({why}): give the store of a service"
            " (service.store) or of runs (approvals.queue_path)\n"
        )
    assert bad.read_bytes() == content
    # the same file named by a config
    path = config(tmp_path, service={"store": str(bad)})
    assert main(["approvals", "list", "--config", path, "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "INPUT.INVALID"


def test_another_sqlite_database_is_refused_and_left_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import sqlite3

    other = tmp_path / "other.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE notes (x TEXT)")
    db.close()
    assert main(["approvals", "list", "--db", str(other)]) == 2
    assert capsys.readouterr().err == (
        f"sandboxctl: INPUT.INVALID: {other} is not an approval store (an SQLite database without the approvals"
        " table): give the store of a service (service.store) or of runs (approvals.queue_path)\n"
    )
    with sqlite3.connect(other) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    db.close()
    assert tables == ["notes"]


def test_db_and_config_together_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config(tmp_path, service={"store": str(tmp_path / "s.db")})
    for argv in (["list"], ["approve", "ex-1"]):
        assert main(["approvals", *argv, "--db", str(tmp_path / "s.db"), "--config", path]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"usage: sandboxctl approvals {argv[0]} ") and "[--db PATH | --config FILE]" in err
        assert err.endswith("\nsandboxctl: INPUT.INVALID: argument --config: not allowed with argument --db\n")


def test_an_unknown_id_names_every_queue_looked_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], _state_dir: Path
) -> None:
    path = config(tmp_path, service={"store": str(tmp_path / "s.db")})
    assert main(["approvals", "approve", "ex-nope", "--config", path]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"sandboxctl: INPUT.INVALID: no approval 'ex-nope' in {tmp_path / 's.db'} or {_state_dir / 'approvals.db'}\n"
    )


def test_an_invalid_config_is_refused_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config(tmp_path, service={"stor": "x"})
    assert main(["approvals", "list", "--config", path]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sandboxctl: CONFIG.INVALID: {path}:2: service.stor: ") and "Traceback" not in err
