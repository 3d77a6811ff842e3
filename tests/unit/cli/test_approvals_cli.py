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
    assert main(["approvals", "list", "--config", config(tmp_path, safety={"mode": "ask"})]) == 0
    assert capsys.readouterr().out == "no pending approvals\n"
    assert not _state_dir.exists()


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
