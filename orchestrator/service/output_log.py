"""An execution's output as its readers see it: numbered chunks (the SSE event ids), kept whole while it
runs, then — once the result holds the same text — kept only as chunk boundaries over the result. So a
finished execution costs its output once, not twice, and a reader resuming from an id gets exactly what
followed it, even after the execution left memory (the boundaries are remembered apart, cheaply).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from orchestrator.domain.wire import OutputChunk, RunResult

Stream = Literal["stdout", "stderr"]
Bounds = tuple[tuple[Stream, int], ...]  # (stream, characters) of each chunk, in order


@dataclass(slots=True)
class OutputLog:
    chunks: list[OutputChunk] = field(default_factory=list)  # while running (or when no result holds them)
    bounds: Bounds | None = None  # once sealed
    result: RunResult | None = None
    reliable: bool = True  # the numbering is the one live readers saw

    def append(self, stream: Stream, text: str) -> None:
        self.chunks.append(OutputChunk(stream=stream, data=text))

    def seal(self, result: RunResult) -> Bounds | None:
        """The run ended with ``result``: keep only boundaries when the chunks are exactly its output."""
        joined = {"stdout": "", "stderr": ""}
        for chunk in self.chunks:
            joined[chunk.stream] += chunk.data
        if (joined["stdout"], joined["stderr"]) != (result.stdout, result.stderr):
            return None  # keep the chunks themselves (they are what readers saw)
        self.bounds = tuple((c.stream, len(c.data)) for c in self.chunks)
        self.result = result
        self.chunks = []
        return self.bounds

    @classmethod
    def of_result(cls, result: RunResult | None, bounds: Bounds | None) -> OutputLog:
        """A finished execution read back: with its remembered boundaries, or one chunk per stream
        (then the numbering is not the one live readers saw)."""
        if result is None:
            return cls(reliable=bounds is None or not bounds)
        if bounds is None:
            whole: Bounds = (("stdout", len(result.stdout)), ("stderr", len(result.stderr)))
            return cls(bounds=tuple(b for b in whole if b[1]), result=result, reliable=False)
        return cls(bounds=bounds, result=result)

    def __len__(self) -> int:
        return len(self.bounds) if self.bounds is not None else len(self.chunks)

    def chunk(self, index: int) -> OutputChunk:
        if self.bounds is None or self.result is None:
            return self.chunks[index]
        start = sum(n for s, n in self.bounds[:index] if s == self.bounds[index][0])
        stream, length = self.bounds[index]
        text = self.result.stdout if stream == "stdout" else self.result.stderr
        return OutputChunk(stream=stream, data=text[start : start + length])

    def size(self) -> int:
        return sum(len(c.data) for c in self.chunks)


class BoundsMemory:
    """The boundaries of many finished executions (a few bytes each), least recently used out."""

    def __init__(self, max_entries: int = 20_000) -> None:
        self._entries: OrderedDict[str, Bounds] = OrderedDict()
        self._max = max_entries

    def remember(self, execution_id: str, bounds: Bounds) -> None:
        self._entries[execution_id] = bounds
        self._entries.move_to_end(execution_id)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def get(self, execution_id: str) -> Bounds | None:
        return self._entries.get(execution_id)
