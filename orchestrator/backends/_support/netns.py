"""A listening socket inside another network namespace: the egress proxy's door into a sandbox's network.

A sandbox with an egress allowlist keeps ``--network none``: its namespace has a loopback interface and
nothing else, no route and no name server. The controller opens a TCP socket bound to the sandbox's own
127.0.0.1 inside that namespace and serves the egress proxy on it from here (a socket keeps the namespace
it was made in): the one thing the sandbox can reach is our proxy, and the proxy's own connections leave
from the controller's namespace. Nothing else of the host is reachable; no bridge, gateway or DNS exists.

``setns(2)`` moves only the calling thread, so the socket is made on a thread of its own that ends right
after (never a pool thread, which would go on serving other calls in the sandbox's namespace). The
namespace is named by a file descriptor ``setns`` takes: a pidfd of a container's init (Docker: no pid that
could be reused between a lookup and the call) or an open namespace file (``listen_in_netns_file``: the test
cluster's attachment to its pods' network). Needs CAP_SYS_ADMIN: the callers refuse egress otherwise.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket
import threading
from typing import Final

CLONE_NEWNET: Final = 0x40000000
LISTEN_BACKLOG: Final = 64


class NetnsError(OSError):
    """The socket could not be made in the sandbox's namespace."""


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise NetnsError(errno, f"setns: {os.strerror(errno)}")


def listen_in_netns_file(path: str, port: int, host: str) -> socket.socket:
    """A TCP socket listening on ``host:port`` inside the network namespace file ``path`` (/var/run/netns/X)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return listen_in_netns(fd, port, host)
    finally:
        os.close(fd)


def listen_in_netns(pidfd: int, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A TCP socket listening on ``host:port`` inside the network namespace of the process ``pidfd`` is (or of
    the namespace file ``pidfd`` is open on)."""
    result: list[socket.socket | BaseException] = []

    def make() -> None:
        try:
            _setns(pidfd)  # this thread only, and it ends below
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
            result.append(sock)
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=make, name="netns-listener", daemon=True)
    thread.start()
    thread.join()
    outcome = result[0] if result else NetnsError(0, "the namespace thread ended without a result")
    if isinstance(outcome, BaseException):
        if isinstance(outcome, OSError):
            raise NetnsError(outcome.errno or 0, f"no listener in the sandbox's network namespace: {outcome}")
        raise outcome
    return outcome
