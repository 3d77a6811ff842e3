from __future__ import annotations

import hashlib
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.requests import parse_request
from orchestrator.gate.sanitize import sanitize

SECRET = "s3cr3t-VALUE-do-not-leak"


def dump(raw: dict[str, object]) -> str:
    sanitized, _ = sanitize(parse_request(raw))
    return json.dumps(sanitized.public())


def test_env_becomes_sorted_keys_only() -> None:
    s, _ = sanitize(parse_request({"tool": "shell_exec", "argv": ["env"], "env": {"ZED": SECRET, "A": SECRET}}))
    assert s.env_keys == ["A", "ZED"]
    assert SECRET not in json.dumps(s.public())


def test_content_becomes_size_and_sha256() -> None:
    content = "héllo " + SECRET
    s, _ = sanitize(parse_request({"tool": "file_write", "path": "a.txt", "content": content}))
    assert s.content is not None
    assert s.content.bytes == len(content.encode())
    assert s.content.sha256 == hashlib.sha256(content.encode()).hexdigest()
    assert SECRET not in json.dumps(s.public())


def test_stdin_and_patch_are_digests_and_patch_paths_are_kept() -> None:
    s, _ = sanitize(parse_request({"tool": "write_stdin", "session_id": "x", "chars": SECRET}))
    assert s.stdin is not None and s.stdin.bytes == len(SECRET)
    assert s.target_session_id == "x"
    patch = (
        "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-x\n+"
        + SECRET
        + "\n*** Begin Patch\n*** Add File: docs/new.md\n+hi\n*** Update File: a.py\n*** Move to: b.py\n"
    )
    s, _ = sanitize(parse_request({"tool": "apply_patch", "patch": patch}))
    assert s.patch is not None and s.patch.sha256 == hashlib.sha256(patch.encode()).hexdigest()
    assert s.patch_paths == ["docs/new.md", "a.py", "b.py", "src/app.py"]
    assert SECRET not in json.dumps(s.public())


def test_shell_string_keeps_command_and_intent() -> None:
    s, analysis = sanitize(parse_request({"tool": "shell_command", "command": "ls -la | wc -l"}))
    assert s.command == "ls -la | wc -l"
    assert s.intent is not None and s.intent.is_complex
    assert analysis is not None and ("wc", "-l") in analysis.commands
    assert s.risk.risk_level in ("low", "medium", "high", "critical")


def test_sanitized_shape_is_stable() -> None:
    s, _ = sanitize(
        parse_request(
            {"tool": "shell_exec", "argv": ["ls"], "call_id": "c", "tenant": "t", "subject": "u", "env": {"K": "v"}}
        )
    )
    assert s.public() == {
        "tool": "shell_exec",
        "argv": ["ls"],
        "env_keys": ["K"],
        "tty": False,
        "sandbox_permissions": {"network": False, "writable_root": False, "extra_mounts": []},
        "intent": {"argv": ["ls"], "is_complex": False, "reason": "simple command", "unseen": []},
        "risk": {"risk_level": "low", "reason": s.risk.reason},
        "context": {"tenant": "t", "subject": "u", "call_id": "c"},
    }


@settings(max_examples=200, deadline=None)
@given(
    # a marker prefix: a random short string could occur in the output by chance (e.g. "shell_co")
    secret=st.text(min_size=4, max_size=40).filter(lambda t: "\x00" not in t).map(lambda t: "S3CR3T\u2063" + t),
    tool=st.sampled_from(["env", "stdin", "file", "patch"]),
)
def test_no_secret_value_ever_leaves_the_sanitizer(secret: str, tool: str) -> None:
    raw: dict[str, object]
    if tool == "env":
        raw = {"tool": "shell_command", "command": "printenv", "env": {"KEY": secret}}
    elif tool == "stdin":
        raw = {"tool": "write_stdin", "session_id": "s", "chars": secret}
    elif tool == "file":
        raw = {"tool": "file_write", "path": "f.txt", "content": secret}
    else:
        raw = {"tool": "apply_patch", "patch": "--- a/x\n+++ b/x\n@@\n+" + secret + "\n"}
    out = dump(raw)
    assert secret not in out
    assert json.dumps(secret)[1:-1] not in out
