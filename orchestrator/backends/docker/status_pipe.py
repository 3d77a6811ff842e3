"""A pre-started sandbox's status channel on Docker: its command's end from its init, before the engine's.

The init (images/init/sandbox-init.c, "The status channel") reports the command's end, OOM kills and usage
as one line under the launch's token on its descriptor 3. On Kubernetes that descriptor is a pipe of the
pod's barrier; here it is a named pipe in a directory of its own on the host, bind-mounted read-only into
the container at MOUNT_DIR, which the init opens as it starts (its one argument names it). This process
holds the pipe's reading end from before the container starts (so the init's open never waits), and at the
launch, once it sees the init holding the pipe (the init's /proc/<pid>/fd/3 is this very pipe), removes the
pipe's name: no one can open it after that (the command runs later; the directory is not the sandbox's to
write; the init is not dumpable, so its /proc/1/fd is out of the command's reach). Only then does the
launch ask for the channel. Where this process cannot see the init's pid (a remote engine, gVisor's own
kernel), no pipe is made and the engine's account stays the end.

Why it pays: the engine reports a container's exit some 27 ms after its last process ended (its ``wait``
and ``die``); the init's line comes as the command's processes are gone. The engine's account still comes,
and the pipeline records it as the confirmation (``confirm_end``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from orchestrator.backends._support.init_status import MAX_LINE
from orchestrator.backends.base import LaunchSpec

log = logging.getLogger(__name__)

#: where the pipe's directory is mounted in the container (the init's argument names the pipe in it)
MOUNT_DIR = "/run/sandbox-status"
PIPE_NAME = "status"
#: the runtimes whose container processes are this host's (their pids seen here): gVisor's are not
HOST_PID_RUNTIMES = frozenset({"runc", "crun"})
CAP_SYS_PTRACE = 19


@functools.cache
def can_seal() -> bool:
    """Whether this process may look at an init's descriptors (the init is not dumpable: root's, or a holder of
    CAP_SYS_PTRACE's); without it a pipe could never be sealed, so none is made (the engine's account). Asked
    once: a process's credentials do not change under it."""
    if os.geteuid() == 0:
        return True
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            effective = next(line for line in status if line.startswith("CapEff:"))
    except (OSError, StopIteration):
        return False
    return bool(int(effective.split()[1], 16) >> CAP_SYS_PTRACE & 1)


def sweep(root: Path, live: Iterable[str], *, older_than_s: float) -> int:
    """Remove the pipes' directories under ``root`` of sandboxes that are gone (a controller that stopped
    before removing them), leaving those named in ``live`` and any younger than ``older_than_s`` (a sandbox
    being created); returns how many went."""
    keep = set(live)
    now = time.time()
    removed = 0
    try:
        entries = list(root.iterdir())
    except OSError:
        return 0
    for entry in entries:
        if entry.name in keep:
            continue
        try:
            old = entry.is_dir() and not entry.is_symlink() and now - entry.stat().st_mtime >= older_than_s
        except OSError:  # removed meanwhile (its sandbox's own destroy)
            continue
        if old:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return removed


class StatusPipe:
    """One sandbox's pipe: made before its container (``make``), sealed at its launch, read to its end."""

    def __init__(self, directory: Path, reader: int) -> None:
        self.directory = directory
        self._reader: int | None = reader
        self._lock = threading.Lock()  # read() takes the descriptor (and closes it), or close() does
        self.sealed = False

    @classmethod
    def for_sandbox(cls, spec: LaunchSpec, root: Path, name: str) -> StatusPipe | None:
        """``spec``'s pipe when it is a pre-started sandbox whose init this process will see (a runtime of
        HOST_PID_RUNTIMES) and whose descriptors it may look at (``can_seal``); None otherwise, or when the
        pipe cannot be made (logged): the engine's account of its end, as without one."""
        if not spec.pooled or spec.profile.runtime not in HOST_PID_RUNTIMES or not can_seal():
            return None
        try:
            return cls.make(root, name)
        except OSError as exc:
            log.warning("no status channel for %s: %s", name, exc)
            return None

    @classmethod
    def make(cls, root: Path, name: str) -> StatusPipe:
        """The directory ``root/name`` (0711: the sandbox's user may reach the pipe, never list or add to it)
        with the pipe (0622: the sandbox's user writes it), and its reading end open. Raises OSError."""
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory = root / name
        directory.mkdir(mode=0o711)
        try:
            directory.chmod(0o711)  # mkdir's mode passes the umask
            pipe = directory / PIPE_NAME
            os.mkfifo(pipe)
            pipe.chmod(0o622)
            reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return cls(directory, reader)

    @property
    def container_path(self) -> str:
        return f"{MOUNT_DIR}/{PIPE_NAME}"

    def mount(self) -> dict[str, object]:
        """The engine's bind mount of the pipe's directory (read-only: a pipe opens for writing all the same)."""
        return {
            "Type": "bind",
            "Source": str(self.directory),
            "Target": MOUNT_DIR,
            "ReadOnly": True,
            "BindOptions": {"Propagation": "rprivate", "NonRecursive": True},
        }

    def seal(self, init_pid: int) -> bool:
        """Remove the pipe's name once the init (``init_pid``, on this host) holds it as its descriptor 3;
        False (nothing removed: the launch must not ask for the channel) when it does not."""
        if self._reader is None:
            return False
        try:
            held = os.stat(f"/proc/{init_pid}/fd/3")
        except OSError:
            return False
        mine = os.fstat(self._reader)
        if not stat.S_ISFIFO(held.st_mode) or (held.st_dev, held.st_ino) != (mine.st_dev, mine.st_ino):
            return False
        try:
            os.unlink(self.directory / PIPE_NAME)
        except OSError:
            return False
        self.sealed = True
        return True

    def read(self) -> bytes:
        """Blocking: what the pipe carries until its writer (the init) closes it, at most MAX_LINE + 1 bytes
        (more is no report); b"" once closed. Only after ``seal`` (before the init opened it, the pipe would
        read as ended)."""
        with self._lock:
            reader, self._reader = self._reader, None
            if reader is None or not self.sealed:
                if reader is not None:
                    os.close(reader)
                return b""
        data = bytearray()
        try:
            os.set_blocking(reader, True)
            while len(data) <= MAX_LINE and (chunk := os.read(reader, MAX_LINE + 1 - len(data))):
                data += chunk
        except OSError:
            return b""
        finally:
            os.close(reader)  # its own: a descriptor closed under a blocked read could be reused meanwhile
        return bytes(data)

    def close(self) -> None:
        """The reading end (unless ``read`` has it: it ends with the init, which the sandbox's removal ends)
        and the directory; idempotent."""
        with self._lock:
            reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(OSError):
                os.close(reader)
        shutil.rmtree(self.directory, ignore_errors=True)
