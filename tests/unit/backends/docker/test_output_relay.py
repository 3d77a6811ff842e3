"""Live output plumbing of a backend's capture, without an engine: the engine's multiplexed frames over a real
socket, read on a thread as the Docker backend reads them (demultiplexer → kept by the sinks → relay),
delivered to a callback on the event loop."""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct
import threading
import time

import pytest

from orchestrator.backends._support.output_relay import OutputRelay
from orchestrator.backends.base import OutputStream
from orchestrator.backends.docker.capture import FrameDemuxer, StreamSink

KINDS = {"stdout": 1, "stderr": 2}


def frame(stream: OutputStream, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", KINDS[stream], len(payload)) + payload


class Reading:
    """The backend's reader: a thread demultiplexing what arrives on ``sock`` into sinks that tap the relay."""

    def __init__(self, sock: socket.socket, relay: OutputRelay, limits: tuple[int, int]) -> None:
        self.stdout = StreamSink(limits[0], lambda data: relay.post("stdout", data))
        self.stderr = StreamSink(limits[1], lambda data: relay.post("stderr", data))
        self._demux = FrameDemuxer(self.stdout, self.stderr)
        self._sock = sock
        self.thread = threading.Thread(target=self._run, name="test-reader")

    def _run(self) -> None:
        while chunk := self._sock.recv(7):  # small reads: frames arrive split anyhow
            self._demux.feed(chunk)


Delivered = list[tuple[OutputStream, bytes, int]]  # (stream, chunk, thread that delivered it)


async def capture(writes: list[tuple[OutputStream, bytes]], limits: tuple[int, int]) -> tuple[Delivered, Reading]:
    loop = asyncio.get_running_loop()
    got: Delivered = []
    relay = OutputRelay(
        loop, lambda stream, data: got.append((stream, data, threading.get_ident())), max_chunk=16, pace=0.0
    )
    ours, theirs = socket.socketpair()
    reading = Reading(ours, relay, limits)
    reading.thread.start()
    with theirs:
        for stream, payload in writes:
            theirs.sendall(frame(stream, payload))
            await asyncio.sleep(0)
    await asyncio.to_thread(reading.thread.join)
    ours.close()
    relay.drain()  # as capture() does once the stream ended
    relay.close()
    return got, reading


async def test_chunks_reach_the_loop_thread_in_order_and_only_what_is_kept() -> None:
    writes: list[tuple[OutputStream, bytes]] = [
        ("stdout", b"hello "),
        ("stderr", b"warning: x\n"),
        ("stdout", b"world\n" * 5),
        ("stderr", b"more\n"),
        ("stdout", b"past the limit\n" * 10),
    ]
    got, reading = await capture(writes, (40, 100))
    loop_thread = threading.get_ident()
    assert all(thread == loop_thread for _, _, thread in got)  # never the reader thread
    assert all(0 < len(data) <= 16 for _, data, _ in got)  # at most one chunk's worth, however merged
    for stream, sink in (("stdout", reading.stdout), ("stderr", reading.stderr)):
        delivered = b"".join(data for s, data, _ in got if s == stream)
        assert delivered == sink.result().data  # exactly what is kept, nothing past the limit
    assert reading.stdout.result().truncated
    # the order across streams is the order of the frames
    order = [s for s, _, _ in got]
    assert order.index("stderr") < len(order) - order[::-1].index("stdout") - 1


async def test_continuous_output_is_delivered_paced() -> None:
    loop = asyncio.get_running_loop()
    drain_starts: list[float] = []
    in_drain = False
    got: list[bytes] = []

    def drain_ended() -> None:  # runs once the drain that scheduled it has delivered everything
        nonlocal in_drain
        in_drain = False

    def callback(stream: OutputStream, data: bytes) -> None:
        nonlocal in_drain
        if not in_drain:
            in_drain = True
            drain_starts.append(loop.time())
            loop.call_soon(drain_ended)
        got.append(data)

    relay = OutputRelay(loop, callback, max_chunk=64, pace=0.05)

    def writer() -> None:
        for index in range(200):
            relay.post("stdout", b"%03d," % index)
            time.sleep(0.001)

    thread = threading.Thread(target=writer)
    thread.start()
    await asyncio.to_thread(thread.join)
    await asyncio.sleep(0.1)
    relay.drain()
    relay.close()
    assert b"".join(got) == b"".join(b"%03d," % i for i in range(200))
    assert all(len(chunk) <= 64 for chunk in got)
    # ~0.25 s of continuous output: a drain per pace (the first at once), not one per write
    assert len(drain_starts) <= 1 + (drain_starts[-1] - drain_starts[0]) / 0.05
    assert all(b - a >= 0.049 for a, b in itertools.pairwise(drain_starts)), drain_starts


async def test_chunks_waiting_for_a_busy_loop_are_merged_up_to_the_read_size() -> None:
    loop = asyncio.get_running_loop()
    got: list[bytes] = []
    relay = OutputRelay(loop, lambda stream, data: got.append(data), max_chunk=64, pace=0.0)
    writer = threading.Thread(target=lambda: [relay.post("stdout", b"%03d," % i) for i in range(100)])
    writer.start()
    writer.join()  # the loop is blocked meanwhile: one wake-up is pending, with everything queued
    await asyncio.sleep(0.01)
    assert [len(chunk) for chunk in got] == [64] * 6 + [16]
    assert b"".join(got) == b"".join(b"%03d," % i for i in range(100))
    relay.close()


async def test_a_callback_that_raises_is_logged_by_type_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.get_running_loop()
    calls: list[bytes] = []

    def callback(stream: OutputStream, data: bytes) -> None:
        calls.append(data)
        raise ValueError(f"cannot take {data!r}")

    relay = OutputRelay(loop, callback, max_chunk=64, pace=0.0)
    with caplog.at_level(logging.WARNING):
        relay.post("stdout", b"secret-output-1")
        await asyncio.sleep(0.01)
        relay.post("stderr", b"secret-output-2")
        await asyncio.sleep(0.01)
        relay.drain()
    assert calls == [b"secret-output-1"]
    assert "ValueError" in caplog.text
    assert "secret-output" not in caplog.text
    relay.close()
    relay.post("stdout", b"after close")  # nothing queued, nothing delivered
    relay.drain()
    assert calls == [b"secret-output-1"]
