"""What is typed into sessions is digested under a key kept beside the evidence, never in it."""

from __future__ import annotations

import hashlib
import hmac
import stat
from pathlib import Path

import pytest

from orchestrator.approvals.session import ExecSessionOrigin
from orchestrator.domain.errors import EvidenceUnavailable
from orchestrator.evidence import iter_records
from orchestrator.evidence.input_key import input_key_path, load_input_key
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.profiles import ProfileRegistry

ALLOW_ALL = "safety:\n  mode: allow\n  rules: []\napprovals:\n  provider: rules\n  default: approved\n"


def test_the_key_is_made_once_private_and_kept(tmp_path: Path) -> None:
    evidence = tmp_path / "ev" / "evidence.jsonl"
    key = load_input_key(evidence)
    path = input_key_path(evidence)
    assert len(key) == 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_input_key(evidence) == key  # the same key from then on
    assert load_input_key(tmp_path / "other.jsonl") != key
    path.write_bytes(b"short")
    with pytest.raises(EvidenceUnavailable, match="not an input key"):
        load_input_key(evidence)


async def test_a_keystroke_on_record_cannot_be_looked_up_but_can_be_checked_with_the_key(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(ALLOW_ALL)
    (tmp_path / "ws").mkdir()
    evidence = tmp_path / "evidence.jsonl"
    orch = build_orchestrator(
        tmp_path / "config.yaml", workspace=tmp_path / "ws", evidence_path=evidence, profiles=ProfileRegistry()
    )
    orch.session_approvals.approve_exec_session("ex-s", ExecSessionOrigin("ex-s", "default", "anonymous"))
    auth = await orch.authorize({"tool": "write_stdin", "session_id": "ex-s", "chars": "y"})
    await orch.aclose()
    received = next(r for r in iter_records(evidence, execution_id=auth.execution_id) if r.event == "request_received")
    recorded = received.data["sanitized"]["stdin"]
    assert "sha256" not in recorded and recorded["bytes"] == 1
    assert recorded["hmac_sha256"] != hashlib.sha256(b"y").hexdigest()
    key = load_input_key(evidence)
    assert recorded["hmac_sha256"] == hmac.new(key, b"y", hashlib.sha256).hexdigest()
    assert key.hex() not in evidence.read_text()
