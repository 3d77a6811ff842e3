"""Who is on the other end of the warm socket, beyond its uid.

A same-uid process may still be confined: a sandbox (other namespaces, no capabilities, seccomp,
no_new_privs), a process whose supplementary groups were dropped, or one under an LSM profile. A
worker runs with the server's credentials, so it may only serve a caller whose credentials and
confinement are the server's own; anyone else runs cold, as itself.
"""

from __future__ import annotations

import os
import signal
import socket
import struct

_PEERCRED = struct.Struct("iII")  # pid, uid, gid
SO_PEERPIDFD = getattr(socket, "SO_PEERPIDFD", 77)  # Linux 6.5; Python 3.11 lacks the name
_STATUS_FIELDS = (
    "Uid",
    "Gid",
    "Groups",
    "CapInh",
    "CapPrm",
    "CapEff",
    "CapBnd",
    "CapAmb",
    "NoNewPrivs",
    "Seccomp",
)
_NAMESPACES = ("mnt", "pid", "user", "net", "ipc", "uts", "cgroup")


def peer_credentials(conn: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected (or listened), as the kernel recorded them."""
    pid, uid, gid = _PEERCRED.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    return int(pid), int(uid), int(gid)


def identity(pid: int) -> dict[str, str]:
    """What ``pid`` runs as and within. Raises OSError when it cannot be read (gone, or not ours)."""
    found: dict[str, str] = {}
    with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in _STATUS_FIELDS:
                found[key] = " ".join(value.split())
    for name in _NAMESPACES:
        found[f"ns/{name}"] = os.readlink(f"/proc/{pid}/ns/{name}")
    found["root"] = os.readlink(f"/proc/{pid}/root")
    try:
        with open(f"/proc/{pid}/attr/current", encoding="utf-8", errors="replace") as label:
            found["lsm"] = label.read().strip("\0\n ")
    except OSError:  # no LSM that labels processes
        found["lsm"] = ""
    return found


def _pidfd(conn: socket.socket, pid: int) -> int:
    """A descriptor of the very process at the other end: the kernel's own (SO_PEERPIDFD) where it
    has one, else one opened now (which a peer that already exited cannot pass, see peer_difference)."""
    try:
        return int(conn.getsockopt(socket.SOL_SOCKET, SO_PEERPIDFD))
    except OSError:
        return os.pidfd_open(pid)


def peer_difference(conn: socket.socket, own: dict[str, str], *, role: str) -> str | None:
    """The first way the process at the other end of ``conn`` differs from ``own`` (this process's
    identity), or None. ``role`` names it in the reason ("caller", "server").

    /proc is read by pid, and a pid can be reused once its process is gone: the peer's pidfd, taken
    before and checked alive after the read, proves the read was of the peer itself."""
    pid, _uid, _gid = peer_credentials(conn)
    if pid <= 0:  # in a pid namespace this one cannot see into
        return f"the {role} is in another pid namespace"
    try:
        pidfd = _pidfd(conn, pid)
    except OSError as exc:
        return f"cannot follow the {role}'s process: {exc.strerror or exc}"
    try:
        try:
            theirs = identity(pid)
            signal.pidfd_send_signal(pidfd, 0)  # still the same, living process
        except OSError as exc:
            return f"cannot read the {role}'s credentials: {exc.strerror or exc}"
    finally:
        os.close(pidfd)
    for key, value in own.items():
        if theirs.get(key) != value:
            return f"the {role}'s {key} differs"
    return None
