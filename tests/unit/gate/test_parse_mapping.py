"""Every construct the gate cannot map to one argv counts as complex: when the gate calls a string a
simple command (or one whose only complexity is a brace expansion it expanded), bash reads exactly the
words the gate read. Checked against a real bash that cannot
run anything (restricted, no PATH, in an empty directory): it only prints the words it would pass."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from orchestrator.gate.intent import analyze_shell

TOKENS = st.one_of(
    st.from_regex(r"[a-z0-9_./,:@%+=-]{1,6}", fullmatch=True),
    st.from_regex(r"'[a-z ;|&()<>$`\"*?#{}!\\]{0,6}'", fullmatch=True),
    st.from_regex(r'"[a-z ;|&()<>\'*?#{}!]{0,6}"', fullmatch=True),
    st.from_regex(r"\\[;|&()<> *?#'\"{}!$`]", fullmatch=True),
    st.sampled_from(
        [
            *(";", "|", "&", "&&", "||", "(", ")", "{", "}", "<", ">", ">>", "2>&1", "\n", "#", "*", "?", "[a]"),
            *("!", "$x", "if", "then", "fi", "[[", "]]", "((", "))", "x=1", "a[1]=2", "`", "$(", "<(", "<<<"),
            *("<<E", "\\\n", "{a,b}", "{-rf,x}", "{1..3}", "a{,b}", "{a,{b,c}}", "{a..c..2}", ",", ".."),
            *("$'\\\n'", "'\\\n'", "-eq", "=~", "==", "$((", "#y"),
        ]
    ),
)
GLUE = st.sampled_from([" ", " ", " ", "", "\t"])


@st.composite
def shell_strings(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(TOKENS, GLUE), min_size=1, max_size=7))
    return "printf " + "".join(token + glue for token, glue in parts)


_PRINT_WORDS = "printf() { for a; do builtin printf '%s\\0' \"$a\"; done; }\n"
"""``printf`` made to print each word it is given, NUL-terminated."""


def _bash_words(command: str, cwd: Path) -> list[str] | None:
    """The words bash passes to printf, or None if bash fails (a syntax error)."""
    proc = subprocess.run(
        ["/bin/bash", "--norc", "--noprofile", "-r", "-c", _PRINT_WORDS + command],
        capture_output=True,
        cwd=cwd,
        env={"PATH": "/nonexistent"},
        timeout=10,
        check=False,
    )
    if proc.returncode != 0:
        return None
    return proc.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


@pytest.fixture(scope="module")
def empty_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("nothing-here")


# derandomized: CI runs the same examples every time (a new counterexample is found by running this with
# more examples and another seed by hand, never by a build that fails once in a while); the @examples
# are the counterexamples found so far
@settings(
    max_examples=600, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(command=shell_strings())
@example(command="printf \\; {{a,b}")
@example(command="printf a=~ ")
@example(command="printf 7-0gz, == ==\\} .. \\<\tif ")
@example(command="printf ''-m3gw@ \\${-rf,x}")
@example(command='printf "bxwrf"\t== ov_zs:; \'}bjj?h\'\t"}bjj?h"\tg65 ')
@example(command="printf '' 'y$'tw38\"\"$x\\( \\) ")
def test_a_simple_verdict_is_what_bash_runs(command: str, empty_dir: Path) -> None:
    analysis = analyze_shell(command)
    if analysis.is_complex and set(analysis.reasons) != {"brace expansion"}:
        return
    assert analysis.parse_ok and not analysis.unseen, command
    assert analysis.commands == (analysis.argv,)
    assert analysis.argv is not None
    if analysis.variables:
        return  # an argument expands a variable: the gate keeps its source text (and rates it)
    assert _bash_words(command, empty_dir) == list(analysis.argv[1:]), command
