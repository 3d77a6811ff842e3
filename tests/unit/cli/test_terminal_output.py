"""What sandboxctl prints never drives the terminal showing it: C0/C1 controls (ESC, CSI, OSC), bidi
overrides and isolates, zero-width and tag characters, line separators and lone surrogates are
escaped in every printing path — as \\xNN/\\uNNNN for people, as \\uXXXX in JSON (still valid JSON,
the same data once parsed). Only `run` without --json writes the command's own output raw."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.approvals.queue import ApprovalStore
from orchestrator.cli import run_cmd
from orchestrator.cli.evidence_cmd import register as register_evidence
from orchestrator.cli.main import _NoTraceback, main
from orchestrator.cli.output import emit_json, fail
from orchestrator.domain.decisions import ApprovalRequest
from orchestrator.domain.errors import PolicyDenied
from orchestrator.domain.requests import parse_request
from orchestrator.domain.text import UNSAFE_RANGES, json_safe, printable, terminal_safe
from orchestrator.evidence import EventType, EvidenceEvent, EvidenceWriter
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.sanitize import sanitize

UNSAFE_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")
# what an attacker would use: OSC title + bell, CSI erase, C1 CSI, RLO, RLI/PDI, LS, ZWSP, a tag character
HOSTILE = "a\x1b]0;pwned\x07b\x1b[2K\r\x9b31m\u202egnp.exe\u2067x\u2069\u2028\u200b\U000e0041z"
RAW = ["\x1b", "\x07", "\r", "\x9b", "\u202e", "\u2067", "\u2069", "\u2028", "\u200b", "\U000e0041"]


def no_raw_controls(text: str) -> bool:
    return not any(unicodedata.category(ch) in UNSAFE_CATEGORIES for ch in text if ch != "\n")


def test_the_table_covers_every_unsafe_character() -> None:
    for code in range(0x110000):
        ch = chr(code)
        if unicodedata.category(ch) in UNSAFE_CATEGORIES:
            assert terminal_safe(ch) != ch, f"U+{code:04X} is not escaped"


def _old_printable(text: str) -> str:
    """printable() as it was (one lookup per character): the table must not change its output."""
    bidi = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch in bidi or unicodedata.category(ch) in UNSAFE_CATEGORIES:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "".join(out)


def test_printable_is_unchanged() -> None:
    # the table also lists format characters of later Unicode versions: unassigned in this Python's
    extra = {c for a, b in UNSAFE_RANGES for c in range(a, b + 1) if unicodedata.category(chr(c)) == "Cn"}
    everything = "".join(chr(c) for c in [*range(0x30000), *range(0xE0000, 0xE0100)] if c not in extra)
    assert printable(everything) == _old_printable(everything)
    assert all(0x13430 <= c <= 0x1343F for c in extra)


@given(st.text(alphabet=st.characters(blacklist_categories=())))
def test_json_safe_keeps_the_data_and_hides_every_control(text: str) -> None:
    for indent in (None, 2):
        dumped = json.dumps({"k": text, text: [text]}, ensure_ascii=False, indent=indent)
        safe = json_safe(dumped)
        assert json.loads(safe) == json.loads(dumped)
        assert no_raw_controls(safe)
        safe.encode("utf-8")  # always writable


def test_emit_json_and_fail(capsys: pytest.CaptureFixture[str]) -> None:
    emit_json({"stdout": HOSTILE, HOSTILE: 1})
    out = capsys.readouterr().out
    assert no_raw_controls(out) and json.loads(out) == {"stdout": HOSTILE, HOSTILE: 1}
    assert fail("CONFIG.INVALID", f"cannot read {HOSTILE}", 2, json_out=True) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["message"] == f"cannot read {HOSTILE}"
    assert no_raw_controls(out) and no_raw_controls(err) and err.count("\n") == 1
    assert "\\x1b]0;pwned\\x07" in err and "\\u202e" in err


# -- every printing path --------------------------------------------------------------------------

SANDBOXCTL = [sys.executable, "-m", "orchestrator.cli.main"]


def sandboxctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SANDBOXCTL, *args], capture_output=True, text=True, timeout=60, env=_env())


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "SANDBOXCTL_WARM": "0"}


def test_check_human_and_json() -> None:
    human = sandboxctl("check", "--", "echo", HOSTILE)
    assert human.returncode == 0 and no_raw_controls(human.stdout) and no_raw_controls(human.stderr)
    assert printable(HOSTILE) in human.stdout
    proc = sandboxctl("check", "--json", "--shell", f"echo '{HOSTILE}'")
    assert proc.returncode == 0 and no_raw_controls(proc.stdout)
    assert json.loads(proc.stdout)["sanitized"]["command"] == f"echo '{HOSTILE}'"


def test_errors_on_stderr_and_in_json(tmp_path: Path) -> None:
    config = str(tmp_path / f"{HOSTILE}.yaml")
    for args in (["check", "--config", config, "--", "ls"], ["check", "--json", "--config", config, "--", "ls"]):
        proc = sandboxctl(*args)
        assert proc.returncode == 2 and "CONFIG.INVALID" in proc.stderr
        assert no_raw_controls(proc.stderr) and no_raw_controls(proc.stdout)
    assert json.loads(proc.stdout)["error"]["message"].startswith(f"{config}: file not found")
    usage = sandboxctl("check", f"--{HOSTILE}", "--", "ls")  # argparse quotes the unknown option
    assert usage.returncode == 2 and no_raw_controls(usage.stderr)


def test_run_refusals_are_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    err = PolicyDenied(f"denylisted: {HOSTILE}", details={"execution_id": "ex-1", "decision": "deny"})
    for as_json in (False, True):
        assert run_cmd._report(argparse.Namespace(json=as_json), err, "deny") == 125
        out, stderr = capsys.readouterr()
        assert no_raw_controls(out) and no_raw_controls(stderr) and stderr.count("\n") == 1
    assert json.loads(out)["error"]["message"] == f"denylisted: {HOSTILE}"


def _evidence(tmp_path: Path) -> Path:
    path = tmp_path / "evidence.jsonl"
    with EvidenceWriter(path) as writer:
        writer.append_sync(
            EvidenceEvent(event=EventType.RUN_FAILED, execution_id="ex-1", status="failed", reason=HOSTILE)
        )
    return path


@pytest.mark.parametrize("verb", ["show", "tail"])
def test_evidence_show_and_tail(tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str) -> None:
    path = _evidence(tmp_path)
    parser = argparse.ArgumentParser()
    register_evidence(parser.add_subparsers(dest="command", required=True))
    for extra in ([], ["--json"]):
        args = parser.parse_args(["evidence", verb, "--path", str(path), *extra])
        assert args.handler(args) == 0
        out = capsys.readouterr().out
        assert no_raw_controls(out), out
    assert json.loads(out)["reason"] == HOSTILE  # same data once parsed
    assert json.loads(out) == json.loads(path.read_text(encoding="utf-8"))


def test_approvals_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = ApprovalStore(tmp_path / "approvals.db")
    sanitized, _ = sanitize(parse_request({"tool": "shell_command", "command": f"echo {HOSTILE}", "subject": HOSTILE}))
    request = ApprovalRequest(
        execution_id="ex-1",
        approval_key=approval_key(sanitized),
        sanitized=sanitized,
        policy_reason=f"asked: {HOSTILE}",
        timeout_s=60,
    )
    store.submit(request)
    assert main(["approvals", "list", "--db", str(store.path)]) == 0
    out = capsys.readouterr().out
    assert no_raw_controls(out) and printable(f"echo {HOSTILE}") in out
    assert main(["approvals", "list", "--db", str(store.path), "--json"]) == 0
    out = capsys.readouterr().out
    assert no_raw_controls(out) and json.loads(out)["items"][0]["request"]["command"] == f"echo {HOSTILE}"


def test_profiles_list_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: Any) -> None:
    (tmp_path / "odd.yaml").write_text(yaml.safe_dump({"description": f"for {HOSTILE}"}, allow_unicode=True))
    monkeypatch.setenv("SANDBOX_PROFILES_PATH", str(tmp_path))
    for args in (["profiles", "list"], ["profiles", "show", "odd"], ["profiles", "show", "odd", "--json"]):
        assert main(args) == 0
        out = capsys.readouterr().out
        assert no_raw_controls(out), (args, out)
    assert json.loads(out)["description"] == f"for {HOSTILE}"


def test_log_lines_are_escaped() -> None:
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "policy reload failed: %s", (HOSTILE,), None)
    line = _NoTraceback("sandboxctl: %(levelname)s: %(message)s").format(record)
    assert no_raw_controls(line) and "\n" not in line
