"""The sandbox's own ``/etc/hostname``, ``/etc/hosts`` and ``/etc/resolv.conf``.

The engine bind-mounts files of its own at these three paths into every container, even with
``--network none``: a ``resolv.conf`` with the host's nameservers, and a hosts file it may fill with
the host's entries (``--add-host``, the host's own name under some network modes). A sandbox has no
network: it gets ours instead, read-only, the same on runc and runsc — the fixed host name, a hosts
file with loopback entries only, and a resolver configuration without a nameserver. (A user mount at
one of these paths replaces the engine's file: moby's ``TrySetNetworkMount``.)

The files live in the orchestrator's state directory, which no workspace may contain (see
``pipeline.governing.check_workspace``), in a directory named after their content: written once
(atomically, by whichever process comes first), checked before a backend first uses them.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.domain.statedir import state_dir

HOSTNAME = "sandbox"
#: target in the sandbox → exact content
FILES: dict[str, str] = {
    "/etc/hostname": f"{HOSTNAME}\n",
    "/etc/hosts": f"127.0.0.1\tlocalhost {HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback {HOSTNAME}\n",
    "/etc/resolv.conf": "# no nameserver: a sandbox has no network\n",
}
FILE_MODE = 0o444
SUBDIR = "sandbox-etc"


def _digest() -> str:
    h = hashlib.sha256()
    for target, content in sorted(FILES.items()):
        h.update(f"{target}\0{content}\0".encode())
    return h.hexdigest()[:16]


def etc_mounts(directory: str) -> list[dict[str, object]]:
    """Engine API mounts of ``directory``'s files over the engine's own (read-only, private)."""
    return [
        {
            "Type": "bind",
            "Source": os.path.join(directory, os.path.basename(target)),
            "Target": target,
            "ReadOnly": True,
            "BindOptions": {"Propagation": "rprivate"},
        }
        for target in sorted(FILES)
    ]


def _problem(directory: str) -> str | None:
    """Why ``directory`` does not hold exactly our files (never following a link), or None."""
    try:
        if not stat.S_ISDIR(os.lstat(directory).st_mode):
            return "not a directory"
        for target, content in FILES.items():
            fd = os.open(os.path.join(directory, os.path.basename(target)), os.O_RDONLY | os.O_NOFOLLOW)
            try:
                st = os.fstat(fd)
                data = os.read(fd, len(content) + 1)
            finally:
                os.close(fd)
            if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != FILE_MODE or data != content.encode():
                return f"{os.path.basename(target)} was altered"
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _write(parent: str) -> str:
    staging = tempfile.mkdtemp(prefix=".new-", dir=parent)
    for target, content in FILES.items():
        path = os.path.join(staging, os.path.basename(target))
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        try:
            os.write(fd, content.encode())
            os.fchmod(fd, FILE_MODE)  # whatever the umask
        finally:
            os.close(fd)
    return staging


def etc_directory(state: str | os.PathLike[str] | None = None) -> str:
    """The directory holding our three files (created when missing). SANDBOX.UNAVAILABLE when it
    cannot be made or was altered — a sandbox never falls back to the engine's files."""
    base = Path(state_dir() if state is None else state)
    parent = base / SUBDIR
    final = str(parent / _digest())
    try:
        if not os.path.lexists(final):
            base.mkdir(mode=0o700, parents=True, exist_ok=True)
            parent.mkdir(mode=0o700, exist_ok=True)
            staging = _write(str(parent))
            try:
                os.rename(staging, final)
            except OSError:  # another process put it there first: use theirs (checked below)
                shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise SandboxUnavailable(
            f"cannot write the sandbox's /etc files in {parent}: {exc.strerror or exc}", details={"path": str(parent)}
        ) from exc
    problem = _problem(final)
    if problem is not None:
        raise SandboxUnavailable(
            f"{final}: {problem}; remove that directory (it is written anew)", details={"path": final}
        )
    return final
