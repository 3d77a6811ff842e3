"""The state of one walk over a request's shell syntax: commands, reasons, flows, what was not seen."""

from __future__ import annotations

from orchestrator.gate.analysis import SIMPLE, ShellAnalysis

FROM_FILE = "\x00file"
"""Standard input read from a file (``bash < script.sh``): a script file, not code from a stream."""


class WalkState:
    """What the walk of one request has found so far (shared across nested parses)."""

    __slots__ = (
        "assignments",
        "bg",
        "commands",
        "flows",
        "from_input",
        "opaque",
        "parse_ok",
        "pipes",
        "reasons",
        "redirects",
        "reserved",
        "script_commands",
        "script_readers",
        "self_spawning",
        "spliced",
        "src",
        "stdin",
        "unanalyzed",
        "unmask",
        "unseen",
        "variables",
        "wrap_level",
        "wraps",
    )

    def __init__(self) -> None:
        self.commands: list[tuple[str, ...]] = []
        self.reasons: dict[str, None] = {}
        self.redirects: list[tuple[str, str]] = []
        self.flows: list[tuple[int, int]] = []
        self.wraps: list[tuple[int, int]] = []
        self.unmask: dict[str, str] = {}
        self.reserved = ""
        self.self_spawning: list[str] = []
        self.parse_ok = True
        self.src = b""
        self.wrap_level = 0
        self.bg = 0
        self.pipes = 0
        self.variables: dict[str, None] = {}
        self.assignments: dict[str, None] = {}
        self.unseen: dict[str, None] = {}
        self.unanalyzed: list[tuple[str, ...]] = []
        self.opaque: list[tuple[str, tuple[str, ...]]] = []
        self.from_input: set[int] = set()
        self.script_readers: list[int] = []
        self.script_commands: list[int] = []
        self.spliced = False
        """Line continuations are not checked again (a nested analysis made to compare readings)."""
        """Commands parsed out of a here-document a shell reads: they do not inherit it as input."""
        self.stdin: dict[int, str | None] = {}
        """Command index → the here-document or here-string it reads (None: one with expansions)."""

    def add(self, words: tuple[str, ...]) -> int:
        self.commands.append(words)
        return len(self.commands) - 1

    def blind(self, reason: str, *, complex_too: bool = True) -> None:
        """Record what the gate cannot see (and, by default, count it as complexity too)."""
        self.unseen[reason] = None
        if complex_too:
            self.reasons[reason] = None

    def result(self) -> ShellAnalysis:
        if self.unmask:
            self._restore()
        commands = tuple(self.commands)
        reasons = self.reasons
        if not reasons and len(commands) != 1:
            reasons = {"no command" if not commands else "multiple commands": None}
        return ShellAnalysis(
            argv=commands[0] if commands else None,
            is_complex=bool(reasons),
            reason="; ".join(reasons) if reasons else SIMPLE,
            commands=commands,
            parse_ok=self.parse_ok,
            redirects=tuple(self.redirects) if self.redirects else (),
            flows=tuple(dict.fromkeys(self.flows)) if self.flows else (),
            wraps=tuple(self.wraps) if self.wraps else (),
            self_spawning=tuple(dict.fromkeys(self.self_spawning)) if self.self_spawning else (),
            variables=tuple(self.variables) if self.variables else (),
            assignments=tuple(self.assignments) if self.assignments else (),
            unseen=tuple(self.unseen) if self.unseen else (),
            unanalyzed=tuple(self.unanalyzed) if self.unanalyzed else (),
            opaque=tuple(self.opaque) if self.opaque else (),
            script_readers=tuple(self.script_readers),
            script_commands=tuple(self.script_commands),
        )

    def _restore(self) -> None:
        """Put back the characters ``mask`` replaced."""
        table = str.maketrans(self.unmask)
        self.commands = [tuple(w.translate(table) for w in words) for words in self.commands]
        self.redirects = [(op, target.translate(table)) for op, target in self.redirects]
        self.self_spawning = [name.translate(table) for name in self.self_spawning]
        self.variables = {name.translate(table): None for name in self.variables}
        self.assignments = {name.translate(table): None for name in self.assignments}
        self.unanalyzed = [tuple(w.translate(table) for w in words) for words in self.unanalyzed]
        self.opaque = [(name.translate(table), tuple(w.translate(table) for w in words)) for name, words in self.opaque]
        self.unseen = {reason.translate(table): None for reason in self.unseen}
        self.reasons = {reason.translate(table): None for reason in self.reasons}
