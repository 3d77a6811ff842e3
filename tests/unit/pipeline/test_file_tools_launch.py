"""file_write and apply_patch run in a sandbox like any command: a fixed program whose only argument is the path
(never a script built from it), the content or patch on stdin (never in the argv or the environment)."""

from __future__ import annotations

from orchestrator.backends.base import CommandLaunch
from orchestrator.domain.requests import parse_request
from orchestrator.pipeline.launch import APPLY_PATCH, WRITE_FILE, _stdin, command_argv


def test_file_write_runs_the_fixed_writer_with_the_path_as_its_argument() -> None:
    request = parse_request({"tool": "file_write", "path": "dir/$(reboot).txt", "content": "sécret\n"})
    assert command_argv(request) == (*WRITE_FILE, "dir/$(reboot).txt")
    assert "$1" in WRITE_FILE[2] and "reboot" not in WRITE_FILE[2]
    assert _stdin(request) == "sécret\n".encode()
    launch = CommandLaunch(stdin=_stdin(request))
    assert launch.stdin is not None and b"s\xc3\xa9cret" in launch.stdin


def test_apply_patch_reads_the_patch_from_stdin() -> None:
    patch = "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
    request = parse_request({"tool": "apply_patch", "patch": patch})
    assert command_argv(request) == APPLY_PATCH
    assert _stdin(request) == patch.encode()


def test_commands_get_no_stdin() -> None:
    assert _stdin(parse_request({"tool": "shell_exec", "argv": ["true"]})) is None
