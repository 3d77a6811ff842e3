"""An approval that races its timeout resolves exactly once, and everyone agrees on how.

Real asks through ``Orchestrator.authorize`` with the store-backed queue (SQLite, as configured by a
file) and a short approval timeout; for each ask, approvers in two threads and two other processes
answer around its deadline — some before, some after, some in the very window where the waiter's
timer fires — each several times over. For every ask: at most one answer won, and when none did the
store kept a timeout; the answer the store kept is what `authorize` acted on (ran or refused with the
matching code), what the evidence records, and what every losing approver was told.
"""

from __future__ import annotations

import asyncio
import json
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.approvals.queue import ApprovalStore, Resolution
from orchestrator.domain.decisions import ApprovalOutcome
from orchestrator.domain.errors import OrchestratorError
from orchestrator.evidence import iter_records, verify
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.pipeline.orchestrator import Authorization

# long enough for the approvers' watcher to see every ask on a loaded machine (make test runs the tiers side by
# side); the race itself is at the deadline: the answers fire within JITTER_S of it
TIMEOUT_S = 1.0
ROUNDS, CONCURRENT = 6, 10  # 60 asks, 10 waiting at once
JITTER_S = 0.04  # approvers fire within this of the store's deadline
CALLS = 3  # each approver answers this many times in a row
REFUSAL_CODES = {
    ApprovalOutcome.DENIED: "APPROVAL.DENIED",
    ApprovalOutcome.ABORT: "APPROVAL.ABORTED",
    ApprovalOutcome.TIMEOUT: "APPROVAL.TIMEOUT",
}

# an approver in another process: one task per line on stdin, one JSON answer per decide on stdout
WORKER = r"""
import json, sys, time
from pathlib import Path
from orchestrator.approvals.queue import ApprovalStore
from orchestrator.domain.decisions import ApprovalOutcome
stores = {}
for line in sys.stdin:
    task = json.loads(line)
    store = stores.setdefault(task["db"], ApprovalStore(Path(task["db"])))
    time.sleep(max(0.0, task["fire_at"] - time.time()))
    for _ in range(task["calls"]):
        r = store.decide(task["id"], ApprovalOutcome(task["outcome"]), task["approver"])
        kept = r.result
        print(json.dumps({"id": task["id"], "approver": task["approver"], "won": r.won, "state": r.state,
                          "kept": [kept.outcome.value, kept.approver] if kept else None}), flush=True)
"""


@dataclass(frozen=True)
class Answer:
    approval_id: str
    approver: str
    won: bool
    state: str
    kept: tuple[str, str] | None  # (outcome, approver) the store said it kept


def _answer(approval_id: str, approver: str, resolution: Resolution) -> Answer:
    kept = resolution.result
    return Answer(
        approval_id, approver, resolution.won, resolution.state, (kept.outcome.value, kept.approver) if kept else None
    )


