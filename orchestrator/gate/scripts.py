"""Readers of the code the gate can read besides shell: awk programs and sed scripts; and which
programs run code from their input.

awk: ``system()``, pipes to or from a command (``print | "cmd"``, ``"cmd" | getline``) and ``@``
(gawk ``@load``, indirect calls) run commands or load code; ``print > FILE`` writes files (strings and
regular expressions are blanked first). sed: the ``e`` command and the ``s///e`` flag run commands,
``w``/``W``/``s///w`` write files. ``--sandbox`` (both) disables all of these.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

from orchestrator.gate.programs import SHELL, Runs, lookup, program_name, scan

__all__ = [
    "SedScript",
    "awk_program",
    "code_runs_commands",
    "reads_code_from_input",
    "script_operand",
    "sed_script",
]

# --------------------------------------------------------------------------------------------
# awk

_REGEX_AFTER = frozenset("\n(,~!{};&|?:=")
"""Where a ``/`` opens a regular expression rather than dividing (after these, or at the start)."""
UNREADABLE_AWK = "cannot be read (an unterminated string or regular expression)"
_AWK_CHECKS = (
    (re.compile(r"\bsystem\b"), "runs commands (system)"),
    (re.compile(r"(?<!\|)\|(?!\|)"), "runs commands through a pipe"),
    (re.compile(r"@"), "loads code or calls a function indirectly (@)"),
)
_AWK_PRINT = re.compile(r"\bprintf?\b")


def _awk_print_redirects(text: str) -> bool:
    """A ``>`` outside parentheses in a print/printf statement: output redirected into a file."""
    for m in _AWK_PRINT.finditer(text):
        depth = 0
        for ch in text[m.end() :]:
            if ch in ";}\n":
                break
            if ch == "(":
                depth += 1
            elif ch == ")":
                depth -= 1
            elif ch == ">" and depth <= 0:
                return True
    return False


def _awk_code(text: str) -> str | None:
    """The program with its strings, regular expressions and comments blanked, read left to right in
    one pass (a ``"`` inside ``/"/`` is not a string); None when one of them does not end."""
    out: list[str] = []
    i, n = 0, len(text)
    previous = ""
    while i < n:
        ch = text[i]
        if ch == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        if ch == '"' or (ch == "/" and (not previous or previous in _REGEX_AFTER)):
            end = _awk_literal_end(text, i)
            if end is None:
                return None
            out.append('""' if ch == '"' else "//")
            previous = ch
            i = end + 1
            continue
        out.append(ch)
        if not ch.isspace() or ch == "\n":
            previous = ch
        i += 1
    return "".join(out)


def _awk_literal_end(text: str, start: int) -> int | None:
    """The index of the quote or slash that closes the literal opened at ``start``."""
    close = text[start]
    bracket = False
    j = start + 1
    while j < len(text):
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == "\n":
            return None
        if close == "/" and ch == "[":
            bracket = True
        elif close == "/" and ch == "]":
            bracket = False
        elif ch == close and not bracket:
            return j
        j += 1
    return None


def awk_program(text: str) -> list[str]:
    """What an awk program text does that matters: runs commands, loads code, writes files."""
    stripped = _awk_code(text)
    if stripped is None:
        return [UNREADABLE_AWK]
    found = [what for pattern, what in _AWK_CHECKS if pattern.search(stripped)]
    if _awk_print_redirects(stripped):
        found.append("writes files (print >)")
    return found


# --------------------------------------------------------------------------------------------
# sed

_SED_NO_ARGUMENT = frozenset("=dDgGhHlLnNpPxzF")
_SED_TEXT = frozenset("aic")
_SED_LABEL = frozenset("btT:")
_SED_FILE_READ = frozenset("rR")


class SedScript:
    """A reader of GNU sed scripts, enough to find the commands that run programs (``e``, the ``s``
    flag ``e``) or write files (``w``, ``W``, the ``s`` flag ``w``)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.i = 0
        self.found: dict[str, None] = {}
        self.ok = True

    def _delimited(self, delim: str, regex: bool) -> bool:
        """Skip to after the closing ``delim``; bracket expressions in a regex hide it."""
        text = self.text
        n = len(text)
        while self.i < n:
            ch = text[self.i]
            if ch == "\n":
                return False
            if ch == "\\":
                self.i += 2
                continue
            if ch == delim:
                self.i += 1
                return True
            if regex and ch == "[":
                self.i += 1
                if self.i < n and text[self.i] == "^":
                    self.i += 1
                if self.i < n and text[self.i] == "]":
                    self.i += 1
                while self.i < n and text[self.i] != "]":
                    if text[self.i] == "[" and self.i + 1 < n and text[self.i + 1] in ".:=":
                        close = text.find(text[self.i + 1] + "]", self.i + 2)
                        if close < 0:
                            return False
                        self.i = close + 2
                        continue
                    if text[self.i] == "\n":
                        return False
                    self.i += 1
                self.i += 1
                continue
            self.i += 1
        return False

    def _to_line_end(self) -> None:
        end = self.text.find("\n", self.i)
        self.i = len(self.text) if end < 0 else end

    def _text_argument(self) -> None:
        text = self.text
        n = len(text)
        while self.i < n:
            if text[self.i] == "\\":
                self.i += 2
                continue
            if text[self.i] == "\n":
                return
            self.i += 1

    def _address(self) -> bool:
        text = self.text
        n = len(text)
        for _ in range(2):
            while self.i < n and text[self.i] in " \t":
                self.i += 1
            if self.i >= n:
                return True
            ch = text[self.i]
            if ch.isdigit() or ch in "+~":
                self.i += 1
                while self.i < n and (text[self.i].isdigit() or text[self.i] == "~"):
                    self.i += 1
            elif ch == "$":
                self.i += 1
            elif ch in {"/", "\\"}:
                delim = "/"
                if ch == "\\":
                    if self.i + 1 >= n:
                        return False
                    delim = text[self.i + 1]
                    self.i += 1
                self.i += 1
                if not self._delimited(delim, regex=True):
                    return False
                while self.i < n and text[self.i] in "IM":
                    self.i += 1
            else:
                return True
            while self.i < n and text[self.i] in " \t":
                self.i += 1
            if self.i < n and text[self.i] == ",":
                self.i += 1
                continue
            return True
        return True

    def read(self) -> None:
        text = self.text
        n = len(text)
        while self.i < n:
            ch = text[self.i]
            if ch in " \t\n;}{":
                self.i += 1
                continue
            if ch == "#":
                self._to_line_end()
                continue
            if not self._address():
                self.ok = False
                return
            while self.i < n and text[self.i] in " \t!":
                self.i += 1
            if self.i >= n:
                return
            cmd = text[self.i]
            self.i += 1
            if cmd in "{}" or cmd in _SED_NO_ARGUMENT:
                if cmd in "lL":
                    while self.i < n and text[self.i].isdigit():
                        self.i += 1
                continue
            if cmd in "qQ":
                while self.i < n and (text[self.i].isdigit() or text[self.i] in " \t"):
                    self.i += 1
            elif cmd in _SED_TEXT:
                self._text_argument()
            elif cmd in _SED_LABEL:
                # GNU sed ends a label at a blank too (``:a e cmd`` runs ``e cmd``): the rest is read
                # as the next command, which errs towards finding one
                while self.i < n and text[self.i] in " \t":
                    self.i += 1
                while self.i < n and text[self.i] not in ";\n \t":
                    self.i += 1
            elif cmd in _SED_FILE_READ or cmd == "v":
                self._to_line_end()
            elif cmd == "e":
                self.found["runs a command (e)"] = None
                self._to_line_end()
            elif cmd in "wW":
                if not self._stdout_file():
                    self.found[f"writes a file ({cmd})"] = None
                self._to_line_end()
            elif cmd in "sy":
                if self.i >= n or text[self.i] in "\n\\":
                    self.ok = False
                    return
                delim = text[self.i]
                self.i += 1
                if not self._delimited(delim, regex=cmd == "s") or not self._delimited(delim, regex=False):
                    self.ok = False
                    return
                if cmd == "s":
                    while self.i < n and text[self.i] in "gpiImMe0123456789w":
                        flag = text[self.i]
                        self.i += 1
                        if flag == "e":
                            self.found["runs the pattern space as a command (s///e)"] = None
                        elif flag == "w":
                            if not self._stdout_file():
                                self.found["writes a file (s///w)"] = None
                            self._to_line_end()
                            break
            else:
                self.ok = False
                return

    def _stdout_file(self) -> bool:
        rest = self.text[self.i :].split("\n", 1)[0].strip()
        return rest in ("/dev/stdout", "/dev/stderr")


