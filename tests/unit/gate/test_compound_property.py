"""No generated compound shell string that contains a non-allowlisted command is ever allowed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.requests import parse_request
from orchestrator.gate.config import SafetyConfig, default_safety_config
from orchestrator.gate.policy import Policy
from orchestrator.gate.sanitize import sanitize

ALLOWED = ["ls", "cat x", "echo hi", "git status", "pwd", "wc -l"]
OTHERS = [
    "curl http://h",
    "rm a",
    "python3 -c 'x'",
    "git push",
    "bash",
    "nc -l 1",
    "make",
    "vim f",
    "dd if=a of=b",
    "chmod 600 f",
    "touch f",
    "tee out",
    "sh",
    "node -e 1",
    "kill 1",
]
SEPARATORS = [" | ", " && ", " || ", "; ", " & ", "\n", " |& "]
WRAPS = [
    "{}",
    "({})",
    "$({})",
    "`{}`",
    "bash -c '{}'",
    'sh -c "{}"',
    "env {}",
    "eval '{}'",
    "timeout 5 {}",
    "xargs {}",
    "nice {}",
    "{} > out",
    "{} 2>&1",
    "cat <({})",
    "{} <<< x",
]

POLICIES = [
    Policy(default_safety_config()),
    Policy(SafetyConfig.model_validate({"mode": "ask", "allowlist": ALLOWED})),
    Policy(
        SafetyConfig.model_validate(
            {
                "mode": "ask",
                "allowlist": ALLOWED,
                "rules": [{"name": f"a{i}", "argv_prefix": a, "action": "allow"} for i, a in enumerate(ALLOWED)],
            }
        )
    ),
]


@st.composite
def compound(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.sampled_from(ALLOWED + OTHERS), min_size=1, max_size=4))
    if not any(p in OTHERS for p in parts):
        parts.insert(draw(st.integers(0, len(parts))), draw(st.sampled_from(OTHERS)))
    wrapped = [draw(st.sampled_from(WRAPS)).format(p) if draw(st.booleans()) else p for p in parts]
    out = wrapped[0]
    for piece in wrapped[1:]:
        out += draw(st.sampled_from(SEPARATORS)) + piece
    return out


@settings(max_examples=1500, deadline=None)
@given(command=compound(), which=st.integers(0, len(POLICIES) - 1))
def test_never_allowed(command: str, which: int) -> None:
    sanitized, analysis = sanitize(parse_request({"tool": "shell_command", "command": command}))
    decision = POLICIES[which].decide(sanitized, analysis, profile="workspace-write")
    assert decision.decision != "allow", (command, decision)


@settings(max_examples=300, deadline=None)
@given(command=st.sampled_from(OTHERS))
def test_single_non_allowlisted_command_is_not_allowed(command: str) -> None:
    sanitized, analysis = sanitize(parse_request({"tool": "shell_command", "command": command}))
    assert POLICIES[1].decide(sanitized, analysis, profile="p").decision != "allow"
