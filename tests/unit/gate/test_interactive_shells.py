"""Which session commands are interactive shells or REPLs (profiles may forbid them)."""

from __future__ import annotations

import pytest

from orchestrator.gate.interactive import is_interactive_shell


def shell(command: str) -> list[str]:
    return ["/bin/bash", "-c", command]


@pytest.mark.parametrize(
    "command",
    [
        "bash",
        "sh -i",
        "bash --norc",
        "python3",
        "python3.11",
        "python3 -i script.py",
        "node",
        "irb",
        "psql mydb",
        "cd /workspace && bash",
        "ls; python3",
        "env FOO=1 bash",
        "timeout 5 python3",
        "cat | sh",
        "sh -",
        "/usr/bin/env python3 -q",
        "echo 'unterminated",
        # what a first, word-list version missed (an adversarial review): nested strings, redirections,
        # option values, reserved words, wrapper options, stdin scripts, shells outside a short list
        "bash -c bash",
        "sh -c 'python3'",
        "bash 2>&1",
        "bash -o posix",
        "python3 -X dev",
        "{ python3; }",
        "! bash",
        "time python3",
        "if true; then bash; fi",
        "exec -a x bash",
        "env -u HOME bash",
        "timeout -s KILL 5 bash",
        "xargs -o bash",
        "find . -exec bash \\;",
        "python3 -ic 1",
        "bash /dev/stdin",
        "rbash",
        "yash",
        "echo a#b; bash",
        "$'bash'",
        "$(echo bash)",
        "eval $X",
        "gdb",
    ],
)
def test_interactive(command: str) -> None:
    assert is_interactive_shell(shell(command))


@pytest.mark.parametrize(
    "command",
    [
        "python3 script.py",
        "python3 -c 'print(1)'",
        "python3 -m http.server",
        "node app.js",
        "bash script.sh",
        "bash -c 'echo hi'",
        "psql -c 'select 1'",
        "ls -la",
        "cat",
        "npm test",
        "node -e 1",
        "",
    ],
)
def test_not_interactive(command: str) -> None:
    assert not is_interactive_shell(shell(command))


def test_an_argv_is_read_as_given() -> None:
    assert is_interactive_shell(["python3"]) and not is_interactive_shell(["python3", "x.py"])