def sed_script(text: str) -> tuple[list[str], bool]:
    """What a sed script does that matters, and whether it could be read to the end."""
    reader = SedScript(text)
    reader.read()
    return list(reader.found), reader.ok


# --------------------------------------------------------------------------------------------

_AWK_RUNS = ("runs commands", "loads code", UNREADABLE_AWK)


def code_runs_commands(language: str, text: str, *, sandboxed: bool = False) -> str | None:
    """For code the gate can read: what in it runs commands (``""``: nothing). None for a language
    the gate does not read (its code may run anything)."""
    if language == "awk":
        if sandboxed:
            return ""
        return "; ".join(what for what in awk_program(text) if what.startswith(_AWK_RUNS))
    if language == "sed":
        if sandboxed:
            return ""
        found, ok = sed_script(text)
        running = [what for what in found if not what.startswith("writes")]
        if running:
            return "; ".join(running)
        return "" if ok else "cannot be read"
    return None


_STDIN_SCRIPTS = frozenset({"-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0"})


def substituted(word: str) -> bool:
    """A word whose text comes from a command substitution."""
    return "$(" in word or "`" in word or "<(" in word


def stdin_script(word: str) -> bool:
    """A script operand that reads the program's input (or a substitution's output): ``-``, and any
    path under ``/dev`` or ``/proc`` however spelled (``/dev//stdin``, ``/proc/thread-self/fd/0``) —
    no script file lives there."""
    if word in _STDIN_SCRIPTS or substituted(word):
        return True
    normal = posixpath.normpath(word.replace("\\", "")) if word else word
    return normal.startswith(("/dev/", "/proc/")) or normal in ("/dev", "/proc") or "/fd/" in normal


