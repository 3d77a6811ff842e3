"""Output as readers see it: numbered chunks, sealed into boundaries over the result, read back the same."""

from __future__ import annotations

from orchestrator.client.core import OutputReader
from orchestrator.domain.wire import OutputChunk, RunResult
from orchestrator.service.output_log import BoundsMemory, OutputLog


def result(stdout: str, stderr: str = "") -> RunResult:
    return RunResult(
        ok=True,
        execution_id="ex-1",
        decision="allow",
        exit_code=0,
        stdout=stdout,
        stderr=stderr,
        truncated=False,
        timed_out=False,
        oom_killed=False,
        duration_ms=1,
        side_effects=None,
        error=None,
    )


def test_sealed_chunks_are_the_same_chunks_over_the_result() -> None:
    log = OutputLog()
    for stream, text in (("stdout", "ab"), ("stderr", "E1"), ("stdout", "cd\n"), ("stderr", "é2")):
        log.append(stream, text)  # type: ignore[arg-type]
    before = [log.chunk(i) for i in range(len(log))]
    bounds = log.seal(result("abcd\n", "E1é2"))
    assert bounds is not None and log.chunks == [] and log.size() == 0  # the text is held once, in the result
    assert [log.chunk(i) for i in range(len(log))] == before
    again = OutputLog.of_result(result("abcd\n", "E1é2"), bounds)
    assert again.reliable and [again.chunk(i) for i in range(len(again))] == before


def test_chunks_that_are_not_the_result_are_kept() -> None:
    log = OutputLog()
    log.append("stdout", "partial")
    assert log.seal(result("something else")) is None and log.chunk(0).data == "partial"


def test_read_back_without_boundaries_is_marked_unreliable() -> None:
    log = OutputLog.of_result(result("out", "err"), None)
    assert not log.reliable and [log.chunk(i).data for i in range(len(log))] == ["out", "err"]


def test_bounds_memory_forgets_the_oldest() -> None:
    memory = BoundsMemory(max_entries=2)
    for ident in ("a", "b", "c"):
        memory.remember(ident, (("stdout", 1),))
    assert memory.get("a") is None and memory.get("c") == (("stdout", 1),)


def sse(event: str, data: str, ident: str | None = None) -> list[bytes]:
    lines = [f"event: {event}\n"] + ([f"id: {ident}\n"] if ident else []) + [f"data: {data}\n", "\n"]
    return [line.encode() for line in lines]


def test_after_a_reload_the_client_skips_what_it_already_gave() -> None:
    reader = OutputReader()
    got: list[object] = []
    stream = [
        *sse("output", OutputChunk(stream="stdout", data="hello ").model_dump_json(), "0"),
        *sse("reload", "{}"),  # the service lost the numbering: the whole output again
        *sse("output", OutputChunk(stream="stdout", data="hello world").model_dump_json(), "0"),
        *sse("output", OutputChunk(stream="stderr", data="warn").model_dump_json(), "1"),
    ]
    for raw in stream:
        item = reader.item(raw)
        if item is not None:
            got.append(item)
    assert [(c.stream, c.data) for c in got] == [("stdout", "hello "), ("stdout", "world"), ("stderr", "warn")]
