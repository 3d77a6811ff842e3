"""Who is on the other end of the warm socket, beyond its uid.

A same-uid process may still be confined: a sandbox (other namespaces, no capabilities, seccomp,
no_new_privs), a process whose supplementary groups were dropped, or one under an LSM profile. A
worker runs with the server's credentials, so it may only serve a caller whose credentials and
confinement are the server's own; anyone else runs cold, as itself.
"""

from __future__ import annotations

import os
import socket
import struct

_PEERCRED = struct.Struct("iII")  # pid, uid, gid
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


def difference(pid: int, own: dict[str, str]) -> str | None:
    """The first way ``pid`` differs from ``own`` (the server's identity), or None."""
    try:
        theirs = identity(pid)
    except OSError as exc:
        return f"cannot read the caller's credentials: {exc.strerror or exc}"
    for key, value in own.items():
        if theirs.get(key) != value:
            return f"the caller's {key} differs from the server's"
    return None
