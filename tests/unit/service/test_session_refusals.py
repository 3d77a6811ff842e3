"""What a session is refused before any sandbox exists, on the record (no engine needed)."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, cast

import pytest

from orchestrator.backends.base import Capabilities, SandboxBackend
from orchestrator.backends.kubernetes.backend import KubernetesBackend
from orchestrator.domain.errors import InputInvalid, SandboxUnavailable, SessionNotFound
from orchestrator.evidence import iter_records
from orchestrator.pipeline.factory import build_orchestrator
from orchestrator.profiles import ProfileRegistry
from orchestrator.service.sessions import Sessions

ALLOW_ALL = "safety:\n  mode: allow\n  rules: []\napprovals:\n  provider: rules\n  default: approved\n"


class OneShotOnly:
    """A backend that takes no input while a sandbox runs: its capabilities say so (and its session methods
    are not there to be called)."""

    def __init__(self, inner: SandboxBackend) -> None:
        self._inner = inner

    @property
    def capabilities(self) -> Capabilities:
        return dataclasses.replace(self._inner.capabilities, sessions=False)

    def __getattr__(self, name: str) -> Any:
        if name in ("send_input", "end_input", "resize"):
            raise AttributeError(name)
        return getattr(self._inner, name)


@pytest.fixture
async def sessions(tmp_path: Path) -> Sessions:
    (tmp_path / "config.yaml").write_text(ALLOW_ALL)
    orch = build_orchestrator(
        tmp_path / "config.yaml",
        evidence_path=tmp_path / "evidence.jsonl",
        backend=cast(SandboxBackend, OneShotOnly(KubernetesBackend())),  # no sessions
        profiles=ProfileRegistry(),
    )
    return Sessions(orch)


async def test_a_backend_without_session_input_refuses_sessions_on_the_record(
    sessions: Sessions, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chown(ws, 1000, 1000)
    with pytest.raises(SandboxUnavailable, match="cannot run interactive sessions") as refused:
        await sessions.open({"tool": "exec_command", "cmd": "cat"}, workspace=ws)
    await sessions.orchestrator.evidence.flush()
    ident = refused.value.details["execution_id"]
    kinds = [r.event for r in iter_records(tmp_path / "evidence.jsonl", execution_id=ident)]
    assert kinds[-1] == "run_failed", kinds
    assert sessions.list(tenant="default", subject="anonymous") == []
    await sessions.orchestrator.aclose()


async def test_only_exec_command_opens_and_unknown_sessions_are_not_found(sessions: Sessions, tmp_path: Path) -> None:
    with pytest.raises(InputInvalid):
        await sessions.open({"tool": "shell_exec", "argv": ["true"]}, workspace=tmp_path)
    with pytest.raises(SessionNotFound):
        await sessions.write({"tool": "write_stdin", "session_id": "ex-nope", "chars": "x"})
    with pytest.raises(SessionNotFound):
        await sessions.close("ex-nope", tenant="default", subject="anonymous")
    await sessions.orchestrator.aclose()


@pytest.mark.parametrize(
    ("chunks", "limit", "answers"),
    [
        ([b"abc"], 2, [b"ab", b"c"]),
        (["aé€".encode()], 2, [b"a", "é".encode(), b"\xe2\x82", b"\xac"]),  # whole characters while they fit
        (["aé€".encode()], 4, ["aé".encode(), "€".encode()]),
        (["€".encode()], 1, [b"\xe2", b"\x82", b"\xac"]),  # a limit below one character still moves on
        ([b"ab", "é".encode()], 3, [b"ab", "é".encode()]),
    ],
)
def test_answers_cut_output_between_characters(chunks: list[bytes], limit: int, answers: list[bytes]) -> None:
    from orchestrator.service.sessions import _Session

    session = _Session(auth=None, tty=False)  # type: ignore[arg-type]
    for chunk in chunks:
        session.feed("stdout", chunk)
    got = []
    while session.chunks:
        got.append(session.take(limit)[0])
    assert got == answers and session.buffered == 0
