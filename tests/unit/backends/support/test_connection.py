"""The one connection helper both backends use: lazily, once, under a lock, off the event loop."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from orchestrator.backends._support.blocking import BlockingCalls
from orchestrator.backends._support.connection import ClientClosed, LazyClient


class Client:
    def __init__(self) -> None:
        self.closed = False
        self.thread = threading.current_thread().name


class Engine:
    """Connections made and closed, each taking ``delay`` seconds; ``fail`` raises instead."""

    def __init__(self, delay: float = 0.0, fail: Exception | None = None) -> None:
        self.delay = delay
        self.fail = fail
        self.made: list[Client] = []
        self.started = threading.Event()

    def connect(self) -> Client:
        self.started.set()
        time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        client = Client()
        self.made.append(client)
        return client

    @staticmethod
    def close(client: Client) -> None:
        client.closed = True


def lazy(engine: Engine) -> tuple[LazyClient[Client], BlockingCalls]:
    calls = BlockingCalls(4, "test-connect")
    return LazyClient(engine.connect, engine.close, calls), calls


async def test_concurrent_first_calls_share_one_connection_made_off_the_loop() -> None:
    engine = Engine(delay=0.05)
    conn, calls = lazy(engine)
    try:
        assert conn.current is None
        clients = await asyncio.gather(*(conn.get() for _ in range(8)))
        assert len(engine.made) == 1 and all(c is engine.made[0] for c in clients)
        assert clients[0].thread.startswith("test-connect")  # the backend's pool, never the event loop's thread
        assert conn.current is clients[0] and await conn.get() is clients[0]
    finally:
        conn.close()
        calls.shutdown()
    assert engine.made[0].closed


async def test_a_failed_connection_is_the_callers_and_the_next_call_tries_again() -> None:
    engine = Engine(fail=ConnectionError("no engine"))
    conn, calls = lazy(engine)
    try:
        with pytest.raises(ConnectionError):
            await conn.get()
        engine.fail = None
        assert await conn.get() is engine.made[0]
    finally:
        conn.close()
        calls.shutdown()


async def test_prepare_connects_in_the_background_and_keeps_quiet_about_failures() -> None:
    engine = Engine(fail=ConnectionError("no engine"))
    conn, calls = lazy(engine)
    try:
        conn.prepare((ConnectionError,))
        await asyncio.to_thread(engine.started.wait, 5)
        engine.fail = None
        warmed: list[Client] = []
        conn.prepare((ConnectionError,), then=warmed.append)
        for _ in range(100):
            if warmed:
                break
            await asyncio.sleep(0.01)
        assert warmed == engine.made and conn.current is engine.made[0]
    finally:
        conn.close()
        calls.shutdown()


async def test_closed_while_connecting_closes_what_it_made_and_makes_nothing_more() -> None:
    engine = Engine(delay=0.2)
    conn, calls = lazy(engine)
    try:
        getting = asyncio.ensure_future(conn.get())
        await asyncio.to_thread(engine.started.wait, 5)
        conn.close()  # never waits for the connection under way
        with pytest.raises(ClientClosed):
            await getting
        assert len(engine.made) == 1 and engine.made[0].closed and conn.current is None
        with pytest.raises(ClientClosed):
            await conn.get()
        conn.prepare((ConnectionError,))  # nothing: closed
        assert conn.closed and len(engine.made) == 1
    finally:
        calls.shutdown()


async def test_detach_hands_the_client_over_for_a_backends_last_calls() -> None:
    engine = Engine()
    conn, calls = lazy(engine)
    try:
        client = await conn.get()
        assert conn.detach() is client and not client.closed  # the caller closes it, last
        assert conn.detach() is None
        with pytest.raises(ClientClosed):
            await conn.get()
    finally:
        calls.shutdown()
