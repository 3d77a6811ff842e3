"""The controller image, end to end: started with testcontainers as deployed (read-only root, no
capabilities, the engine's socket mounted), driven through the Python client — a run, an ask approved
and an ask denied through the API — with evidence that verifies on the host."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.client import Client
from orchestrator.domain.errors import PolicyDenied, SandboxUnavailable
from orchestrator.domain.wire import ExecutionState
from orchestrator.evidence import verify

pytestmark = pytest.mark.integration

SANDBOX_USER = "1000:1000"  # the built-in profiles' user: the workspaces the service creates are theirs


def _config(shared: Path) -> Path:
    config = {
        "safety": {"mode": "ask", "allowlist": ["echo"], "approval_timeout_s": 60},
        "approvals": {"provider": "queue"},
        "evidence": {"path": str(shared / "evidence.jsonl")},
        "service": {
            "tokens": [
                {"subject": "agent-1", "role": "agent", "tenants": ["t1"], "token_env": "AGENT_TOKEN"},
                {
                    "subject": "approver-1",
                    "role": "approver",
                    "tenants": ["t1"],
                    "token_file": str(shared / "approver.token"),
                },
            ],
            "store": str(shared / "state" / "service.db"),
            "workspaces": str(shared / "workspaces"),
        },
    }
    path = shared / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _wait_until_up(client: Client, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            client.list(limit=1)
            return
        except SandboxUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_the_controller_image_serves_runs_and_approvals(controllers: Any, tmp_path: Path, run_sandboxes: Any) -> None:
    from tests.support.controller import free_port

    shared = tmp_path / "shared"
    (shared / "state").mkdir(parents=True)
    agent_token, approver_token = "agent-token-0123456789abcdef", "approver-token-0123456789abcdef"
    (shared / "approver.token").write_text(approver_token + "\n")
    config = _config(shared)
    for path in (shared, shared / "state", shared / "approver.token", config):
        os.chown(path, 1000, 1000)
    port = free_port()
    controller = controllers.start(
        ["sandboxctl", "serve", "--host", "127.0.0.1", "--port", str(port), "--config", str(config)],
        port=port,
        engine=True,
        user=SANDBOX_USER,
        shared=shared,
        env={"SANDBOX_STATE_DIR": str(shared / "state"), "AGENT_TOKEN": agent_token},
    )
    agent, approver = Client(controller.base_url, agent_token), Client(controller.base_url, approver_token)
    _wait_until_up(agent)

    ran = agent.run({"tool": "shell", "command": ["echo", "from the image"]}, timeout_s=60)
    assert ran.state is ExecutionState.SUCCEEDED, ran.error
    assert ran.result is not None and ran.result.stdout == "from the image\n"
    run_sandboxes.add(ran.execution_id)

    asked = agent.submit({"tool": "shell_command", "command": "uname -s"})
    assert asked.state is ExecutionState.PENDING_APPROVAL
    run_sandboxes.add(asked.execution_id)
    assert [a.execution_id for a in approver.approvals().items] == [asked.execution_id]
    approver.approve(asked.execution_id, "ok from the test")
    done = agent.get(asked.execution_id, wait=60)
    assert done.state is ExecutionState.SUCCEEDED and done.result is not None and done.result.stdout == "Linux\n"
    assert done.approval is not None and done.approval.approver == "api:approver-1"

    refused = agent.submit({"tool": "shell_command", "command": "uname -r"})
    approver.deny(refused.execution_id, "no")
    assert agent.get(refused.execution_id, wait=30).state is ExecutionState.REFUSED
    with pytest.raises(PolicyDenied):
        agent.submit({"tool": "shell_command", "command": "sudo id"})

    controller.container.get_wrapped_container().stop(timeout=30)  # SIGTERM: the service closes its evidence
    report = verify(shared / "evidence.jsonl")
    assert report.ok and report.complete, report.to_dict()
