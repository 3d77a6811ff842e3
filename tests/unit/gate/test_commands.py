"""Command patterns: program basename, flags in any spelling, positional prefix, program globs."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.gate.commands import (
    CommandPattern,
    ShellInvocation,
    parse_command,
    program_name,
    resolve_long,
    scan_shell_options,
)


def matches(pattern: str, command: str) -> bool:
    return CommandPattern.parse(pattern).matches(shlex.split(command))


@pytest.mark.parametrize(
    ("words", "name"),
    [
        (["rm"], "rm"),
        (["/bin/rm", "-rf"], "rm"),
        (["\\rm"], "rm"),
        (["'rm'"], "rm"),
        (['"/usr/bin/git"'], "git"),
        (["./script.sh"], "script.sh"),
        ([], ""),
    ],
)
def test_program_name(words: list[str], name: str) -> None:
    assert program_name(words) == name


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf /",
        "rm -fr x",
        "rm -r -f x",
        "rm --recursive --force x",
        "/bin/rm -Rf x",
        "rm -rfv x",
        "rm -f -r -- x",
        "rm -R --force x",
        "rm --force=yes -r x",
        "rm --recur --forc x",  # GNU abbreviations
        "rm x -rf",  # GNU permutes options
        "rm -v -i -f -d -r x",
    ],
)
def test_rm_rf_matches_every_spelling(command: str) -> None:
    assert matches("rm -rf", command)


@pytest.mark.parametrize("command", ["rm -r x", "rm x", "rm -f x", "rm -- -rf", "rmdir -rf x", "echo rm -rf"])
def test_rm_rf_does_not_match(command: str) -> None:
    assert not matches("rm -rf", command)


def test_chmod_777() -> None:
    assert matches("chmod 777", "chmod 777 f")
    assert matches("chmod 777", "chmod -R 777 d")
    assert matches("chmod 777", "chmod --recursive 777 d")
    assert not matches("chmod 777", "chmod 755 f")
    assert matches("chmod -R 777", "chmod -R 777 d")
    assert matches("chmod -R 777", "chmod 777 --recursive d")
    assert not matches("chmod -R 777", "chmod 777 d")


def test_git_push_force() -> None:
    for command in (
        "git push -f origin",
        "git push origin main --force",
        "git push --force-with-lease",
        "git push --force-with-lease=main:abc origin",
        "git -C /repo push -f",
        "git -c user.name=x push --force",
        "git --no-pager push --force",
        "git push origin +main",
    ):
        assert matches("git push --force", command), command
    for command in ("git push origin main", "git pull --force", "git -C push status -f", "git push --forc"):
        assert not matches("git push --force", command), command


def test_subcommands_and_positional_prefix() -> None:
    assert matches("git status", "git status -s")
    assert matches("git status", "git -C repo status")
    assert not matches("git status", "git stash")
    assert not matches("git status", "git")
    assert matches("git log", "git log --oneline -5")
    assert matches("ls", "ls -la /tmp")
    assert matches("ls", "/usr/bin/ls")
    assert not matches("ls", "lsblk")
    assert matches("docker run", "docker run -it ubuntu")
    assert matches("python3 --version", "python3 --version")
    assert not matches("python3 --version", "python3 -c 1")
    assert matches("git reset --hard", "git reset HEAD~1 --hard")
    assert matches("git clean -fdx", "git clean -x -d -f")
    assert matches("git clean -fdx", "git clean --force -dx")
    assert not matches("git clean -fdx", "git clean -fd")
    assert matches("git branch -D", "git branch --delete --force x")


def test_value_options_are_not_positionals() -> None:
    parsed = parse_command(["git", "-C", "/repo", "-c", "a=b", "push", "-o", "ci.skip", "origin", "main"])
    assert parsed.positionals == ("push", "origin", "main")
    parsed = parse_command(["cp", "-t", "dest", "a", "b"])
    assert parsed.positionals == ("a", "b")
    parsed = parse_command(["rm", "-rf", "--", "-x", "y"])
    assert parsed.flags == frozenset({"--recursive", "--force"})
    assert parsed.positionals == ("-x", "y")


def test_program_globs() -> None:
    p = CommandPattern.parse("mkfs*")
    assert p.program == "*"
    assert p.program_glob == "mkfs*"
    assert p.matches(["mkfs.ext4", "/dev/sda1"])
    assert p.matches(["/sbin/mkfs", "-t", "ext4"])
    assert not p.matches(["ls"])
    assert CommandPattern.parse("rm* -rf").matches(["rm", "-Rf", "x"])
    assert CommandPattern.parse("python3.? -c").matches(["python3.1", "-c", "x"])


def test_pattern_basics() -> None:
    p = CommandPattern.parse("/bin/rm -rf")
    assert p.program == "rm"
    assert p.text == "/bin/rm -rf"
    assert p == CommandPattern("/bin/rm -rf")
    assert p.flags == frozenset({"--recursive", "--force"})
    assert CommandPattern.parse("sudo").matches(["sudo", "-n", "ls"])
    assert not CommandPattern.parse("sudo").matches([])
    for bad in ("", "   ", "'unterminated"):
        with pytest.raises(ValueError, match="pattern"):
            CommandPattern.parse(bad)


def test_unknown_programs_compare_flags_by_spelling() -> None:
    assert matches("tar -x", "tar -xzf a.tgz")
    assert not matches("tar -x", "tar -X f")  # short flags stay case-sensitive
    assert matches("curl --insecure", "curl --insecure https://x")
    assert not matches("curl -k", "curl --insecure https://x")  # no table for curl


# --------------------------------------------------------------------------------------------
# property: any spelling of a set of rm flags matches exactly when -r and -f are both there

RM_SPELLINGS = {
    "r": ["-r", "-R", "--recursive", "--recur"],
    "f": ["-f", "--force", "--force=1"],
    "v": ["-v", "--verbose"],
    "i": ["-i", "--interactive"],
    "d": ["-d", "--dir"],
}
SHORT = {"r": "rR", "f": "f", "v": "v", "i": "i", "d": "d"}


@st.composite
def rm_command(draw: st.DrawFn) -> tuple[list[str], bool]:
    chosen = draw(st.lists(st.sampled_from(sorted(RM_SPELLINGS)), unique=True))
    words: list[str] = []
    bundle = ""
    for flag in draw(st.permutations(chosen)):
        if draw(st.booleans()):
            bundle += draw(st.sampled_from(SHORT[flag]))
        else:
            words.append(draw(st.sampled_from(RM_SPELLINGS[flag])))
    if bundle:
        words.insert(draw(st.integers(0, len(words))), "-" + bundle)
    targets = draw(st.lists(st.sampled_from(["x", "/", "dir/", "a b", "*"]), max_size=3))
    for target in targets:
        words.insert(draw(st.integers(0, len(words))), target)
    if draw(st.booleans()):
        words += ["--", "-rf"]  # after '--' it is a file name, not flags
    program = draw(st.sampled_from(["rm", "/bin/rm", "/usr/bin/rm"]))
    return [program, *words], ("r" in chosen and "f" in chosen)


@settings(max_examples=500, deadline=None)
@given(case=rm_command())
def test_flag_permutations_and_bundling(case: tuple[list[str], bool]) -> None:
    words, expected = case
    assert CommandPattern.parse("rm -rf").matches(words) is expected
    assert CommandPattern.parse("rm -fr").matches(words) is expected
    assert CommandPattern.parse("rm --recursive --force").matches(words) is expected
    assert CommandPattern.parse("rm").matches(words)


# --------------------------------------------------------------------------------------------
# programs whose options run programs or write files: every spelling reaches one name


@pytest.mark.parametrize(
    ("pattern", "command", "matches"),
    [
        ("sort -o", ["sort", "--output=x", "in"], True),
        ("sort -o", ["sort", "-uo", "x", "in"], True),
        ("sort -o", ["sort", "--out", "x", "in"], True),
        ("sort -o", ["sort", "-ofile", "in"], True),
        ("sort -o", ["sort", "-k", "-o", "in"], False),  # -k takes the next word
        ("sort --compress-program", ["sort", "--compress-p=sh", "x"], True),
        ("tar --to-command", ["tar", "--to-com=sh", "-xf", "a"], True),
        ("tar --to-command", ["tar", "--to-stdout", "-xf", "a"], False),
        ("tar -I", ["tar", "--use-compress-program=zstd", "-cf", "a", "x"], True),
        ("tar --checkpoint-action", ["tar", "--checkpoint-a=exec=sh", "-cf", "a", "x"], True),
        ("tar --checkpoint-action", ["tar", "--checkpoint=10", "-cf", "a", "x"], False),
        ("rsync -e", ["rsync", "-avze", "ssh", "a", "b"], True),
        ("rsync -e", ["rsync", "--rsh=ssh", "a", "b"], True),
        ("date -s", ["date", "--set=10:00"], True),
        ("date -s", ["date", "-d", "-s"], False),  # -d takes the next word
        ("file -C", ["file", "--compile", "-m", "x"], True),
        ("sed -i", ["sed", "--in-place=.bak", "s/a/b/", "f"], True),
        ("git rebase -x", ["git", "rebase", "--exec=make", "main"], True),
        ("git diff --output", ["git", "diff", "--output=x"], True),
        ("git diff --output", ["git", "diff", "--output-indicator-new=+"], False),
        ("git clone -u", ["git", "clone", "--upload-pack=x", "r"], True),
        ("git grep -O", ["git", "grep", "--open-files-in-pager=vi", "x"], True),
    ],
)
def test_dangerous_option_spellings(pattern: str, command: list[str], matches: bool) -> None:
    assert CommandPattern(pattern).matches(command) is matches, (pattern, command)


def test_value_options_of_the_new_programs() -> None:
    assert parse_command(["uniq", "-f", "1", "-s", "2", "in"]).positionals == ("in",)
    assert parse_command(["uniq", "-c", "in", "out"]).positionals == ("in", "out")
    assert parse_command(["sort", "-k", "2", "-t", ",", "-o", "out", "in"]).positionals == ("in",)
    assert parse_command(["tar", "-C", "dir", "-f", "a.tar", "-x", "member"]).positionals == ("member",)


def test_resolve_long() -> None:
    assert resolve_long("sed", "--expr") == ("--expression",)
    assert resolve_long("sed", "--in-pl") == ("--in-place",)
    assert resolve_long("sed", "--s") == ("--s",)  # --sandbox, --separate, --silent: ambiguous
    assert resolve_long("sort", "--out") == ("--output",)
    assert resolve_long("nothing", "--x") == ("--x",)


def _inv(
    operand: int | None,
    *,
    dash_c: bool = False,
    long_command: bool = False,
    dash_s: bool = False,
    info: bool = False,
) -> ShellInvocation:
    return ShellInvocation(operand, dash_c, long_command, dash_s, info)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("bash", _inv(None)),
        ("bash script.sh arg", _inv(1)),
        ("bash -c 'echo hi' name", _inv(2, dash_c=True)),
        ("bash -ec 'echo hi'", _inv(2, dash_c=True)),
        ("bash -c", _inv(None, dash_c=True)),
        ("bash +c x", _inv(2)),
        ("bash -s arg", _inv(2, dash_s=True)),
        ("bash -cs x", _inv(2, dash_c=True, dash_s=True)),
        ("bash +s x", _inv(2)),
        ("bash -o pipefail -c x", _inv(4, dash_c=True)),
        ("bash +o errexit script", _inv(3)),
        ("bash -O extglob script", _inv(3)),
        ("bash -xo pipefail script", _inv(3)),
        ("bash -o", _inv(None)),
        ("bash -- -c", _inv(2)),
        ("bash - -c", _inv(2)),
        ("bash --", _inv(None)),
        ("bash + x", _inv(1)),
        ("bash --rcfile rc script", _inv(3)),
        ("bash --init-file -c script", _inv(3)),
        ("bash --rcfile", _inv(None)),
        ("bash --login script", _inv(2)),
        ("bash --version", _inv(None, info=True)),
        ("bash --help x", _inv(2, info=True)),
        ("fish --command 'echo hi'", _inv(2, long_command=True)),
        ("bash ++o x y", _inv(3)),
    ],
)
def test_scan_shell_options(command: str, expected: ShellInvocation) -> None:
    assert scan_shell_options(shlex.split(command)) == expected


@given(st.lists(st.sampled_from(["-c", "-s", "-o", "+o", "--", "-", "--rcfile", "--version", "x", "-xs"]), max_size=8))
@settings(max_examples=200)
def test_scan_shell_options_operand_in_range(words: list[str]) -> None:
    scan = scan_shell_options(["sh", *words])
    assert scan.operand is None or 1 <= scan.operand <= len(words)
