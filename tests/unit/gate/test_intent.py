"""Shell intent: words, complexity reasons, every command found, wrappers, parity with argv."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.domain.sanitized import Intent
from orchestrator.gate.intent import MAX_WRAPPER_DEPTH, ShellAnalysis, analyze_argv, analyze_shell

# --------------------------------------------------------------------------------------------
# words


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("ls -la", ("ls", "-la")),
        ("'rm' \"-rf\"", ("rm", "-rf")),
        ("echo 'a b' \"c d\" e\\ f", ("echo", "a b", "c d", "e f")),
        ("echo $'a\\nb\\t\\x41\\101\\u00e9\\''", ("echo", "a\nb\tAA\u00e9'")),
        ('echo "a\\$b\\\\c\\"d\\`e\\x"', ("echo", 'a$b\\c"d`e\\x')),
        ("echo 'it'\"'\"'s'", ("echo", "it's")),
        ("echo a'b'\"c\"d", ("echo", "abcd")),
        ("echo '' \"\"", ("echo", "", "")),
        ("echo *.py ~/x [ab]", ("echo", "*.py", "~/x", "[ab]")),
        ("echo '{a,b}' \\{a,b} {a} ${x:-a,b}", ("echo", "{a,b}", "{a,b}", "{a}", "${x:-a,b}")),
        ("echo a\\\nb", ("echo", "ab")),
        ("\\rm -f x", ("rm", "-f", "x")),
        ("/usr/bin/env", ("/usr/bin/env",)),
        ('echo $"hi"', ("echo", "hi")),
        ("export A=1 B", ("export", "A=1", "B")),
        ("ls a=b 1 -1 %x", ("ls", "a=b", "1", "-1", "%x")),
    ],
)
def test_words_are_unquoted(command: str, words: tuple[str, ...]) -> None:
    a = analyze_shell(command)
    assert a.commands == (words,)
    assert a.argv == words
    assert not a.is_complex, a.reason
    assert a.reason == "simple command"
    assert a.parse_ok


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("rm {-rf,build}", ("rm", "-rf", "build")),
        ("cp f{,.bak}", ("cp", "f", "f.bak")),
        ("echo a{b,c{d,e}}f {1..3} {a..c}", ("echo", "abf", "acdf", "acef", "1", "2", "3", "a", "b", "c")),
    ],
)
def test_brace_expansion_is_read_as_bash_expands_it(command: str, words: tuple[str, ...]) -> None:
    """bash makes several words of ``{a,b}``: ``rm {-rf,build}`` runs ``rm -rf build``."""
    a = analyze_shell(command)
    assert a.commands == (words,) and a.reason == "brace expansion" and not a.unseen


@pytest.mark.parametrize("command", ["echo {a,'b c'}", "echo ${x}{a,b}", "echo {a,$(id)}"])
def test_brace_expansion_the_gate_cannot_expand_is_unseen(command: str) -> None:
    assert any("brace expansion" in u for u in analyze_shell(command).unseen)


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("ls $HOME", ("ls", "$HOME")),
        ('ls "$HOME/x"', ("ls", '"$HOME/x"')),
        ("ls ${A:-b}", ("ls", "${A:-b}")),
        ("ls $((1+2))x", ("ls", "$((1+2))x")),
        ('ls a"$B"c', ("ls", 'a"$B"c')),
    ],
)
def test_a_word_with_an_expansion_keeps_its_source_text(command: str, words: tuple[str, ...]) -> None:
    a = analyze_shell(command)
    assert a.commands[0] == words
    assert not a.is_complex  # an expansion in an argument alone is not complex


# --------------------------------------------------------------------------------------------
# complexity


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("ls | wc", "pipeline"),
        ("ls |& wc", "pipeline"),
        ("a && b", "command list (&&)"),
        ("a || b", "command list (||)"),
        ("a; b", "command list (;)"),
        ("a & b", "background job (&)"),
        ("sleep 1 &", "background job (&)"),
        ("a\nb", "newline-separated commands"),
        ("(cd x; ls)", "subshell"),
        ("{ ls; }", "command group ({ })"),
        ("echo $(id)", "command substitution"),
        ("echo `id`", "command substitution"),
        ('echo "$(id)"', "command substitution"),
        ("diff <(ls a) <(ls b)", "process substitution"),
        ("ls > out", "redirection"),
        ("ls 2>&1", "redirection"),
        ("cat < in", "redirection"),
        ("cat <<EOF\nx\nEOF", "here-document"),
        ("cat <<< x", "here-string"),
        ("$CMD -la", "expansion in command word"),
        ("$(which ls) -la", "expansion in command word"),
        ('"$X" y', "expansion in command word"),
        ("/bin/r? x", "expansion in command word"),
        ("/bin/rm* x", "expansion in command word"),
        ("r{m,} x", "expansion in command word"),
        ("for i in 1 2; do echo $i; done", "control flow (for)"),
        ("for ((i=0;i<2;i++)); do echo; done", "control flow (for)"),
        ("while true; do ls; done", "control flow (while)"),
        ("until false; do ls; done", "control flow (until)"),
        ("if true; then ls; fi", "control flow (if)"),
        ("case $x in a) ls;; esac", "control flow (case)"),
        ("select x in a; do ls; done", "control flow (select)"),
        ("f() { ls; }", "function definition"),
        ("function g { ls; }", "function definition"),
        ("A=1 ls", "variable assignment"),
        ("A=1", "variable assignment"),
        ("x=$(id)", "variable assignment"),
        ("! ls", "negation (!)"),
        ("[[ -f x ]]", "test expression ([[ ]])"),
        ("[ -f x ]", "test expression ([ ])"),
        ("((i++))", "arithmetic command"),
        ("env ls", "wrapper 'env' runs another command"),
        ("bash -c 'ls'", "wrapper 'bash -c' runs another command"),
    ],
)
def test_complex_reasons(command: str, reason: str) -> None:
    a = analyze_shell(command)
    assert a.is_complex
    assert reason in a.reasons, a.reason
    assert a.reason == "; ".join(a.reasons)


def test_several_reasons_in_first_found_order() -> None:
    a = analyze_shell("ls | wc && echo $(id) > out")
    assert a.reason == "command list (&&); pipeline; command substitution; redirection"


def test_trailing_semicolon_and_comments_stay_simple() -> None:
    for command in ("ls;", "ls # a comment", "  ls  ", "ls\n"):
        a = analyze_shell(command)
        assert not a.is_complex, (command, a.reason)
        assert a.commands == (("ls",),)


def test_parse_error() -> None:
    a = analyze_shell('ls "unterminated')
    assert not a.parse_ok
    assert a.is_complex
    assert a.reason == "parse error at 1:4"
    assert a.commands == (("ls",),)  # best effort
    b = analyze_shell("echo ok\nls )")
    assert b.reasons[0] == "parse error at 2:4"


def test_empty_command() -> None:
    for command in ("", "   ", "# only a comment"):
        a = analyze_shell(command)
        assert a.argv is None and a.commands == () and a.is_complex and a.reason == "no command"
    assert analyze_argv([]).reason == "no command"


# --------------------------------------------------------------------------------------------
# every command, anywhere


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls | grep x | wc -l", [("ls",), ("grep", "x"), ("wc", "-l")]),
        ("a && (b; c) || { d; }", [("a",), ("b",), ("c",), ("d",)]),
        ("echo $(id -u) `whoami`", [("echo", "$(id -u)", "`whoami`"), ("id", "-u"), ("whoami",)]),
        ("cat <(curl x) >(tee y)", [("cat", "<(curl x)", ">(tee y)"), ("curl", "x"), ("tee", "y")]),
        ("for f in $(ls); do rm $f; done", [("ls",), ("rm", "$f")]),
        ("if test -f x; then cat x; else touch x; fi", [("test", "-f", "x"), ("cat", "x"), ("touch", "x")]),
        ("while read l; do echo $l; done < f", [("read", "l"), ("echo", "$l")]),
        ("f() { rm -rf /; }; f", [("rm", "-rf", "/"), ("f",)]),
        ("cat <<EOF\n$(rm -rf /)\nEOF", [("cat",), ("rm", "-rf", "/")]),
        ("X=$(curl x) make", [("curl", "x"), ("make",)]),
        ('[[ -n "$(id)" ]]', [("id",)]),
        ("echo ${X:-$(id)}", [("echo", "${X:-$(id)}"), ("id",)]),
        ("ls > $(mktemp)", [("ls",), ("mktemp",)]),
    ],
)
def test_every_command_is_found(command: str, expected: list[tuple[str, ...]]) -> None:
    a = analyze_shell(command)
    assert list(a.commands) == expected
    assert a.argv == expected[0]


def test_flows_redirects_and_self_spawning() -> None:
    a = analyze_shell("curl x | tee f | sh")
    assert a.flows == ((0, 1), (1, 2))
    b = analyze_shell("sh <(curl x)")
    assert b.commands == (("sh", "<(curl x)"), ("curl", "x")) and b.flows == ((1, 0),)
    c = analyze_shell("ls > /dev/sda 2>&1 < in")
    assert c.redirects == ((">", "/dev/sda"), ("2>&", "1"), ("<", "in"))
    d = analyze_shell("psql <<'EOF'\nDROP TABLE x;\nEOF")
    assert d.redirects == (("<<", "DROP TABLE x;\n"),)
    assert analyze_shell(":(){ :|:& };:").self_spawning == (":",)
    assert analyze_shell("bomb() { bomb | bomb & }; bomb").self_spawning == ("bomb",)
    assert analyze_shell("f() { f & f; }").self_spawning == ("f",)
    assert analyze_shell("f() { ls; }; f").self_spawning == ()
    e = analyze_shell("sudo bash -c 'ls'")
    assert e.wraps == ((0, 1), (1, 2)) and e.flows == ()


# --------------------------------------------------------------------------------------------
# wrappers

WRAPPED = [
    ("bash -c 'rm -rf x'", "bash -c", [("rm", "-rf", "x")]),
    ("sh -lc 'ls | wc'", "sh -c", [("ls",), ("wc",)]),
    ("bash -e -c 'ls'", "bash -c", [("ls",)]),
    ("bash -o pipefail -c 'ls'", "bash -c", [("ls",)]),
    ("/bin/zsh -ec ls", "zsh -c", [("ls",)]),
    ("eval 'rm -rf x'", "eval", [("rm", "-rf", "x")]),
    ("eval rm -rf x", "eval", [("rm", "-rf", "x")]),
    ("exec -a name rm x", "exec", [("rm", "x")]),
    ("command rm x", "command", [("rm", "x")]),
    ("builtin echo x", "builtin", [("echo", "x")]),
    ("env -i -u HOME -C /tmp A=1 B=2 rm x", "env", [("rm", "x")]),
    ("/usr/bin/env rm x", "env", [("rm", "x")]),
    ("env -S 'rm -f' x", "env", [("rm", "-f", "x")]),
    ("env --split-string='rm -f' x", "env", [("rm", "-f", "x")]),
    ("nice -n 10 rm x", "nice", [("rm", "x")]),
    ("nice -10 rm x", "nice", [("rm", "x")]),
    ("ionice -c3 rm x", "ionice", [("rm", "x")]),
    ("nohup rm x", "nohup", [("rm", "x")]),
    ("timeout -s KILL -k 5 10s rm x", "timeout", [("rm", "x")]),
    ("timeout 5 rm x", "timeout", [("rm", "x")]),
    ("time -p rm x", "time", [("rm", "x")]),
    ("stdbuf -oL -e 0 rm x", "stdbuf", [("rm", "x")]),
    ("setsid -f rm x", "setsid", [("rm", "x")]),
    ("chrt -f 10 rm x", "chrt", [("rm", "x")]),
    ("taskset -c 0,1 rm x", "taskset", [("rm", "x")]),
    ("unbuffer -p rm x", "unbuffer", [("rm", "x")]),
    ("watch -n 1 'ls | wc'", "watch", [("ls",), ("wc",)]),
    ("watch -x rm x", "watch", [("rm", "x")]),
    ("xargs -I {} -n 1 -P 4 rm {}", "xargs", [("rm", "{}")]),
    ("xargs -0 -d '\\n' -a list rm", "xargs", [("rm",)]),
    ("xargs -i rm {}", "xargs", [("rm", "{}")]),
    ("find . -name '*.o' -exec rm -f {} \\;", "find -exec", [("rm", "-f", "{}")]),
    ("find . -execdir sh -c 'ls' \\; -ok rm {} +", "find -exec", [("sh", "-c", "ls"), ("ls",), ("rm", "{}")]),
    ("sudo -u root -E rm x", "sudo", [("rm", "x")]),
    ("sudo -- FOO=1 rm x", "sudo", [("rm", "x")]),
    ("sudo FOO=1 rm x", "sudo", [("rm", "x")]),
    ("doas -u root rm x", "doas", [("rm", "x")]),
    ("su -c 'rm x' root", "su", [("rm", "x")]),
    ("su - root -c 'rm x'", "su", [("rm", "x")]),
    ("su --command='rm x'", "su", [("rm", "x")]),
    ("runuser -u bob -- rm x", "runuser", [("rm", "x")]),
    ("pkexec --user root rm x", "pkexec", [("rm", "x")]),
    ("flock /tmp/l rm x", "flock", [("rm", "x")]),
    ("flock -w 5 /tmp/l -c 'rm x'", "flock", [("rm", "x")]),
    ("flock -n /tmp/l --command 'rm x'", "flock", [("rm", "x")]),
    ("script -q -c 'rm x' /dev/null", "script", [("rm", "x")]),
    ("parallel -j 4 rm {} ::: a b", "parallel", [("rm", "{}")]),
    ("busybox rm x", "busybox", [("rm", "x")]),
    ("chroot /mnt rm x", "chroot", [("rm", "x")]),
    ("unshare -r rm x", "unshare", [("rm", "x")]),
    ("nsenter -t 1 -m rm x", "nsenter", [("rm", "x")]),
    ("strace -f -o log rm x", "strace", [("rm", "x")]),
    ("sg staff 'rm x'", "sg", [("rm", "x")]),
    ("coproc rm x", "coproc", [("rm", "x")]),
    ("trap 'rm x' EXIT", "trap", [("rm", "x")]),
    ("trap -- 'rm x' INT TERM", "trap", [("rm", "x")]),
    ("mapfile -C 'rm x' -c 1 arr", "mapfile", [("rm", "x")]),
    ("readarray -t -C'rm x' arr", "readarray", [("rm", "x")]),
    ("compgen -C 'rm x' w", "compgen", [("rm", "x")]),
    ("compgen -W '$(rm x)' w", "compgen", [("rm", "x")]),
    ("alias ll='rm x'", "alias", [("rm", "x")]),
]


@pytest.mark.parametrize(("command", "label", "inner"), WRAPPED)
def test_wrappers_are_unwrapped(command: str, label: str, inner: list[tuple[str, ...]]) -> None:
    a = analyze_shell(command)
    assert a.is_complex
    assert f"wrapper '{label}' runs another command" in a.reasons, a.reason
    assert a.commands[0] == tuple(shlex.split(command))  # the wrapper itself stays
    for words in inner:
        assert words in a.commands, (words, a.commands)
    assert a.argv == a.commands[0]


@pytest.mark.parametrize(
    "command",
    [
        "command -v ls",
        "command -V ls",
        "bash script.sh",
        "bash",
        "sh -s",
        "env",
        "env -i",
        "xargs",
        "xargs -0",
        "sudo -l",
        "sudo -e /etc/hosts",
        "ionice -p 1",
        "taskset -p 1",
        "chrt -p 1",
        "find . -name x",
        "timeout 5",
        "nice",
        "su",
        "script log",
        "flock 3",
        "trap -p",
        "trap -l",
        "trap - INT",
        "trap INT",
        "trap 2 3",
        "mapfile arr",
        "compgen -W 'a b' x",
        "compgen -f x",
        "alias",
        "alias -p",
        "alias ll",
    ],
)
def test_not_wrapping(command: str) -> None:
    a = analyze_shell(command)
    assert not a.is_complex, a.reason
    assert len(a.commands) == 1


def test_nested_wrappers() -> None:
    a = analyze_shell("sudo -n env A=1 timeout 5 nice bash -c 'rm -fr / | cat'")
    assert ("rm", "-fr", "/") in a.commands
    assert ("cat",) in a.commands
    for label in ("sudo", "env", "timeout", "nice", "bash -c"):
        assert f"wrapper '{label}' runs another command" in a.reasons
    assert "pipeline" in a.reasons


def test_wrapper_with_a_dynamic_string() -> None:
    a = analyze_shell('bash -c "$CMD"')
    assert "'bash -c' runs a command string that cannot be analyzed" in a.reasons
    b = analyze_shell("sudo $CMD x")
    assert "expansion in command word" in b.reasons


def test_wrapper_depth_is_bounded() -> None:
    command = "ls"
    for _ in range(MAX_WRAPPER_DEPTH + 4):
        command = "bash -c " + shlex.quote(command)
    a = analyze_shell(command)
    assert "wrapper nesting too deep" in a.reasons
    argv = ["nice"] * 50 + ["ls"]
    assert "wrapper nesting too deep" in analyze_argv(argv).reasons


def test_inner_parse_error_is_reported() -> None:
    a = analyze_shell("bash -c 'ls )'")
    assert not a.parse_ok
    assert "parse error at 1:4 in the command run by 'bash -c'" in a.reasons


def test_deep_nesting_does_not_recurse_without_bound() -> None:
    a = analyze_shell("echo " + "$(" * 400 + "ls" + ")" * 400)
    assert a.is_complex and "nesting too deep" in a.reasons
    chain = analyze_shell(" && ".join(["ls"] * 3000))
    assert len(chain.commands) == 3000 and chain.reason == "command list (&&)"
    pipe = analyze_shell(" | ".join(["cat"] * 2000))
    assert len(pipe.commands) == 2000


# --------------------------------------------------------------------------------------------
# argv and parity


def test_argv_is_simple_and_literal() -> None:
    a = analyze_argv(["ls", "-la", "|", "wc", "$(id)"])
    assert a == analyze_shell("ls -la '|' wc '$(id)'")
    assert not a.is_complex and a.commands == (("ls", "-la", "|", "wc", "$(id)"),)


def test_argv_wrappers() -> None:
    a = analyze_argv(["bash", "-c", "ls | wc"])
    assert a == analyze_shell("bash -c 'ls | wc'")
    assert a.commands == (("bash", "-c", "ls | wc"), ("ls",), ("wc",))
    assert a.reason == "wrapper 'bash -c' runs another command; pipeline"
    b = analyze_argv(["/usr/bin/sudo", "rm", "-rf", "/"])
    assert b.commands == (("/usr/bin/sudo", "rm", "-rf", "/"), ("rm", "-rf", "/"))


def test_known_parity() -> None:
    assert analyze_argv(["ls", "-la"]) == analyze_shell("ls -la")
    assert analyze_argv(["echo", "it's", 'a "b"', ""]) == analyze_shell(shlex.join(["echo", "it's", 'a "b"', ""]))


_RESERVED = {
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do", "done",
    "function", "in", "coproc", "time",
}  # fmt: skip
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


def _shell_reads_as_command(program: str) -> bool:
    """argv[0] that a shell would not read as a plain command word even when quoted by shlex."""
    return program not in _RESERVED and not _ASSIGNMENT.match(program)


text = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00", exclude_categories=["Cs"]))
programs = st.one_of(
    st.sampled_from(["ls", "git", "rm", "/bin/rm", "cat", "echo", "python3", "x-y", "a.b", "%", "[", "{"]),
    text.filter(lambda t: t != ""),
).filter(_shell_reads_as_command)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, args=st.lists(text, max_size=6))
def test_parity_argv_and_its_shell_quoting(program: str, args: list[str]) -> None:
    argv = [program, *args]
    assert analyze_argv(argv) == analyze_shell(shlex.join(argv))


wrappers = st.sampled_from(
    [
        *("bash", "sh", "env", "sudo", "timeout", "nice", "xargs", "eval", "su", "find", "watch", "command", "time"),
        *("trap", "alias", "mapfile", "readarray", "compgen", "let", "declare", "read", "printf"),
    ]
)
wrapper_args = st.lists(
    st.one_of(
        text,
        st.sampled_from(["-c", "-lc", "--", "5", "-n", "ls -la | wc", "A=1", "-exec", ";", "rm", "-C", "-W", "-v"]),
        st.sampled_from(["a[$(id)]", "x=$((y))", "${X@P}", "-i", "a[i]=1", "ll=rm x", "EXIT"]),
    ),
    max_size=6,
)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=wrappers, args=wrapper_args)
def test_parity_through_wrappers(program: str, args: list[str]) -> None:
    argv = [program, *args]
    assert analyze_argv(argv) == analyze_shell(shlex.join(argv))


def test_to_intent() -> None:
    assert analyze_shell("ls -la").to_intent() == Intent(argv=["ls", "-la"], is_complex=False, reason="simple command")
    i = analyze_shell("ls | wc").to_intent()
    assert i == Intent(argv=["ls"], is_complex=True, reason="pipeline")
    assert analyze_shell("").to_intent().argv is None


def test_analysis_is_immutable_and_cached_results_are_equal() -> None:
    a = analyze_shell("git status")
    assert isinstance(a, ShellAnalysis)
    with pytest.raises(AttributeError):
        a.argv = ("x",)  # type: ignore[misc]
    assert analyze_shell("git status") == a
    long_command = "echo " + "x" * 10_000
    assert analyze_shell(long_command).commands[0][1] == "x" * 10_000


def test_ansi_c_escapes_never_make_lone_surrogates() -> None:
    assert analyze_shell("echo $'\\ud800\\U0001F600\\x41'").commands == (("echo", "\ufffd\U0001f600A"),)


CRASHERS = [
    "{\U00031860",
    "{\U0010fffd",
    "{\U000e0001",
    "{\U000d48a2",
    "\U000935e9w{\U000d48a2 -c {𪍒\U00094c21¿É\U0007b332¯ ;",
    "echo {😀 ${x:-😀} '{😀'",
]


def test_inputs_that_crash_tree_sitter_bash_are_analyzed_safely() -> None:
    """tree-sitter-bash 0.25 segfaults on '{' then a 4-byte UTF-8 character (upstream #337):
    run in a child process so a regression fails this test instead of killing the run."""
    code = (
        "import sys\n"
        "from orchestrator.gate.intent import analyze_shell\n"
        "for s in sys.argv[1:]:\n"
        "    a = analyze_shell(s)\n"
        "    print(a.commands)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, *CRASHERS], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert analyze_shell("echo {😀 ${x:-😀} '{😀'").commands == (("echo", "{😀", "${x:-😀}", "{😀"),)
    argv = ["bash", "-c", "echo {😀 | wc", "😀"]
    assert analyze_argv(argv) == analyze_shell(shlex.join(argv))


# --------------------------------------------------------------------------------------------
# keywords and builtins that run commands, expansions that evaluate code


def test_coproc_compound_commands_are_found() -> None:
    a = analyze_shell("coproc (rm -rf /)")
    assert ("rm", "-rf", "/") in a.commands and "wrapper 'coproc' runs another command" in a.reasons
    b = analyze_shell("coproc N { rm x; }")
    assert ("rm", "x") in b.commands
    c = analyze_shell("coproc { rm x; }")
    assert ("rm", "x") in c.commands


def test_substitutions_in_declaration_subscripts_are_found() -> None:
    assert ("id",) in analyze_shell("export a[$(id)]=1").commands
    assert ("id",) in analyze_shell("export 'a[$(id)]=1'").commands  # export evaluates the subscript
    assert ("id",) in analyze_shell("read 'a[$(id)]'").commands


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        ("echo ${X@P}", "${…@op} transformation"),
        ('echo "${X@Q}"', "${…@op} transformation"),
        ("cat <<EOF\n${X@P}\nEOF", "${…@op} transformation"),
        ("echo $((X))", "arithmetic expansion"),
        ("echo $((0x1f + X))", "arithmetic expansion"),
        ("echo $[X]", "arithmetic expansion"),
        ("((x++))", "arithmetic command"),
        ("for ((i=0;i<n;i++)); do :; done", "arithmetic for"),
        ("echo ${a[i]}", "array subscript"),
        ('echo "${a[$i]}"', "array subscript"),
        ("a[i]=1 ls", "array subscript"),
        ("a=([X]=1)", "array subscript"),
        ("declare -a a=([$i]=1)", "array subscript"),
        ("echo ${!X}", "${!…} indirection"),
        ("echo ${!X:-y}", "${!…} indirection"),
        ("echo ${S:off}", "substring offset"),
        ("echo ${S:1:n}", "substring offset"),
        ("let x=1", "let"),
        ("declare -i x=y", "declare -i/-n"),
        ("typeset -ri x=y", "typeset -i/-n"),
        ("local -n ref=x", "local -i/-n"),
        ("[[ $x -eq 1 ]]", "arithmetic comparison in [[ ]]"),
        ("[[ x -lt 1 ]]", "arithmetic comparison in [[ ]]"),
        ("[ -v 'a[$i]' ]", "subscripted variable name given to -v"),
        ("[[ -v a[i] ]]", "subscripted variable name given to -v"),
        ("read 'a[i]'", "subscripted variable name given to read"),
        ('read "a[$i]"', "subscripted variable name given to read"),
        ("printf -v 'a[i]' x", "subscripted variable name given to printf"),
        ("unset 'a[i]'", "subscripted variable name given to unset"),
        ("export 'a[i]=1'", "subscripted variable name given to export"),
        ("getopts ab 'a[i]'", "subscripted variable name given to getopts"),
        ("test -v 'a[i]'", "subscripted variable name given to test"),
        ("bash -c 'echo ${X@P}'", "${…@op} transformation"),
        ("command let x", "let"),
    ],
)
def test_expansions_that_evaluate_code_make_a_command_complex(command: str, kind: str) -> None:
    a = analyze_shell(command)
    assert a.is_complex
    assert f"expansion that can evaluate code ({kind})" in a.reasons, a.reason


@pytest.mark.parametrize(
    "command",
    [
        "echo $X ${X} ${X:-d} ${#X} ${X/a/b} ${X,,}",
        'echo "$X" "a${X}b"',
        "echo $((1 + 2)) $((0x1f)) $((2#101)) $[3]",
        "echo ${a[1]} ${a[@]} ${a[*]} ${a[-1]} ${#a[@]}",
        "echo ${!pre*} ${!pre@} ${!a[@]}",
        "echo ${S:1:2} ${S: -1}",
        "read line",
        "printf '%s[%s]' a b",
        "export A=1 B",
        "declare -a arr",
        "declare -a arr=(1 2) b=([0]=x [2]=y)",
        "declare -p x",
        "export -n X",
        "unset a[1]",
        "test -n x",
    ],
)
def test_plain_expansions_stay_simple(command: str) -> None:
    a = analyze_shell(command)
    assert not any("evaluate code" in r for r in a.reasons), a.reason
    assert not a.is_complex, a.reason


def test_simple_tests_stay_without_code_evaluation() -> None:
    for command in ("[ $x -eq 1 ]", "[[ 1 -eq 2 ]]", "[[ -f x ]]"):
        assert not any("evaluate code" in r for r in analyze_shell(command).reasons), command


def test_variables_and_assignments_are_recorded() -> None:
    a = analyze_shell('cat $F "${G:-x}" $_ $1 $@ > "$OUT" && echo ${a[1]}')
    assert a.variables == ("F", "G", "_", "OUT", "a")
    assert analyze_shell("$CMD x").variables == ()  # a computed program name is reported apart
    assert analyze_shell("$CMD $X").variables == ("X",)
    assert analyze_shell("cat <<EOF\n$X\nEOF").variables == ("X",)
    b = analyze_shell("A=1 B=$C ls; D[1]=2")
    assert b.assignments == ("A", "B", "D") and b.variables == ("C",)
    assert analyze_shell("ls").variables == () and analyze_shell("ls").assignments == ()
    assert analyze_argv(["cat", "$F"]).variables == ()  # no shell, no expansion
    assert analyze_argv(["bash", "-c", "cat $F"]).variables == ("F",)