def reads_code_from_input(words: Sequence[str]) -> str | None:
    """The program's name when ``words`` runs code read from its standard input (a shell without
    ``-c`` or a script, ``python3 -``, a REPL), else None."""
    if not words:
        return None
    name = program_name(words[0])
    program = lookup(name)
    if program is None:
        return None
    if name in ("source", "."):
        return name if len(words) > 1 and stdin_script(words[1]) else None
    if not program.script_operand:
        return None
    found = scan(program, words)
    if program is SHELL:
        if found.has("-s"):
            return name
        if found.has("-c") or found.has("--command"):
            return None
    elif any(found.has(option) for option in program.interactive):
        return name  # python -i script.py: the script, then code from its input
    elif any(h.opt is not None and h.opt.runs in (Runs.CODE, Runs.MODULE) for h in found.hits):
        return None
    if found.end < len(words):
        return name if stdin_script(words[found.end]) else None
    return None if found.info else name


def script_operand(words: Sequence[str]) -> int | None:
    """The index of the word ``words`` runs as a script file: the script operand of a shell without ``-c``
    or ``-s`` (``bash --noprofile --norc -e -o pipefail /__w/_temp/x.sh``), or of an interpreter that runs
    no code given otherwise (``python3 /__w/_temp/x.py``); None when it runs none (a ``-c`` string, code or a
    module from an option, an information option, its input)."""
    if not words:
        return None
    program = lookup(program_name(words[0]))
    if program is None or not program.script_operand:
        return None
    found = scan(program, words)
    if program is SHELL and (found.has("-c") or found.has("--command") or found.has("-s")):
        return None
    if found.info or any(h.opt is not None and h.opt.runs is not None for h in found.hits):
        return None
    if found.end >= len(words) or stdin_script(words[found.end]):
        return None
    return found.end
