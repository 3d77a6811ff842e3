"""make demo, the service part: `sandboxctl serve` on loopback, an agent submitting through the Python
client, an approver answering through the API, the output streamed, the approvals page's screenshot.

    .venv/bin/python scripts/demo_service.py WORK_DIR
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

from orchestrator.client import Client
from orchestrator.domain.errors import OrchestratorError, SandboxUnavailable
from orchestrator.domain.wire import ExecutionView, OutputChunk

AGENT, APPROVER = "demo-agent-token-0123456789", "demo-approver-token-0123456789"


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(work: Path) -> Path:
    config = {
        "safety": {"mode": "ask", "allowlist": ["echo", "ls"], "denylist": ["sudo"], "approval_timeout_s": 60},
        "approvals": {"provider": "queue"},
        "evidence": {"path": str(work / "service-evidence.jsonl")},
        "service": {
            "tokens": [
                {"subject": "agent-7", "role": "agent", "tenants": ["demo"], "token": AGENT},
                {"subject": "alice", "role": "approver", "tenants": ["demo"], "token": APPROVER},
            ],
            "store": str(work / "service-state" / "service.db"),
            "workspaces": str(work / "service-workspaces"),
        },
    }
    path = work / "service.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def screenshot(url: str, work: Path) -> Path | None:
    """The approvals page, signed in as the approver, in Debian's chromium (when both are installed)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    if not Path("/usr/bin/chromium").exists():
        return None
    with urllib.request.urlopen(url + "/ui", timeout=5) as response:  # raises when the page is missing
        response.read()
    shot = work / "approvals-page.png"
    with sync_playwright() as p:
        # --no-sandbox: chromium's own sandbox cannot start as root
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(url + "/ui", timeout=15_000)
            page.locator("#token").fill(APPROVER, timeout=5_000)
            page.get_by_role("button", name="Sign in").click()
            page.get_by_role("button", name="Approve", exact=True).first.wait_for(timeout=10_000)
            page.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    return shot


def main() -> int:
    work = Path(sys.argv[1])
    config, port = write_config(work), free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "SANDBOX_STATE_DIR": str(work / "service-state")}
    say(f"sandboxctl serve --config {config} --port {port}")
    server = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli.main", "serve", "--config", str(config), "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        agent, approver = Client(url, AGENT), Client(url, APPROVER)
        for _ in range(300):
            try:
                agent.list(limit=1)
                break
            except SandboxUnavailable:
                time.sleep(0.1)

        say("an agent runs an allowed command through the client (POST /v1/executions?wait=)")
        view = agent.run({"tool": "shell_command", "command": "echo hello from the service"})
        print(f"  {view.execution_id}: {view.state.value}, exit {view.result.exit_code if view.result else None}")
        print(f"  stdout: {view.result.stdout if view.result else ''!r}")

        say("a denied command answers at once with its code")
        try:
            agent.submit({"tool": "shell_command", "command": "sudo id"})
        except OrchestratorError as err:
            print(f"  {err.code}: {err.message}")

        say("a command that asks waits for an approver; alice approves it through the API")
        asked = agent.submit({"tool": "shell_command", "command": "uname -s && printf 'line %s\\n' 1 2 3"})
        print(f"  {asked.execution_id}: {asked.state.value}")
        for pending in approver.approvals().items:
            print(
                f"  pending for alice: {pending.request.get('command')!r} risk {pending.risk_level},"
                f" {pending.seconds_left:.0f}s left"
            )
        answer = approver.approve(asked.execution_id, "fine for the demo")
        print(f"  answer: {answer.outcome} by {answer.approver}")

        say("its output, streamed (GET /v1/executions/{id}/output, Server-Sent Events)")
        for item in agent.stream(asked.execution_id):
            if isinstance(item, OutputChunk):
                print(f"  [{item.stream}] {item.data!r}")
            elif isinstance(item, ExecutionView):
                print(f"  result: {item.state.value}, exit {item.result.exit_code if item.result else None}")

        say("its evidence (GET /v1/evidence)")
        for record in agent.evidence(asked.execution_id).records:
            print(f"  {record['seq']:>4} {record['event']:<20} {record.get('approver') or record.get('status') or ''}")

        say("the approvals page, with an ask waiting (then denied through the API)")
        waiting = agent.submit({"tool": "shell_command", "command": "cat /etc/os-release | head -1"})
        try:
            shot = screenshot(url, work)
        except Exception as err:  # a demo step: say what failed, go on
            print(f"  {url}/ui (no screenshot: {type(err).__name__}: {str(err).splitlines()[0]})")
        else:
            print(f"  {url}/ui — screenshot: {shot}" if shot else f"  {url}/ui (no screenshot: chromium missing)")
        answer = approver.deny(waiting.execution_id, "demo over")
        print(f"  {waiting.execution_id}: {answer.outcome} by {answer.approver}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
