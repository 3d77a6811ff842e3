"""The same intent gets the same decision through every exec tool alias."""

from __future__ import annotations

import shlex
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.domain.requests import parse_request
from orchestrator.gate.config import SafetyConfig
from orchestrator.gate.gate import Gate
from orchestrator.gate.policy import Policy, PolicySource

RULES = SafetyConfig.model_validate(
    {
        "mode": "ask",
        "allowlist": ["ls", "cat", "git status", "echo"],
        "denylist": ["sudo", "rm -rf", "chmod 777"],
        "rules": [
            {"name": "push", "argv_prefix": "git push", "tool": ["exec"], "action": "ask", "reason": "push"},
            {"name": "tests", "argv_glob": "pytest*", "action": "allow"},
            {"name": "crit", "risk_at_least": "critical", "action": "deny"},
        ],
    }
)


class _Fixed(PolicySource):
    def __init__(self, policy: Policy) -> None:
        self.path = None
        self.last_error = None
        self._policy = policy


GATE = Gate(_Fixed(Policy(RULES)))


def aliases(argv: list[str]) -> list[dict[str, Any]]:
    line = shlex.join(argv)
    return [
        {"tool": "shell_exec", "argv": argv},
        {"tool": "shell", "command": argv},
        {"tool": "skill_exec", "skill": "s", "argv": argv},
        {"tool": "shell_command", "command": line},
        {"tool": "exec_command", "cmd": line},
    ]


def outcome(raw: dict[str, Any]) -> tuple[Any, ...]:
    d = GATE.evaluate(parse_request(raw)).decision
    intent = d.intent.model_dump_json() if d.intent is not None else None
    return (d.decision, d.reason, d.matched_rule, d.risk.model_dump_json(), intent)


programs = st.sampled_from(
    ["ls", "cat", "git", "rm", "sudo", "pytest", "chmod", "echo", "/bin/ls", "python3", "curl", "bash", "env"]
)
words = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=12)
flags = st.sampled_from(["-rf", "-fr", "-r", "-f", "--force", "-la", "777", "status", "push", "-c", "--", "x y"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, args=st.lists(st.one_of(words, flags), max_size=5))
def test_same_decision_through_every_alias(program: str, args: list[str]) -> None:
    results = {outcome(raw) for raw in aliases([program, *args])}
    assert len(results) == 1, results


def test_known_parity_examples() -> None:
    for argv in (["ls", "-la"], ["sudo", "ls"], ["rm", "-r", "-f", "x"], ["git", "push", "-f"], ["pytest", "-q"]):
        assert len({outcome(raw) for raw in aliases(argv)}) == 1, argv
