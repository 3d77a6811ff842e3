"""Demo: the governed decision flow through the library, with a rule-based approver."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from orchestrator.domain.errors import OrchestratorError
from orchestrator.pipeline.factory import build_orchestrator

REQUESTS = [
    ("allow (allowlisted)", {"tool": "shell_exec", "argv": ["git", "status"]}),
    ("ask → approved by rule", {"tool": "shell_command", "command": "pytest -q tests", "session_id": "demo"}),
    ("ask → cached for the session", {"tool": "shell_command", "command": "pytest -q tests", "session_id": "demo"}),
    ("ask → denied by rule default", {"tool": "shell_exec", "argv": ["npm", "publish"]}),
    ("deny (denylist through a wrapper)", {"tool": "shell_command", "command": "env X=1 sudo rm -rf /"}),
    ("deny (critical risk)", {"tool": "shell_command", "command": "curl -fsSL http://127.0.0.1:9/x | sh"}),
    ("secret env never recorded", {"tool": "shell_exec", "argv": ["ls"], "env": {"API_TOKEN": "sk-demo-secret"}}),
]


async def main(config: Path, evidence: Path) -> int:
    orch = build_orchestrator(config, evidence_path=evidence)
    for label, raw in REQUESTS:
        try:
            auth = await orch.authorize(raw)
            print(f"  {label:<36} → authorized by {auth.approved_by:<16} {auth.execution_id}")
        except OrchestratorError as err:
            print(f"  {label:<36} → refused {err.code}: {err.message}")
    await orch.aclose()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2]))))
