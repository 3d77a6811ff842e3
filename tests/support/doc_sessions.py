"""Shell sessions written in the docs, run as written.

A ```` ```console ```` block is a transcript: ``$ command`` lines (a line ending in ``\\`` goes on), each followed
by what it prints (stdout and stderr as a terminal shows them). In what it prints, a line ``...`` stands for
any lines (none included) and ``...`` inside a line for any text. A command must exit 0 unless the next one is
``echo $?``, which then prints the status the doc says. ```` ```console terminal ```` marks a transcript typed
at a terminal: it runs under a pseudo-terminal, and a line that shows an approval prompt followed by an answer
(``Approve? [y]es / [s]ession / [n]o / [a]bort: y``) is typed in when that prompt appears.

```` ```python NAME.py ```` is a file the next transcript uses: it is written to NAME.py in the session's
directory before that transcript runs (a ```` ```yaml NAME.yaml ```` block likewise; ``~/NAME.yaml``: in the
home directory).

The blocks of a document run in order in one :class:`Shell`: its directory and exported variables carry
from one block to the next, as they would in the reader's own shell; its background jobs are stopped at
:meth:`Shell.close`.
"""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

OPEN = re.compile(r"^```(?P<lang>\w+)(?:[ \t]+(?P<info>\S.*?))?\s*$")
PROMPT = "Approve? [y]es / [s]ession / [n]o / [a]bort: "
_MARK = "@@first-hour@@"


@dataclass(frozen=True)
class Step:
    command: str
    expected: tuple[str, ...]


@dataclass(frozen=True)
class Block:
    """One fenced block: a transcript (``steps``) or a file (``name`` and ``text``)."""

    doc: str
    line: int
    lang: str
    terminal: bool = False
    steps: tuple[Step, ...] = ()
    #: a transcript's lines before its first ``$ `` (a prompt the reader would copy, e.g. ``#``: never run)
    stray: tuple[str, ...] = ()
    name: str | None = None
    text: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def blocks(path: Path, root: Path) -> list[Block]:
    """Every fenced block of a markdown document with a language, in order: transcripts (``console``), named
    files, and the rest (``name`` None: shown, not run)."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").split("\n")
    doc = path.relative_to(root).as_posix()
    i = 0
    while i < len(lines):
        match = OPEN.match(lines[i])
        if match is None:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        lang, info = match["lang"], (match["info"] or "").strip()
        if lang == "console":
            stray = tuple(line for line in body[: _first_command(body)] if line.strip())
            found.append(Block(doc, start, lang, terminal=info == "terminal", steps=_steps(body), stray=stray))
        elif info and re.fullmatch(r"(~/)?[\w.-]+\.(py|yaml|yml|json|txt)", info):
            found.append(Block(doc, start, lang, name=info, text="\n".join(body) + "\n"))
        else:
            found.append(Block(doc, start, lang, text="\n".join(body) + "\n"))
    return found


def _first_command(body: list[str]) -> int:
    return next((i for i, line in enumerate(body) if line.startswith("$ ")), len(body))


def _steps(body: list[str]) -> tuple[Step, ...]:
    steps: list[Step] = []
    command: list[str] = []
    expected: list[str] = []
    for line in body:
        if command and command[-1].endswith("\\"):
            command.append(line)
            continue
        if line.startswith("$ "):
            if command:
                steps.append(Step("\n".join(command), tuple(expected)))
            command, expected = [line[2:]], []
        elif command:
            expected.append(line.rstrip())
    if command:
        steps.append(Step("\n".join(command), tuple(expected)))
    return tuple(steps)


def pattern(expected: tuple[str, ...]) -> re.Pattern[str]:
    """A regular expression for a step's whole output: ``...`` lines any lines, ``...`` in a line any text."""
    parts = []
    for line in expected:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(".*?".join(re.escape(piece) for piece in line.split("...")) + r"[ \t]*\n")
    return re.compile("".join(parts))


def matches(expected: tuple[str, ...], output: str) -> bool:
    text = "\n".join(line.rstrip() for line in output.rstrip("\n").split("\n")) + "\n" if output.strip() else ""
    return pattern(expected).fullmatch(text) is not None


def answers(step: Step) -> list[str]:
    """What is typed at the step's approval prompts, in order."""
    return [line[len(PROMPT) :].strip() for line in step.expected if line.startswith(PROMPT)]


@dataclass
class Outcome:
    step: Step
    output: str
    status: int


