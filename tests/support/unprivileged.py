"""Run a piece of a test where permission bits apply: in a forked child as nobody when tests run as root."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

NOBODY = 65534


def as_nobody(work: Callable[[Path], str], prefix: str = "unprivileged-", *, tmpfs_size: str | None = None) -> str:
    """``work(root)`` in a forked child as nobody (as the caller when not root), ``root`` a fresh
    directory it may write; returns what ``work`` returned, or fails the test with the child's error.
    ``tmpfs_size`` (root only): ``root`` on a filesystem of its own that size, for work that judges a whole
    filesystem's usage (the shared /tmp grows with every other test's writes meanwhile)."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    mounted = tmpfs_size is not None and os.geteuid() == 0
    if mounted:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={tmpfs_size},mode=0777", "tmpfs", str(base)], check=True)
    os.chmod(base, 0o777)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 1
        try:
            os.close(read_fd)
            if os.geteuid() == 0:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            root = base / "ws"
            root.mkdir()
            os.write(write_fd, work(root).encode())
            code = 0
        except BaseException as e:
            with contextlib.suppress(Exception):
                os.write(write_fd, f"ERROR {e!r}".encode())
        finally:
            os._exit(code)
    os.close(write_fd)
    chunks = []
    while chunk := os.read(read_fd, 65536):
        chunks.append(chunk)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if mounted:
        subprocess.run(["umount", str(base)], check=True)
        base.rmdir()
    else:
        for dirpath, dirnames, _ in os.walk(base):
            for name in dirnames:
                os.chmod(os.path.join(dirpath, name), 0o700)
        shutil.rmtree(base)
    output = b"".join(chunks).decode()
    assert os.waitstatus_to_exitcode(status) == 0, output
    return output