class Approvers:
    """Watches the store for new asks and has each answered around its deadline by two threads (here)
    and two worker processes, with different outcomes."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.store = ApprovalStore(db)
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._seen: set[str] = set()
        self._rng = random.Random(7)
        self._threads: list[threading.Thread] = []
        self.workers = [
            subprocess.Popen(
                [sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
            )
            for _ in range(2)
        ]
        self._readers = [threading.Thread(target=self._read_worker, args=(w,), daemon=True) for w in self.workers]
        for reader in self._readers:
            reader.start()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _read_worker(self, worker: subprocess.Popen[str]) -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            raw = json.loads(line)
            kept = tuple(raw["kept"]) if raw["kept"] else None
            with self._lock:
                self.answers.append(Answer(raw["id"], raw["approver"], raw["won"], raw["state"], kept))  # type: ignore[arg-type]

    def _fire_at(self, deadline: float) -> float:
        return deadline + self._rng.uniform(-JITTER_S, JITTER_S)

    def _hammer(self, approval_id: str, fire_at: float, outcome: ApprovalOutcome, approver: str) -> None:
        time.sleep(max(0.0, fire_at - time.time()))
        for _ in range(CALLS):
            resolution = self.store.decide(approval_id, outcome, approver)
            with self._lock:
                self.answers.append(_answer(approval_id, approver, resolution))

    def _watch(self) -> None:
        while not self._stop.is_set():
            for ask in self.store.pending():
                if ask.id in self._seen:
                    continue
                self._seen.add(ask.id)
                plan = [
                    (ApprovalOutcome.APPROVED, "queue:thread-a"),
                    (ApprovalOutcome.DENIED, "queue:thread-b"),
                ]
                for outcome, approver in plan:
                    thread = threading.Thread(
                        target=self._hammer, args=(ask.id, self._fire_at(ask.deadline), outcome, approver)
                    )
                    thread.start()
                    self._threads.append(thread)
                for worker, (outcome, approver) in zip(
                    self.workers,
                    [(ApprovalOutcome.APPROVED_FOR_SESSION, "queue:proc-c"), (ApprovalOutcome.ABORT, "queue:proc-d")],
                    strict=True,
                ):
                    task = {"db": str(self.db), "id": ask.id, "fire_at": self._fire_at(ask.deadline), "calls": CALLS}
                    assert worker.stdin is not None
                    worker.stdin.write(json.dumps({**task, "outcome": outcome.value, "approver": approver}) + "\n")
            time.sleep(0.005)

    def close(self) -> None:
        self._stop.set()
        self._watcher.join()
        for thread in self._threads:
            thread.join()
        for worker in self.workers:
            assert worker.stdin is not None
            worker.stdin.close()
            worker.wait(timeout=30)
        for reader in self._readers:
            reader.join(timeout=30)


async def _ask(orch: Any, n: int) -> tuple[str, Authorization | OrchestratorError]:
    try:
        auth = await orch.authorize({"tool": "shell_exec", "argv": ["deploy", str(n)]})
    except OrchestratorError as err:
        return str(err.details["execution_id"]), err
    return str(auth.execution_id), auth


async def test_a_late_answer_and_the_timeout_resolve_each_ask_exactly_once(tmp_path: Path) -> None:
    db = tmp_path / "approvals.db"
    evidence = tmp_path / "evidence.jsonl"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"safety: {{mode: ask, allowlist: [], default: ask, approval_timeout_s: {TIMEOUT_S}}}\n"
        f"approvals: {{provider: queue, queue_path: {db}}}\n"
    )
    orch = build_orchestrator(config, evidence_path=evidence)
    approvers = Approvers(db)
    outcomes: dict[str, Authorization | OrchestratorError] = {}
    try:
        for round_ in range(ROUNDS):
            asks = [_ask(orch, round_ * CONCURRENT + i) for i in range(CONCURRENT)]
            outcomes.update(await asyncio.gather(*asks))
        await asyncio.sleep(JITTER_S + 0.1)  # the last answers land
    finally:
        await orch.aclose()
        await asyncio.to_thread(approvers.close)
    assert verify(evidence).ok

    by_id: dict[str, list[Answer]] = {}
    for answer in approvers.answers:
        by_id.setdefault(answer.approval_id, []).append(answer)
    assert set(by_id) == set(outcomes), "every ask was answered by the approvers, and only those"
    tally = {"timeout": 0, "answered": 0}
    for approval_id, acted in outcomes.items():
        answers = by_id[approval_id]
        assert len(answers) == 4 * CALLS
        stored = approvers.store.result(approval_id)
        assert stored is not None, approval_id
        kept = (stored.outcome.value, stored.approver)
        winners = [a for a in answers if a.won]
        # exactly one transition: one answer won, or none and the store kept the timeout
        if stored.outcome is ApprovalOutcome.TIMEOUT:
            assert winners == [], (approval_id, winners)
            tally["timeout"] += 1
        else:
            assert len(winners) == 1, (approval_id, answers)
            assert stored.approver == winners[0].approver  # each approver answers one outcome: it is theirs
            tally["answered"] += 1
        # every approver was told what the store kept
        assert {(a.state, a.kept) for a in answers} == {("decided", kept)}, (approval_id, answers)
        # what authorize acted on is what the store kept
        if stored.outcome.grants:
            assert isinstance(acted, Authorization), (approval_id, acted)
            assert acted.approval is not None
            assert (acted.approval.outcome.value, acted.approval.approver, acted.approved_by) == (*kept, kept[1])
        else:
            assert isinstance(acted, OrchestratorError), (approval_id, acted)
            assert acted.code == REFUSAL_CODES[stored.outcome]
        # and what the evidence says
        records = list(iter_records(evidence, execution_id=approval_id))
        (decided,) = [r for r in records if r.event == "approval_decided"]
        assert (decided.decision, decided.approver) == kept
        failed = [r for r in records if r.event == "run_failed"]
        if stored.outcome.grants:
            assert failed == []
        else:
            assert [r.error_code for r in failed] == [REFUSAL_CODES[stored.outcome]]
    # the race was really run: both sides of the deadline won sometimes
    assert tally["timeout"] >= 3 and tally["answered"] >= 3, tally
