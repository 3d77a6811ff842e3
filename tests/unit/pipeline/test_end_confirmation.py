"""An end the sandbox's init reported, confirmed after the end record (executor._confirm_end): the engine's
account compared with the report, a disagreement or no account at all an ``end_unconfirmed`` record
(status failed, durable), and the sandbox removed whatever happened."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from orchestrator.backends.base import ExitState, SandboxHandle
from orchestrator.evidence import EventType
from orchestrator.pipeline.executor import _confirm_end, _unless_cancelled, end_disagreement

NOW = datetime(2026, 11, 28, tzinfo=UTC)


def state(code: int | None, oom: bool = False) -> ExitState:
    return ExitState(exit_code=code, oom_killed=oom, started_at=NOW, finished_at=NOW)


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        (state(3), None),
        (None, "did not report the end its init reported in time"),
        (state(0), "the init reported exit 3, the engine exit 0"),
        (state(None), "the init reported exit 3, the engine exit None"),
        (state(3, oom=True), "the init reported no OOM kill, the engine one"),
    ],
)
def test_the_engines_account_confirms_only_the_same_end(engine: ExitState | None, said: str | None) -> None:
    problem = end_disagreement(state(3), engine)
    assert (problem is None) == (said is None)
    assert said is None or (problem is not None and said in problem)


class Engine:
    """What _confirm_end asks of a backend: its account of the end, then the removal."""

    def __init__(self, account: ExitState | None, seen: dict[str, asyncio.Event]) -> None:
        self.account = account
        self.seen = seen
        self.destroyed: list[str] = []

    async def confirm_end(self, handle: SandboxHandle) -> ExitState | None:
        return self.account

    async def destroy(self, handle: SandboxHandle) -> None:
        self.destroyed.append(handle.name)
        self.seen["destroy"].set()  # the engine's destroy event, as the follower would see it


@pytest.mark.parametrize(("account", "unconfirmed"), [(state(3), False), (state(1), True), (None, True)])
async def test_a_confirmation_notes_what_disagrees_and_always_removes_the_sandbox(
    account: ExitState | None, unconfirmed: bool
) -> None:
    seen = {"destroy": asyncio.Event()}
    engine = Engine(account, seen)
    records: list[tuple[EventType, dict[str, Any]]] = []

    async def record(event: EventType, **fields: Any) -> None:
        records.append((event, fields))

    follower = asyncio.create_task(asyncio.sleep(3600))  # the lifecycle follower, stopped at the end
    handle = SandboxHandle(execution_id="ex-1", sandbox_id="uid-1", name="sbx-ex-1")
    await _confirm_end(engine, handle, state(3), record=record, seen=seen, follower=follower)  # type: ignore[arg-type]
    assert engine.destroyed == ["sbx-ex-1"] and follower.cancelled()
    if not unconfirmed:
        assert records == []
        return
    ((event, fields),) = records
    assert event is EventType.END_UNCONFIRMED and fields["status"] == "failed" and fields["durable"] is True
    assert fields["data"]["reported"] == {"exit_code": 3, "oom_killed": False}
    assert fields["data"]["engine"] == (None if account is None else {"exit_code": 1, "oom_killed": False})


async def test_a_confirmation_that_fails_still_removes_the_sandbox() -> None:
    seen = {"destroy": asyncio.Event()}
    engine = Engine(state(3), seen)

    async def record(event: EventType, **fields: Any) -> None:
        raise OSError("disk full")

    async def broken(handle: SandboxHandle) -> ExitState | None:
        return state(9)

    engine.confirm_end = broken  # type: ignore[method-assign]
    follower = asyncio.create_task(asyncio.sleep(3600))
    handle = SandboxHandle(execution_id="ex-1", sandbox_id="uid-1", name="sbx-ex-1")
    with pytest.raises(OSError):
        await _confirm_end(engine, handle, state(3), record=record, seen=seen, follower=follower)  # type: ignore[arg-type]
    assert engine.destroyed == ["sbx-ex-1"] and follower.cancelled()


@pytest.mark.parametrize("reported", [True, False], ids=["reported", "torn-down-already"])
async def test_a_run_cancelled_after_its_reported_end_still_removes_its_sandbox(reported: bool) -> None:
    """Cancelled between its reported end and its outcome (the meter's last look, the workspace's record): no
    confirmation will follow, so the sandbox is removed at once and its follower stopped (adversarial
    review of issue 24: it was left until the orphan collector came). A run already torn down: nothing more."""
    seen = {"destroy": asyncio.Event()}
    engine = Engine(state(3), seen)
    follower = asyncio.create_task(asyncio.sleep(3600))
    handle = SandboxHandle(execution_id="ex-1", sandbox_id="uid-1", name="sbx-ex-1")
    step = asyncio.ensure_future(
        _unless_cancelled(
            asyncio.sleep(3600),
            reported=reported,
            backend=engine,
            handle=handle,
            seen=seen,
            follower=follower,  # type: ignore[arg-type]
        )
    )
    await asyncio.sleep(0)
    step.cancel()
    with pytest.raises(asyncio.CancelledError):
        await step
    assert engine.destroyed == (["sbx-ex-1"] if reported else [])
    assert follower.cancelled() is reported
    follower.cancel()
