"""Where bash reads a string differently from the grammar the gate parses with (line continuations,
words after a redirection, quoting inside arithmetic), or where a builtin changes what later runs
(``hash -p``, ``for NAME in``, ``printf -v``, ``set -k``). In mode allow only the denylist stands
between a request and a run: each of these must be denied or asked, and the near misses beside them,
which bash reads the way the gate does, stay allowed."""

from __future__ import annotations

import pytest

from orchestrator.domain.requests import parse_request
from orchestrator.gate.config import SafetyConfig, default_safety_config
from orchestrator.gate.intent import analyze_shell
from orchestrator.gate.policy import Policy
from orchestrator.gate.sanitize import sanitize

_CONFIG = default_safety_config().model_dump()
_CONFIG["mode"] = "allow"
MODE_ALLOW = Policy(SafetyConfig.model_validate(_CONFIG))


def decision(command: str) -> str:
    sanitized, analysis = sanitize(parse_request({"tool": "shell_command", "command": command}))
    return str(MODE_ALLOW.decide(sanitized, analysis, profile="workspace-write").decision.value)


SEEN_AND_DENIED = [
    "$\\\n(sudo id)",  # bash splices before it reads words: $(sudo id)
    "\\\nsudo id",  # a line that starts with a continuation
    ": $(( a['$(sudo id)'] ))",  # quotes are plain characters in arithmetic: the subscript runs
    "[[ 'a[$(sudo id)]' -eq 1 ]]",  # [[ ]] evaluates a quoted operand's subscript too
    'echo x$"$(sudo id)"',  # a locale string inside a concatenation
    "echo >/dev/null $(sudo id)",  # words after a redirection are words of the command
    ">/dev/null sudo id",
    "hash -p /usr/bin/sudo x; x id",  # hash binds a name to a program
    "export 'a[1]=1' 'b[$(sudo id)]=2'",  # every name's subscript, not only the first
    "let 'x[$(sudo id)]=1'",
    "cat <<'E'O\nsudo id\nEO\n",  # the delimiter bash reads is EO: the body is no body
]
UNSEEN_AND_ASKED = [
    "echo x\\\n#y; id",  # after splicing, '#' is inside a word, not a comment
    "{id;}",  # '{' without a blank is a word to bash, a group to the grammar
    "sort $OPTS names.txt",  # computed words before '--' can be options that write or run programs
    "nice /usr/bin/sud? id",  # a glob in a wrapped program's name
    "enable -f ./evil.so x",  # loads a builtin from a file
    "for BASH_ENV in x; do bash -c true; done",  # loop variables are assignments
    "read BASH_ENV <<< x; bash -c true",
    "printf -v BASH_ENV x; bash -c true",
    "set -k; true BASH_ENV=x",  # keyword mode: NAME=VALUE anywhere goes into the environment
]
READ_ALIKE = [
    "ls '\\\n'",  # single quotes keep a continuation
    "echo $'a\\\nb'",  # so does $'…'
    "# c \\\nls",  # and a comment
    'echo "a\\\nb"',  # double quotes splice: the gate reads 'ab' too
    "echo a \\\n b",
    "printf cc",  # printf sets a variable only with -v
    "[ $x -eq 1 ]",  # [ ] wants integers (bash 5.2: "integer expression expected"), evaluates nothing
    "ls $HOME",  # ls has no option that writes or runs a program
]


@pytest.mark.parametrize("command", SEEN_AND_DENIED)
def test_what_bash_reads_differently_is_still_denied(command: str) -> None:
    assert decision(command) == "deny"


@pytest.mark.parametrize("command", UNSEEN_AND_ASKED)
def test_what_the_gate_cannot_read_as_bash_does_is_asked(command: str) -> None:
    assert decision(command) == "ask"
    assert analyze_shell(command).unseen


@pytest.mark.parametrize("command", READ_ALIKE)
def test_what_bash_reads_as_the_gate_does_is_allowed(command: str) -> None:
    assert decision(command) == "allow"
    assert not analyze_shell(command).unseen


def test_spliced_text_is_what_bash_runs() -> None:
    assert analyze_shell("$\\\n(id)").commands[-1] == ("id",)
    assert analyze_shell('echo "a\\\nb"').commands == (("echo", "ab"),)
    assert analyze_shell("echo $'a\\\nb'").commands == (("echo", "a\\\nb"),)
