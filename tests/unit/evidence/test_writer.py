"""EvidenceWriter on real files: chaining, durability, several processes, torn lines, failures."""

from __future__ import annotations

import asyncio
import errno
import itertools
import json
import multiprocessing
import os
import resource
import signal
import stat
from pathlib import Path
from typing import Any

import pytest

from orchestrator.domain.errors import EvidenceCorrupt, EvidenceUnavailable, InputInvalid
from orchestrator.evidence import (
    GENESIS_HASH,
    EventType,
    EvidenceEvent,
    EvidenceRecord,
    EvidenceWriter,
    head_path,
    iter_records,
    read_head,
    verify,
)


def ev(i: int, **extra: object) -> EvidenceEvent:
    return EvidenceEvent.model_validate(
        {"event": EventType.CONTAINER_STARTED, "execution_id": f"ex-{i % 4}", "data": {"i": i}, **extra}
    )


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


# ---- basics ----------------------------------------------------------------------------------------


async def test_async_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "state" / "evidence.jsonl"
    writer = await EvidenceWriter.open(path)
    records = [await writer.append(ev(i)) for i in range(3)]
    records += await asyncio.gather(*(writer.append(ev(i)) for i in range(3, 50)))
    records.append(await writer.append(ev(50), durable=True))
    await writer.close()

    assert [r.seq for r in records] == list(range(51))
    assert records[0].prev_hash == GENESIS_HASH
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(records))
    assert list(iter_records(path)) == records
    assert [r.to_json_line() for r in records] == lines_of(path)
    report = verify(path)
    assert report.ok and report.records == 51 and report.head_checked and report.head_seq == 50


def test_sync_round_trip_and_reopen_continues_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    with EvidenceWriter(path) as writer:
        first = writer.append_sync(ev(0))
        assert first.seq == 0
    with EvidenceWriter(path) as writer:
        second = writer.append_sync(ev(1), durable=False)
        writer.append_nowait(ev(2))
        writer.flush_sync()
    assert second.seq == 1 and second.prev_hash == first.hash
    assert [r.seq for r in iter_records(path)] == [0, 1, 2]
    assert verify(path).ok


def test_record_fields_filled_by_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    event = EvidenceEvent(
        event=EventType.DECISION_MADE,
        execution_id="ex-1",
        tenant="t",
        subject="s",
        tool="shell_exec",
        call_id="c1",
        inputs_digest="a" * 64,
        policy_version_hash="b" * 64,
        decision="allow",
        reason="allowlist:ls",
    )
    with EvidenceWriter(path) as writer:
        record = writer.append_sync(event)
    assert record.v == 1 and record.event == "decision_made" and record.decision == "allow"
    assert record.ts.endswith("Z") and len(record.ts) == len("2026-01-01T00:00:00.000000Z")
    raw = json.loads(path.read_bytes())
    assert "approver" not in raw and "data" not in raw  # fields that do not apply are left out
    assert EvidenceRecord.model_validate(raw) == record


def test_file_and_directory_modes(tmp_path: Path) -> None:
    path = tmp_path / "new" / "dir" / "evidence.jsonl"
    with EvidenceWriter(path) as writer:
        writer.append_sync(ev(0))
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(head_path(path).stat().st_mode) == 0o600


def test_default_path_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_STATE_DIR", str(tmp_path / "st"))
    monkeypatch.delenv("SANDBOX_EVIDENCE_PATH", raising=False)
    with EvidenceWriter() as writer:
        writer.append_sync(ev(0))
    assert writer.path == tmp_path / "st" / "evidence.jsonl"
    assert verify(writer.path).ok


# ---- durability ------------------------------------------------------------------------------------


async def test_durable_append_is_on_disk_when_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    async with await EvidenceWriter.open(path, checkpoint_interval=3600) as writer:
        for i in range(5):
            writer.append_nowait(ev(i))  # queued before the durable one: must be written with it
        record = await writer.append(ev(99), durable=True)
        fd = os.open(path, os.O_RDONLY)  # another fd, right after
        try:
            data = os.pread(fd, 1 << 20, 0)
        finally:
            os.close(fd)
        lines = data.splitlines(keepends=True)
        assert len(lines) == 6
        assert lines[-1] == record.to_json_line()
        head = read_head(path)
        assert head is not None and (head.seq, head.hash) == (record.seq, record.hash)


