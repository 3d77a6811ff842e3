"""The pooled sandbox's init (images/init/sandbox-init.c), compiled here as the image build does and run
with launch messages from ``launch_message``: what it applies, and that anything malformed runs nothing."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.backends._support.launch_message import (
    MAGIC,
    MAX_ITEMS,
    MAX_PAYLOAD,
    InitRefusal,
    init_refusal,
    launch_message,
    new_report_token,
)
from orchestrator.backends.base import StreamCapture
from orchestrator.domain.errors import InputInvalid
from tests.support.init_build import SOURCE, compile_init, compile_init_asan


@pytest.fixture(scope="module")
def init(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_init(tmp_path_factory.mktemp("init"))


def run(init: Path, data: bytes, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
    # its own environment stands for what the engine gives a container created with no variables
    env = {"PATH": "/usr/bin:/bin", "FROM_IMAGE": "kept", "LANG": "C"}
    return subprocess.run([str(init)], input=data, capture_output=True, timeout=10, env=env, cwd=cwd, check=False)


def capture(data: bytes) -> StreamCapture:
    return StreamCapture(data, len(data), False)


def raw(*parts: bytes) -> bytes:
    payload = b"".join(part + b"\0" for part in parts)
    return MAGIC + struct.pack(">I", len(payload)) + payload


def test_the_command_gets_the_messages_argv_env_and_directory(init: Path, tmp_path: Path) -> None:
    script = 'printf "%s|" "$0" "$@"; echo; pwd; env | sort'
    message = launch_message(
        ["sh", "-c", script, "zero", "a b", "$HOME", "*"],
        {"PATH": "/bin:/usr/bin", "X": "1 2", "LANG": "C.UTF-8"},
        str(tmp_path),
        with_stdin=False,
    )
    done = run(init, message)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0] == "zero|a b|$HOME|*|"
    assert lines[1] == str(tmp_path)
    # the message's variables over the engine's, as the engine merges a container's over its image's
    assert {"X=1 2", "PATH=/bin:/usr/bin", "LANG=C.UTF-8", "FROM_IMAGE=kept"} <= set(lines) and "LANG=C" not in lines


def test_with_stdin_the_command_reads_exactly_what_follows_the_message(init: Path) -> None:
    rest = b"\x00binary\xff\nafter the message\n" * 1000
    done = run(init, launch_message(["cat"], {"PATH": "/bin"}, "/", with_stdin=True) + rest)
    assert (done.returncode, done.stdout) == (0, rest)


def test_without_stdin_the_command_reads_dev_null_not_the_stream(init: Path) -> None:
    done = run(init, launch_message(["wc", "-c"], {"PATH": "/usr/bin:/bin"}, "/", with_stdin=False) + b"unseen")
    assert (done.returncode, done.stdout.strip()) == (0, b"0")


def test_a_refusal_under_a_report_token_is_the_inits_own_line(init: Path) -> None:
    token = new_report_token()
    refused = run(init, launch_message(["no-such-program-7f3e"], {"PATH": "/bin"}, "/", with_stdin=False, report=token))
    assert refused.returncode == 127
    assert refused.stderr == f"sandbox-init[{token}:127]: no-such-program-7f3e: No such file or directory\n".encode()
    said = init_refusal(token, capture(refused.stdout), capture(refused.stderr))
    assert said == InitRefusal(status=127, reason="no-such-program-7f3e: No such file or directory")
    # another launch's token, or the same line under no token, proves nothing
    assert init_refusal(new_report_token(), capture(refused.stdout), capture(refused.stderr)) is None
    assert init_refusal("", capture(refused.stdout), capture(refused.stderr)) is None


def test_a_command_that_prints_the_line_is_not_a_refusal(init: Path) -> None:
    """Whatever the command writes, it cannot know its launch's token: its output is never the init's."""
    token = new_report_token()
    guess = "sandbox-init[" + "0" * 32 + ":127]: x: No such file or directory"
    script = f"echo '{guess}' >&2; cat /proc/self/environ /proc/1/cmdline >&2 2>/dev/null; exit 127"
    ran = run(init, launch_message(["sh", "-c", script], {"PATH": "/bin"}, "/", with_stdin=False, report=token))
    assert ran.returncode == 127 and token.encode() not in ran.stderr
    assert init_refusal(token, capture(ran.stdout), capture(ran.stderr)) is None
    # nor is a refusal line behind output on stdout, or one cut by the cap
    line = f"sandbox-init[{token}:127]: x\n".encode()
    assert init_refusal(token, capture(b"out"), capture(line)) is None
    assert init_refusal(token, capture(b""), StreamCapture(line, len(line) + 10, True)) is None


@pytest.mark.parametrize(
    ("argv", "cwd", "status", "said"),
    [
        (["no-such-program-7f3e"], "/", 127, b"No such file"),
        (["./not-a-program"], "{tmp}", 126, b"Permission denied"),  # never run through a shell instead
        (["script-without-shebang"], "/", 126, b"Exec format error"),
        (["true"], "/no/such/dir", 125, b"working directory"),
    ],
)
def test_a_command_that_cannot_run_says_why_like_a_shell(
    init: Path, tmp_path: Path, argv: list[str], cwd: str, status: int, said: bytes
) -> None:
    (tmp_path / "not-a-program").write_text("echo ran\n")
    script = tmp_path / "bin" / "script-without-shebang"
    script.parent.mkdir()
    script.write_text("echo ran\n")
    script.chmod(0o755)
    env = {"PATH": f"/usr/bin:/bin:{script.parent}"}
    done = run(init, launch_message(argv, env, cwd.format(tmp=tmp_path), with_stdin=False))
    assert done.returncode == status and said in done.stderr and done.stderr.startswith(b"sandbox-init: ")


def canary_message(canary: Path) -> list[bytes]:
    return [b"", b"", b"null", b"/", b"2", b"touch", str(canary).encode(), b"1", b"PATH=/usr/bin:/bin"]


@pytest.mark.parametrize(
    "mangle",
    [
        lambda parts: b"SBX2" + raw(*parts[:1], *parts[2:])[4:],  # magic (the second version's: no status field)
        lambda parts: MAGIC + struct.pack(">I", 0),  # empty payload
        lambda parts: MAGIC + struct.pack(">I", MAX_PAYLOAD + 1) + b"x" * 64,  # too long
        lambda parts: raw(*parts)[:-3],  # cut short
        lambda parts: raw(*parts)[:8],  # header only
        lambda parts: raw(*parts[:-1]),  # a string missing
        lambda parts: raw(*parts) + b"",  # (well formed: the control case, see below)
        lambda parts: raw(b"0" * 31, *parts[1:]),  # report tokens: too short, upper case, not hex
        lambda parts: raw(b"A" * 32, *parts[1:]),
        lambda parts: raw(b"g" * 32, *parts[1:]),
        lambda parts: raw(parts[0], b"4", *parts[2:]),  # status descriptors: another, junk, without a token
        lambda parts: raw(parts[0], b"33", *parts[2:]),
        lambda parts: raw(parts[0], b"3", *parts[2:]),
        lambda parts: raw(b"0" * 32, b"3", *parts[2:]),  # (a token, but not PID 1 here: refused)
        lambda parts: raw(*parts[:2], b"both", *parts[3:]),  # stdin mode
        lambda parts: raw(*parts[:3], b"relative", *parts[4:]),
        lambda parts: raw(*parts[:4], b"-2", *parts[5:]),  # counts: sign, junk, zero, too many
        lambda parts: raw(*parts[:4], b"+2", *parts[5:]),
        lambda parts: raw(*parts[:4], b"2x", *parts[5:]),
        lambda parts: raw(*parts[:4], b"0", *parts[5:]),
        lambda parts: raw(*parts[:4], str(MAX_ITEMS + 1).encode(), *parts[5:]),
        lambda parts: raw(*parts[:4], b"1", b"", *parts[6:]),  # an empty program name
        lambda parts: raw(*parts[:-1], b"NO_EQUALS"),
        lambda parts: raw(*parts[:-1], b"=value"),
        lambda parts: raw(*parts, b"trailing"),
    ],
)
def test_a_malformed_message_runs_nothing(init: Path, tmp_path: Path, mangle: object) -> None:
    canary = tmp_path / "ran"
    parts = canary_message(canary)
    data = mangle(parts)  # type: ignore[operator]
    done = run(init, data)
    if data == raw(*parts):  # the control: well formed, it runs
        assert done.returncode == 0 and canary.exists()
        return
    assert done.returncode == 125, done
    assert not canary.exists()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=300))
def test_any_payload_ends_in_an_exit_never_a_crash(init: Path, payload: bytes) -> None:
    done = run(init, MAGIC + struct.pack(">I", len(payload)) + payload)
    assert done.returncode >= 0  # no signal: it parsed or refused, whatever it was given


def test_what_the_init_cannot_carry_is_refused_before_it_is_sent() -> None:
    with pytest.raises(InputInvalid):
        launch_message(["x"] * (MAX_ITEMS + 1), {}, "/", with_stdin=False)
    with pytest.raises(InputInvalid):
        launch_message(["x", "a" * MAX_PAYLOAD], {}, "/", with_stdin=False)
    with pytest.raises(InputInvalid):
        launch_message(["x\0y"], {}, "/", with_stdin=False)
    with pytest.raises(InputInvalid):
        launch_message(["x"], {}, "relative", with_stdin=False)
    with pytest.raises(ValueError, match="report token"):
        launch_message(["x"], {}, "/", with_stdin=False, report="not-a-token")
    assert os.path.basename(str(SOURCE)) == "sandbox-init.c"


@pytest.fixture(scope="module")
def init_asan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The init built with AddressSanitizer and UBSan: a memory error fails the run loudly."""
    return compile_init_asan(tmp_path_factory.mktemp("asan"))


