from __future__ import annotations

import json
import subprocess
import sys

import pytest

from orchestrator.domain.canonical import canonical_json
from orchestrator.domain.requests import parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.sanitize import sanitize
from tests.support.paths import ROOT

VECTORS = json.loads((ROOT / "tests" / "vectors" / "approval_keys.json").read_text())


@pytest.mark.parametrize("vector", VECTORS, ids=[v["request"]["tool"] for v in VECTORS])
def test_golden_vectors(vector: dict[str, object]) -> None:
    """Expected keys were computed by `sha256sum` over the literal canonical JSON, not by this code."""
    sanitized, _ = sanitize(parse_request(vector["request"]))
    material = sanitized.key_material()
    tool = material.pop("tool")
    assert canonical_json({"tool": tool, "request": material}).decode() == vector["canonical"]
    assert approval_key(sanitized) == vector["approval_key"]


def test_key_ignores_call_context_but_not_the_action() -> None:
    base = {"tool": "shell_exec", "argv": ["ls"]}
    k1 = approval_key(sanitize(parse_request({**base, "call_id": "1", "subject": "a"}))[0])
    k2 = approval_key(sanitize(parse_request({**base, "call_id": "2", "subject": "b"}))[0])
    k3 = approval_key(sanitize(parse_request({**base, "argv": ["ls", "-a"]}))[0])
    k4 = approval_key(sanitize(parse_request({**base, "env": {"X": "1"}}))[0])
    k5 = approval_key(sanitize(parse_request({**base, "env": {"X": "2"}}))[0])
    assert k1 == k2
    assert k1 != k3
    assert k4 != k1
    assert k4 == k5  # env values are secret and never part of the key: only names count


def test_key_is_stable_across_processes() -> None:
    code = (
        "from orchestrator.domain.requests import parse_request;"
        "from orchestrator.gate.sanitize import sanitize;"
        "from orchestrator.gate.approval_key import approval_key;"
        "import json,sys; print(approval_key(sanitize(parse_request(json.loads(sys.argv[1])))[0]))"
    )
    for vector in VECTORS:
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(vector["request"])],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": "random"},
        )
        assert out.stdout.strip() == vector["approval_key"]