async def test_flush_writes_and_anchors(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    async with await EvidenceWriter.open(path, checkpoint_interval=3600) as writer:
        await writer.append(ev(0), durable=True)
        for i in range(1, 10):
            writer.append_nowait(ev(i))
        await writer.flush()
        assert len(lines_of(path)) == 10
        head = read_head(path)
        assert head is not None and head.seq == 9


async def test_idle_checkpoint_anchors_non_durable_records(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    async with await EvidenceWriter.open(path, checkpoint_interval=0.05) as writer:
        await writer.append(ev(0))
        await writer.append(ev(1))
        for _ in range(200):
            head = read_head(path)
            if head is not None and head.seq == 1:
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the head anchor did not catch up while idle")


async def test_cancelled_append_is_still_written(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    async with await EvidenceWriter.open(path) as writer:
        task = asyncio.create_task(writer.append(ev(0)))
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await writer.flush()
    assert [r.data for r in iter_records(path)] == [{"i": 0}]


# ---- input -----------------------------------------------------------------------------------------


def test_bad_events_are_refused_before_queueing(tmp_path: Path) -> None:
    """A wrong field is refused; size and text never are (test_evidence_fit.py: they are degraded)."""
    path = tmp_path / "evidence.jsonl"
    with EvidenceWriter(path) as writer:
        with pytest.raises(InputInvalid, match="execution_id"):
            writer.append_sync({"event": "decision_made"})
        with pytest.raises(InputInvalid, match="data"):
            writer.append_sync({"event": "decision_made", "execution_id": "x", "data": {"n": float("nan")}})
        with pytest.raises(InputInvalid, match="inputs_digest"):
            writer.append_sync({"event": "decision_made", "execution_id": "x", "inputs_digest": "abc"})
        with pytest.raises(InputInvalid, match="seq"):
            writer.append_sync({"event": "decision_made", "execution_id": "x", "seq": 5})
        with pytest.raises(InputInvalid, match="data"):
            writer.append_sync({"event": "decision_made", "execution_id": "x", "data": ["not", "an", "object"]})
        with pytest.raises(InputInvalid, match="EvidenceEvent"):
            writer.append_sync(42)  # type: ignore[arg-type]
        writer.append_sync(ev(1))  # the writer is fine
    assert [r.seq for r in iter_records(path)] == [0]


def test_closed_writer_refuses(tmp_path: Path) -> None:
    writer = EvidenceWriter(tmp_path / "evidence.jsonl")
    writer.close_sync()
    writer.close_sync()  # idempotent
    with pytest.raises(EvidenceUnavailable, match="closed"):
        writer.append_sync(ev(0))


# ---- several writers -------------------------------------------------------------------------------


def test_two_writers_in_one_process_share_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    with EvidenceWriter(path) as a, EvidenceWriter(path) as b:
        for i in range(20):
            (a if i % 3 else b).append_sync(ev(i), durable=i % 2 == 0)
    report = verify(path)
    assert report.ok and report.records == 20 and report.head_seq == 19


def _child(path: str, worker: int, count: int, go: Any) -> None:
    async def run() -> None:
        async with await EvidenceWriter.open(path, max_batch=16) as writer:
            go.wait(60)  # all four start appending together
            pending: list[asyncio.Future[EvidenceRecord]] = []
            for i in range(count):
                event = EvidenceEvent(event="container_started", execution_id=f"ex-w{worker}", data={"i": i})
                if i % 50 == 49:  # (tasks only queue once they run: let the earlier ones go first)
                    await asyncio.gather(*pending)
                    pending.clear()
                    await writer.append(event, durable=True)
                else:
                    pending.append(asyncio.ensure_future(writer.append(event)))
                if len(pending) >= 10:
                    await asyncio.gather(*pending)
                    await asyncio.sleep(0.002)  # let the other writers in: the test is about interleaving
                    pending.clear()
            await asyncio.gather(*pending)

    asyncio.run(run())


def test_four_processes_append_one_valid_chain(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    procs = [ctx.Process(target=_child, args=(str(path), w, 200, go)) for w in range(4)]
    for proc in procs:
        proc.start()
    go.set()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    report = verify(path)
    assert report.ok, report
    assert report.records == 800 and report.head_checked and report.head_seq == 799
    per_worker: dict[str, list[int]] = {}
    order = [record.execution_id for record in iter_records(path)]
    assert sum(1 for a, b in itertools.pairwise(order) if a != b) > 3  # they did interleave
    for record in iter_records(path):
        assert record.data is not None
        value = record.data["i"]
        assert isinstance(value, int)
        per_worker.setdefault(record.execution_id or "", []).append(value)
    assert sorted(per_worker) == [f"ex-w{w}" for w in range(4)]
    assert all(values == list(range(200)) for values in per_worker.values())


# ---- damage found on open ----------------------------------------------------------------------------


def _make(path: Path, n: int) -> list[bytes]:
    with EvidenceWriter(path) as writer:
        for i in range(n):
            writer.append_sync(ev(i), durable=False)
    return lines_of(path)


def test_torn_unanchored_line_is_quarantined_and_recorded(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "evidence.jsonl"
    lines = _make(path, 3)
    torn = b'{"data":{"i":3},"event":"container_sta'  # a crash in the middle of the next append
    with path.open("ab") as f:
        f.write(torn)
    report = verify(path)
    assert (report.ok, report.first_bad_line) == (False, 4) and "torn" in (report.problem or "")

    with EvidenceWriter(path) as writer:
        after = writer.append_sync(ev(4))
    records = list(iter_records(path))
    assert [r.event for r in records] == ["container_started"] * 3 + [
        "evidence_recovered",
        "container_started",
    ]
    recovered = records[3]
    assert recovered.execution_id is None and recovered.data is not None
    quarantine = tmp_path / str(recovered.data["quarantine_file"])
    assert quarantine.read_bytes() == torn
    assert recovered.data["torn_offset"] == sum(len(line) for line in lines)
    assert recovered.data["torn_bytes"] == len(torn)
    assert stat.S_IMODE(quarantine.stat().st_mode) == 0o600
    assert after.seq == 4
    assert verify(path).ok
    assert "torn line" in caplog.text


def test_torn_anchored_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    lines = _make(path, 3)  # the head anchors seq 2
    path.write_bytes(b"".join(lines[:-1]) + lines[-1][:40])
    with pytest.raises(EvidenceCorrupt, match="head anchor says the chain reaches seq 2"):
        EvidenceWriter(path)
    assert path.read_bytes() == b"".join(lines[:-1]) + lines[-1][:40]  # nothing written


def test_deleted_tail_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    lines = _make(path, 4)
    path.write_bytes(b"".join(lines[:2]))
    with pytest.raises(EvidenceCorrupt, match="reaches seq 3"):
        EvidenceWriter(path)


def test_replaced_last_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    lines = _make(path, 2)
    fields = json.loads(lines[-1])
    fields["data"] = {"i": 1000}
    from orchestrator.evidence.chain import build_line

    _, forged = build_line(
        {k: v for k, v in fields.items() if k not in {"v", "seq", "ts", "prev_hash", "hash"}},
        seq=fields["seq"],
        ts=fields["ts"],
        prev_hash=fields["prev_hash"],
    )
    path.write_bytes(lines[0] + forged)
    with pytest.raises(EvidenceCorrupt, match="differs from the head anchor"):
        EvidenceWriter(path)


def test_invalid_last_record_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    lines = _make(path, 2)
    path.write_bytes(lines[0] + lines[1].replace(b'"i":1', b'"i":7'))
    with pytest.raises(EvidenceCorrupt, match="hash mismatch"):
        EvidenceWriter(path)


def test_missing_head_is_recreated(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "evidence.jsonl"
    _make(path, 3)
    head_path(path).unlink()
    EvidenceWriter(path).close_sync()
    head = read_head(path)
    assert head is not None and head.seq == 2
    assert "missing" in caplog.text


# ---- failures while running ------------------------------------------------------------------------


async def test_worker_failure_surfaces_and_partial_write_is_undone(tmp_path: Path) -> None:
    """A real write failure (EFBIG from RLIMIT_FSIZE, mid-write): the append that hit it, every later
    call and close() raise EvidenceUnavailable with the OSError as cause; no torn line is left."""
    path = tmp_path / "evidence.jsonl"
    writer = await EvidenceWriter.open(path)
    for i in range(20):  # ~600 KiB, so the limit stays far above pytest's own small files
        await writer.append(ev(i, data={"pad": "p" * 30_000}), durable=True)
    size = path.stat().st_size
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size + 1000, old_limit[1]))
    try:
        with pytest.raises(EvidenceUnavailable) as failed:
            await writer.append(ev(99, data={"pad": "q" * 30_000}))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)
    cause = failed.value.__cause__
    assert isinstance(cause, OSError) and cause.errno == errno.EFBIG
    assert "failed and stopped" in failed.value.message
    assert writer.failed is cause

    with pytest.raises(EvidenceUnavailable) as again:
        await writer.append(ev(100))
    assert again.value.__cause__ is cause
    with pytest.raises(EvidenceUnavailable):
        writer.append_nowait(ev(101))
    with pytest.raises(EvidenceUnavailable):
        await writer.flush()
    with pytest.raises(EvidenceUnavailable):
        await writer.close()

    assert path.stat().st_size == size  # the partial batch was cut off
    report = verify(path)
    assert report.ok and report.records == 20


async def test_nowait_failure_surfaces_on_the_next_call(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    writer = await EvidenceWriter.open(path)
    await writer.append(ev(0), durable=True)
    path.rename(tmp_path / "rotated.jsonl")  # someone moved the file away under the writer
    writer.append_nowait(ev(1))
    with pytest.raises(EvidenceUnavailable, match="removed or replaced"):
        await writer.flush()
    with pytest.raises(EvidenceUnavailable, match="removed or replaced"):
        await writer.append(ev(2))
    with pytest.raises(EvidenceUnavailable):
        await writer.close()


async def test_file_truncated_under_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "evidence.jsonl"
    writer = await EvidenceWriter.open(path)
    for i in range(3):
        await writer.append(ev(i), durable=True)
    lines = lines_of(path)
    with path.open("r+b") as f:  # same inode, shorter
        f.truncate(len(lines[0]))
    with pytest.raises(EvidenceUnavailable) as failed:
        await writer.append(ev(3))
    assert isinstance(failed.value.__cause__, EvidenceCorrupt)
    assert "shrank" in failed.value.message
    with pytest.raises(EvidenceUnavailable):
        await writer.close()
