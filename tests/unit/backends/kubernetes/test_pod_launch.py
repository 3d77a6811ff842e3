"""A pre-started pod's launch, its stream faked: what the writer's end says decides whether the command
ran, and a retried connect never starts a second reader on a stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from orchestrator.backends.kubernetes import pod_stdio
from orchestrator.backends.kubernetes.channels import ChannelError
from orchestrator.backends.kubernetes.kube import KubeError
from orchestrator.backends.kubernetes.pod_stdio import PodStdio
from orchestrator.domain.errors import SandboxUnavailable, SideEffectsIncomplete


class FakeChannels:
    def __init__(self, launch_failure: ChannelError | None = None) -> None:
        self.launch_failure = launch_failure
        self.written = b""
        self.markers: list[bytes] = []
        self.closed = False
        self.status = None

    def await_marker(self, marker: bytes, channel: int = 2, timeout_s: float | None = None) -> None:
        self.markers.append(marker)
        if marker == pod_stdio.LAUNCHED_MARKER and self.launch_failure is not None:
            raise self.launch_failure

    def write_stdin(self, data: bytes) -> None:
        self.written += data

    def pump(self, on_stdout: Any, on_stderr: Any) -> None:
        return None

    def close(self) -> None:
        self.closed = True


class FakeKube:
    def __init__(self, channels: FakeChannels, launcher_failures: int = 0) -> None:
        self.channels = channels
        self.launcher_failures = launcher_failures
        self.opened: list[list[str]] = []

    def open_exec(self, namespace: str, pod: str, container: str, command: list[str], **_: Any) -> FakeChannels:
        self.opened.append(command)
        if command[3] == "launch-writer" and self.launcher_failures:
            self.launcher_failures -= 1
            raise KubeError("server", "exec", "the container is not running yet")
        return self.channels


def launcher(channels: FakeChannels) -> PodStdio:
    stdio = PodStdio(FakeKube(channels), "ns", "sbx-1")  # type: ignore[arg-type]
    stdio.open_launcher(1.0)
    return stdio


def test_a_launch_sends_the_header_and_the_message_once() -> None:
    channels = FakeChannels()
    stdio = launcher(channels)
    stdio.launch(b"MSG", None, 1.0)
    assert channels.written == b"3 0\nMSG"
    with pytest.raises(SandboxUnavailable, match="no launch channel"):
        stdio.launch(b"MSG", None, 1.0)  # never twice


def test_a_writer_that_ended_without_its_marker_means_the_command_did_not_run() -> None:
    stdio = launcher(FakeChannels(ChannelError("ended without its start marker", started=True, exited=True)))
    with pytest.raises(SandboxUnavailable, match="did not run"):
        stdio.launch(b"MSG", None, 1.0)


def test_a_stream_that_broke_first_leaves_it_unknown_and_not_retryable() -> None:
    stdio = launcher(FakeChannels(ChannelError("WebSocketConnectionClosedException", started=True)))
    with pytest.raises(SideEffectsIncomplete, match="may have run") as broke:
        stdio.launch(b"MSG", None, 1.0)
    assert broke.value.retryable is False


def test_a_retried_connect_starts_each_output_reader_once() -> None:
    async def scenario() -> int:
        stdio = PodStdio(FakeKube(FakeChannels(), launcher_failures=1), "ns", "sbx-1")  # type: ignore[arg-type]
        await stdio.open(None, 1.0)
        with pytest.raises(KubeError):
            stdio.open_launcher(1.0)
        await stdio.open(None, 1.0)  # the backend's retry: the relays are connected already
        stdio.open_launcher(1.0)
        started = len(stdio.readers)
        await asyncio.gather(*stdio.readers)
        stdio.close()
        return started

    assert asyncio.run(scenario()) == len(pod_stdio.PIPES)
