"""The service's live output: each stream redacted and capped on its own, and put together exactly what the
execution result keeps of the same captured bytes; a callback that fails never breaks anything."""

from __future__ import annotations

import logging

import pytest

from orchestrator.backends.base import OutputStream, StreamCapture
from orchestrator.backends.docker.capture import StreamSink
from orchestrator.pipeline.executor import keep_output
from orchestrator.pipeline.live_output import LiveOutput
from orchestrator.profiles import ProfileCaps, ProfileRegistry, ResolvedProfile
from orchestrator.results import Redactor

SECRET = "tok-3f9a1c77e2b04d5e"


def profile(max_output: int) -> ResolvedProfile:
    return ProfileRegistry().resolve("workspace-write", caps=ProfileCaps(max_output_bytes=max_output))


def run(
    live: LiveOutput, redactor: Redactor, limits: ResolvedProfile, writes: list[tuple[OutputStream, bytes]]
) -> tuple[StreamCapture, StreamCapture]:
    """What the backend does: keep up to cap + margin of each stream, handing each kept piece over."""
    sinks = {
        "stdout": StreamSink(limits.stdout_max_bytes + redactor.margin, lambda d: live.feed("stdout", d)),
        "stderr": StreamSink(limits.stderr_max_bytes + redactor.margin, lambda d: live.feed("stderr", d)),
    }
    for stream, data in writes:
        sinks[stream].write(data)
    return sinks["stdout"].result(), sinks["stderr"].result()


WRITES: list[tuple[OutputStream, bytes]] = [
    ("stdout", b"starting\n"),
    ("stdout", b"the value is " + SECRET[:7].encode()),  # a secret split across writes
    ("stderr", b"warn: password=hun"),
    ("stdout", SECRET[7:].encode() + b"\n"),
    ("stderr", b"ter2xyz9 retrying\n"),
    ("stdout", b"done " * 30 + b"\n"),
]


@pytest.mark.parametrize("cap", [20, 64, 1000])
def test_the_chunks_put_together_are_the_results_output(cap: int) -> None:
    redactor = Redactor(literals=[SECRET])
    limits = profile(cap)
    got: list[tuple[OutputStream, bytes]] = []
    live = LiveOutput(redactor, limits, lambda stream, data: got.append((stream, data)))
    captures = run(live, redactor, limits, WRITES)
    live.finish(captures)
    for stream, capture, limit in zip(
        ("stdout", "stderr"), captures, (limits.stdout_max_bytes, limits.stderr_max_bytes), strict=True
    ):
        shown = b"".join(data for s, data in got if s == stream)
        assert shown == keep_output(capture, limit, redactor).data
        assert SECRET[:7].encode() not in shown and b"hunter2" not in shown
    assert b"starting\n" in got[0][1]


def test_without_a_normal_end_nothing_held_back_is_shown() -> None:
    redactor = Redactor(literals=[SECRET])
    got: list[bytes] = []
    live = LiveOutput(redactor, profile(1000), lambda stream, data: got.append(data))
    live.feed("stdout", b"line\nthe value is " + SECRET[:7].encode())
    assert got == [b"line\nthe value is "]
    live.finish(None)  # the capture failed: its end is not the stream's end
    live.finish(None)
    live.feed("stdout", SECRET[7:].encode())  # finished: ignored
    assert got == [b"line\nthe value is "]


def test_a_callback_that_raises_is_logged_by_type_and_never_called_again(caplog: pytest.LogCaptureFixture) -> None:
    redactor = Redactor(literals=[SECRET])
    calls: list[bytes] = []

    def callback(stream: OutputStream, data: bytes) -> None:
        calls.append(data)
        raise RuntimeError(f"the client went away while sending {data!r}")

    live = LiveOutput(redactor, profile(1000), callback)
    with caplog.at_level(logging.WARNING):
        captures = run(live, redactor, profile(1000), WRITES)
        live.finish(captures)
    assert calls == [b"starting\n"]
    assert "RuntimeError" in caplog.text
    assert "starting" not in caplog.text and "went away" not in caplog.text