@dataclass
class Shell:
    """A reader's shell: a directory, exported variables, background jobs (stopped at :meth:`close`)."""

    cwd: Path
    env: dict[str, str]
    state: Path  # where the shell's variables and directory are kept between blocks
    timeout_s: float = 600
    jobs: list[int] = field(default_factory=list)

    def write(self, block: Block) -> None:
        assert block.name is not None
        home = Path(self.env["HOME"])
        path = home / block.name[2:] if block.name.startswith("~/") else self.cwd / block.name
        path.write_text(block.text, encoding="utf-8")

    def run(self, block: Block) -> list[Outcome]:
        script = self._script(block.steps)
        if block.terminal:
            raw = self._in_terminal(script, [a for s in block.steps for a in answers(s)])
        else:
            proc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-c", script],
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=self.timeout_s,
                start_new_session=True,
            )
            raw = proc.stdout.decode("utf-8", "replace")
        self._load_state()
        return self._outcomes(block.steps, raw)

    def _script(self, steps: tuple[Step, ...]) -> str:
        lines = [
            "set +e",
            f"[ -f {q(self.state / 'env')} ] && . {q(self.state / 'env')}",
            "__status() { return $1; }; __last=0",
        ]
        for number, step in enumerate(steps):
            lines.append(f"printf '%s\\n' {q(f'{_MARK} {number}')}; __status $__last")
            lines.append(step.command)
            lines.append(f"__last=$?; printf '\\n%s %s\\n' {q(_MARK + ' status')} \"$__last\"")
        lines.append(f"export -p > {q(self.state / 'env')}; pwd > {q(self.state / 'cwd')}")
        lines.append("jobs -p > " + q(self.state / "jobs"))
        return "\n".join(lines) + "\n"

    def _in_terminal(self, script: str, typed: list[str]) -> str:
        pid, fd = pty.fork()
        if pid == 0:  # the child: a login-less bash on the terminal
            try:
                os.chdir(self.cwd)
                os.execvpe("bash", ["bash", "--noprofile", "--norc", "-c", script], self.env)
            finally:
                os._exit(127)
        out = bytearray()
        seen = 0
        deadline = time.monotonic() + self.timeout_s
        try:
            while time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 0.5)
                if not ready:
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: the terminal's last process went away
                    break
                if not chunk:
                    break
                out.extend(chunk)
                text = out.decode("utf-8", "replace").replace("\r\n", "\n")
                while typed and text.count(PROMPT) > seen:
                    seen += 1
                    os.write(fd, typed.pop(0).encode() + b"\n")
            else:
                raise TimeoutError(f"the terminal session did not end within {self.timeout_s:g} s")
        finally:
            os.close(fd)
            if os.waitpid(pid, os.WNOHANG) == (0, 0):  # still running (a timeout): its session goes
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)  # pty.fork made the child a session (and group) leader
                os.waitpid(pid, 0)
        # the terminal echoes what was typed after its prompt: keep the transcript as the reader saw it
        return out.decode("utf-8", "replace").replace("\r\n", "\n")

    def _load_state(self) -> None:
        env_file, cwd_file, jobs_file = self.state / "env", self.state / "cwd", self.state / "jobs"
        if cwd_file.exists():
            self.cwd = Path(cwd_file.read_text().strip())
        if jobs_file.exists():
            self.jobs += [int(p) for p in jobs_file.read_text().split()]
        if env_file.exists():
            probe = subprocess.run(
                ["bash", "--noprofile", "--norc", "-c", f". {q(env_file)}; env -0"],
                env=self.env,
                capture_output=True,
                check=True,
            )
            self.env = dict(item.split("=", 1) for item in probe.stdout.decode().split("\0") if "=" in item and item)

    @staticmethod
    def _outcomes(steps: tuple[Step, ...], raw: str) -> list[Outcome]:
        outcomes = []
        for number, step in enumerate(steps):
            begin = raw.find(f"{_MARK} {number}\n")
            end = raw.find(f"\n{_MARK} status ", begin)
            if begin < 0 or end < 0:
                outcomes.append(Outcome(step, raw[begin:] if begin >= 0 else raw, -1))
                break
            body = raw[begin + len(f"{_MARK} {number}\n") : end]
            status = int(raw[end:].split("\n", 2)[1].split()[-1])
            outcomes.append(Outcome(step, body, status))
        return outcomes

    def close(self) -> None:
        """Stop the background jobs the docs started (a server): SIGTERM, then SIGKILL after 10 s."""
        for pid in self.jobs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for pid in self.jobs:
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def q(value: object) -> str:
    return shlex.quote(str(value))


def describe(block: Block, outcome: Outcome) -> str:
    expected = "\n".join(outcome.step.expected)
    return (
        f"{block.where}: $ {outcome.step.command}\n-- exit {outcome.status}, printed:\n{outcome.output}\n"
        f"-- the doc says:\n{expected}"
    )


def check(block: Block, outcomes: list[Outcome]) -> None:
    """Every step printed what the doc says, and exited 0 unless the next step shows its status."""
    assert len(outcomes) == len(block.steps), describe(block, outcomes[-1])
    for number, outcome in enumerate(outcomes):
        assert matches(outcome.step.expected, outcome.output), describe(block, outcome)
        following = block.steps[number + 1].command.strip() if number + 1 < len(block.steps) else ""
        if following != "echo $?":
            assert outcome.status == 0, describe(block, outcome)
