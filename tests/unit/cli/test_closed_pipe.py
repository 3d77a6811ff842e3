"""Output piped into a reader that stops early (`sandboxctl … | head -1`): the CLI ends quietly, as other tools
do (128 + SIGPIPE), never INTERNAL; a pipe that breaks elsewhere is not hidden."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from orchestrator.cli.main import _reader_gone


def test_a_reader_that_went_away_ends_the_cli_quietly(tmp_path: Path) -> None:
    env = {**os.environ, "SANDBOX_STATE_DIR": str(tmp_path)}
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write breaks the pipe
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli.main", "profiles", "list"],
            stdout=write,
            stderr=subprocess.PIPE,
            env=env,
            timeout=120,
        )
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (128 + signal.SIGPIPE, b"")


def test_only_a_pipe_without_its_reader_counts_as_gone() -> None:
    read, write = os.pipe()
    try:
        with os.fdopen(write, "wb", closefd=False) as stream:
            assert not _reader_gone(stream)
            os.close(read)
            read = -1
            assert _reader_gone(stream)
    finally:
        os.close(write)
        if read >= 0:
            os.close(read)
