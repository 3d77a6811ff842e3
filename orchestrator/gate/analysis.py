"""The result of analyzing a command string or argv: what it would run, and what the gate could not see."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.domain.sanitized import Intent

SIMPLE = "simple command"


@dataclass(frozen=True, slots=True)
class ScriptSource:
    """A script file the analyzed argv runs, as the gate may read it (``ShellExecRequest.script``)."""

    path: str
    """The word of the argv that names it."""
    text: str | None
    """Its content as text; None when the gate cannot read it (``problem`` says why)."""
    problem: str | None = None
    """Why the content cannot be read: binary, not UTF-8, longer than the gate reads, not in the sanitized
    form."""


@dataclass(frozen=True, slots=True)
class ShellAnalysis:
    """What a command would run. Immutable; equal analyses mean equal meaning."""

    argv: tuple[str, ...] | None
    """Simple: the one command's words; complex: the first simple command's words (None if none)."""
    is_complex: bool
    reason: str
    """'simple command', or the reasons it is complex joined by '; ' (first-found order)."""
    commands: tuple[tuple[str, ...], ...]
    """Every simple command found anywhere, including what wrappers run."""
    parse_ok: bool
    redirects: tuple[tuple[str, str], ...] = ()
    """(operator, target) of every redirection, e.g. ('>', '/dev/sda'), ('2>&', '1'), ('<<<', 'x');
    for a here-document ('<<', body)."""
    flows: tuple[tuple[int, int], ...] = ()
    """(i, j): output of commands[i] feeds commands[j] (pipe, command/process substitution)."""
    wraps: tuple[tuple[int, int], ...] = ()
    """(i, j): wrapper commands[i] runs commands[j] (j inherits i's input)."""
    self_spawning: tuple[str, ...] = ()
    """Functions that spawn themselves (fork-bomb shape)."""
    variables: tuple[str, ...] = ()
    """Names of the variables expanded (``$F``, ``${F}``, ``"${F:-x}"``) in arguments, redirect targets,
    here-documents or assignment values, in first-found order (not those only in a command word)."""
    assignments: tuple[str, ...] = ()
    """Names assigned by shell assignments (``A=1 cmd``, ``A=1``), in first-found order."""
    unseen: tuple[str, ...] = ()
    """What the gate could not see of what would run: a parse failure, nesting past the limit, a
    computed program name, a command string built at run time, code in a language it does not read,
    code read from input, an option it does not know before a wrapped command. Never allowed without
    approval, in any mode."""
    unanalyzed: tuple[tuple[str, ...], ...] = ()
    """Words seen but not analyzed as commands (past the nesting limit, after an unknown wrapper option,
    in text that did not parse): the denylist is matched against every suffix of them."""
    opaque: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(program, words) of programs the gate cannot read through: a program in no table and its
    operands, a wrapper and its option values. A denylisted program among the words means asking."""
    script_readers: tuple[int, ...] = ()
    """Indices of the shells that run the request's script file, when the gate read its content (a
    ``ScriptSource``): empty when there is none, or when its content could not be read (then ``unseen``
    says why)."""
    script_commands: tuple[int, ...] = ()
    """Indices of the commands read from the script's content: its words are the script's (which may hold
    what the runner put in it), so reasons name these commands' programs, never quote them."""

    @property
    def reasons(self) -> tuple[str, ...]:
        """The individual reasons (empty for a simple command)."""
        return () if not self.is_complex else tuple(self.reason.split("; "))

    @property
    def complete(self) -> bool:
        """Whether the gate established the command's complete intent."""
        return not self.unseen

    def to_intent(self) -> Intent:
        return Intent(
            argv=list(self.argv) if self.argv is not None else None,
            is_complex=self.is_complex,
            reason=self.reason,
            unseen=list(self.unseen),
        )
