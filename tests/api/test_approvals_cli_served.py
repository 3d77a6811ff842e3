"""`sandboxctl approvals --config FILE` against a real `sandboxctl serve --config FILE`: the asks the service
holds are listed, approved and denied from a shell, and its runs act on those answers (issue 21). Its
start-up says where it listens, at INFO."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.client import Client
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.wire import ExecutionState
from tests.support.service import free_port, token_of, write_config

pytestmark = pytest.mark.integration


class Served:
    """`sandboxctl serve` as a user starts it, in its own process; its stderr kept."""

    def __init__(self, config: Path, env: dict[str, str], cli_cwd: Path | None = None) -> None:
        self.config, self.env, self.port = config, env, free_port()
        self.cli_cwd = cli_cwd  # where the approver's shell is (None: this process's directory)
        self.log = config.parent / "serve.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "orchestrator.cli.main",
                    "serve",
                    "--config",
                    str(config),
                    "--port",
                    str(self.port),
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env=env,
                cwd=config.parent,  # as `cd A && sandboxctl serve --config svc.yaml`
            )
        deadline = time.monotonic() + 60
        while True:
            try:
                Client(self.url, token_of("agent-a"), timeout_s=2).list(limit=1)
                return
            except SandboxUnavailable:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    raise AssertionError(f"the service did not start: {self.log.read_text()}") from None
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_arg(self) -> str:
        """--config as the approver's shell names it: relative to its own directory when it has one."""
        return str(self.config) if self.cli_cwd is None else os.path.relpath(self.config, self.cli_cwd)

    def sandboxctl(self, *argv: str) -> subprocess.CompletedProcess[str]:
        """The CLI in another process, as an approver's shell runs it (the service's environment)."""
        return subprocess.run(
            [sys.executable, "-m", "orchestrator.cli.main", *argv],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
            cwd=self.cli_cwd,
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture(params=["service-store-given", "service-store-default", "service-store-relative"])
def served(request: pytest.FixtureRequest, tmp_path: Path, engine: Any) -> Iterator[Served]:
    config = write_config(tmp_path)
    cli_cwd = None
    data = yaml.safe_load(config.read_text())
    if request.param == "service-store-default":  # <state dir>/service.db, the state dir from the environment
        del data["service"]["store"]
    if request.param == "service-store-relative":
        # relative to the config's directory; the approver's shell elsewhere names the config relative to itself
        data["service"]["store"] = "served/service.db"
        cli_cwd = tmp_path / "elsewhere"
        cli_cwd.mkdir()
    config.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if k not in ("SANDBOX_EVIDENCE_PATH", "XDG_STATE_HOME")}
    service = Served(config, {**env, "SANDBOX_STATE_DIR": str(tmp_path / "state")}, cli_cwd)
    try:
        yield service
    finally:
        service.stop()


def test_approvals_with_the_services_config_answer_its_asks(served: Served) -> None:
    agent = Client(served.url, token_of("agent-a"))
    approved = agent.submit({"tool": "shell_command", "command": "uname -s"})
    denied = agent.submit({"tool": "shell_command", "command": "uname -m"})
    assert approved.state is denied.state is ExecutionState.PENDING_APPROVAL
    config = served.config_arg

    listing = served.sandboxctl("approvals", "list", "--config", config, "--json")
    assert listing.returncode == 0, listing.stderr
    assert [item["approval_id"] for item in json.loads(listing.stdout)["items"]] == [
        approved.execution_id,
        denied.execution_id,
    ]
    text = served.sandboxctl("approvals", "list", "--config", config)
    assert text.returncode == 0 and "no pending approvals" not in text.stdout
    assert f"{approved.execution_id}  agent-a@team-a  shell_command: uname -s" in text.stdout

    yes = served.sandboxctl("approvals", "approve", approved.execution_id, "--config", config)
    no = served.sandboxctl("approvals", "deny", denied.execution_id, "--config", config, "--reason", "not now")
    assert (yes.returncode, yes.stdout, no.returncode, no.stdout) == (
        0,
        f"{approved.execution_id}: approved\n",
        0,
        f"{denied.execution_id}: denied\n",
    )

    ran = agent.get(approved.execution_id, wait=60)
    assert ran.state is ExecutionState.SUCCEEDED and ran.result is not None and ran.result.stdout == "Linux\n"
    assert ran.approval is not None and ran.approval.approver is not None
    assert ran.approval.approver.startswith("queue:")
    refused = agent.get(denied.execution_id, wait=60)
    assert refused.state is ExecutionState.REFUSED and refused.error is not None
    assert refused.error.code == "APPROVAL.DENIED"

    late = served.sandboxctl("approvals", "approve", denied.execution_id, "--config", config)
    assert late.returncode == 1 and late.stderr.startswith("sandboxctl: APPROVAL.NOT_PENDING: ")
    empty = served.sandboxctl("approvals", "list", "--config", config)
    assert (empty.returncode, empty.stdout) == (0, "no pending approvals\n")


def test_a_normal_start_is_info_and_on_the_console(served: Served) -> None:
    served.stop()
    lines = served.log.read_text().splitlines()
    assert any(line.startswith(f"sandboxctl: INFO: serving on http://127.0.0.1:{served.port} ") for line in lines)
    assert not [line for line in lines if "WARNING" in line or "Traceback" in line], lines
