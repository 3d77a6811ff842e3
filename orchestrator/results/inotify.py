"""Linux inotify through ctypes (the standard library has no binding; no dependency needed for three calls).

Watches are added through ``/proc/self/fd/N`` of a directory the caller opened descriptor-relative with
``O_NOFOLLOW``: the kernel resolves that magic link to exactly the opened directory, so adding a watch
never resolves a path the sandbox could have swapped a symlink into.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import struct
from collections.abc import Iterator
from typing import Final, NamedTuple

IN_MODIFY: Final = 0x00000002
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_EXCL_UNLINK: Final = 0x04000000
IN_ISDIR: Final = 0x40000000

_HEADER: Final = struct.Struct("iIII")  # wd, mask, cookie, len
READ_SIZE: Final = 256 * 1024


class Event(NamedTuple):
    wd: int
    mask: int
    cookie: int
    name: str  # as os.fsdecode gives it; "" for an event on the watched directory itself


class InotifyUnavailable(Exception):
    """inotify cannot be used here (no libc symbol, no /proc, instance or watch limits): poll instead."""


class _Libc:
    def __init__(self) -> None:
        path = ctypes.util.find_library("c")
        try:
            libc = ctypes.CDLL(path, use_errno=True)
            self.init1 = libc.inotify_init1
            self.add_watch = libc.inotify_add_watch
        except (OSError, AttributeError) as e:
            raise InotifyUnavailable(f"no inotify in the C library: {e}") from e
        self.init1.argtypes = [ctypes.c_int]
        self.init1.restype = ctypes.c_int
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.add_watch.restype = ctypes.c_int


@functools.cache
def _get_libc() -> _Libc:
    return _Libc()


class Inotify:
    """One inotify instance (non-blocking, close-on-exec). Not thread-safe: one thread uses it."""

    def __init__(self) -> None:
        self._libc = _get_libc()
        fd = self._libc.init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            raise InotifyUnavailable(f"inotify_init1: {os.strerror(err)}")
        self.fd: int = fd

    def watch_dir_fd(self, dir_fd: int, mask: int) -> int:
        """Watch the directory open as ``dir_fd``; returns the watch descriptor (the same one for a
        directory already watched). Raises :class:`InotifyUnavailable` for limits, ``OSError`` otherwise."""
        wd = self._libc.add_watch(self.fd, f"/proc/self/fd/{dir_fd}".encode(), mask | IN_ONLYDIR)
        if wd >= 0:
            return int(wd)
        err = ctypes.get_errno()
        if err in (errno.ENOSPC, errno.ENOMEM):
            raise InotifyUnavailable(f"inotify watch limit reached ({os.strerror(err)})")
        if err == errno.ENOENT and not os.path.isdir("/proc/self/fd"):
            raise InotifyUnavailable("/proc is not mounted: watches cannot be added by descriptor")
        raise OSError(err, os.strerror(err))

    def read(self) -> list[Event]:
        """The events of one read (at most READ_SIZE bytes of them; none when the queue is empty)."""
        try:
            data = os.read(self.fd, READ_SIZE)
        except BlockingIOError:
            return []
        return list(_parse(data))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _parse(data: bytes) -> Iterator[Event]:
    offset = 0
    end = len(data)
    while offset + _HEADER.size <= end:
        wd, mask, cookie, length = _HEADER.unpack_from(data, offset)
        offset += _HEADER.size
        name = data[offset : offset + length].split(b"\0", 1)[0]
        offset += length
        yield Event(wd, mask, cookie, os.fsdecode(name))