@pytest.mark.parametrize("path", ["", ":", "::/bin", "/bin::", "/usr/bin"])
@pytest.mark.parametrize("length", [1, 4093, 4094, 4095, 5000])
def test_long_names_and_empty_path_entries_are_memory_safe(init_asan: Path, path: str, length: int) -> None:
    done = run(init_asan, launch_message(["x" * length], {"PATH": path}, "/", with_stdin=False))
    assert b"Sanitizer" not in done.stderr and b"runtime error" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (126, 127), done


def test_an_empty_path_entry_never_means_the_working_directory(init: Path, tmp_path: Path) -> None:
    program = tmp_path / "planted"
    program.write_text("#!/bin/sh\necho ran\n")
    program.chmod(0o755)
    done = run(init, launch_message(["planted"], {"PATH": ":/nonexistent"}, str(tmp_path), with_stdin=False))
    assert done.returncode == 127 and done.stdout == b""


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.binary(max_size=300))
def test_any_payload_is_memory_safe(init_asan: Path, payload: bytes) -> None:
    done = run(init_asan, MAGIC + struct.pack(">I", len(payload)) + payload)
    assert b"Sanitizer" not in done.stderr and b"runtime error" not in done.stderr, done.stderr[-2000:]


def test_the_command_inherits_no_descriptor_but_its_stdio(init: Path) -> None:
    """Whatever the init was started with (a pod's status pipe is its descriptor 3), the command gets 0, 1, 2."""
    read_end, write_end = os.pipe()
    try:
        script = 'for fd in 3 4 5 6 7 8 9 10 11 12; do [ -e "/proc/self/fd/$fd" ] && echo "inherited $fd"; done; true'
        message = launch_message(["sh", "-c", script], {"PATH": "/bin"}, "/", with_stdin=False)
        done = subprocess.run(
            [str(init)], input=message, capture_output=True, timeout=10, pass_fds=(read_end, write_end), check=False
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    # the shell's own test of a descriptor opens none of its own: nothing listed
    assert (done.returncode, done.stdout) == (0, b""), done
