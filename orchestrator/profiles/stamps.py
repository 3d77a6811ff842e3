"""What the files of a profile search path look like now, cheaply: one stat per entry, nothing read.

A stamp is what a change of the profiles shows in: each directory of the search path and its ``seccomp/``,
each ``*.yaml`` in the one and ``*.json`` in the other, as (mtime_ns, size, inode) — ``None`` for one that is
gone. Entries are stat'ed through their links: a Kubernetes ConfigMap volume updates its files by writing a
new timestamped directory and swapping the ``..data`` link to it, so each ``NAME.yaml -> ..data/NAME.yaml``
(or a ``profiles -> ..data/profiles`` directory link) then leads to a new inode although the link itself did
not change. The same stat a policy reload takes (``gate/policy.PolicySource``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.profiles.paths import SECCOMP_SUBDIR

Stat = tuple[int, int, int]
"""(st_mtime_ns, st_size, st_ino) of an entry, through its links."""

# the files of each kind of directory a profile search path has: profiles, then seccomp profiles
_SUFFIXES: tuple[tuple[str, str], ...] = (("", ".yaml"), (SECCOMP_SUBDIR, ".json"))


def _stat(path: str) -> Stat | None:
    try:
        found = os.stat(path)  # through links: a ConfigMap's files are links into ..data
    except OSError:
        return None
    return (found.st_mtime_ns, found.st_size, found.st_ino)


def _listed(directory: str, suffix: str) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            return [entry.path for entry in entries if entry.name.endswith(suffix)]
    except OSError:  # gone, or not a directory: its own entry says so
        return []


@dataclass(frozen=True, slots=True)
class Stamp:
    """The directories and files of a search path, each as it is now (two stamps are equal when nothing
    that could change a profile changed between them)."""

    dirs: dict[str, Stat | None]
    files: dict[str, Stat | None]

    def changed_files(self, before: Stamp) -> list[str]:
        """The files that differ from ``before`` (changed, added or removed), sorted."""
        return sorted(p for p in self.files.keys() | before.files.keys() if self.files.get(p) != before.files.get(p))


def stamp(search_path: Sequence[Path]) -> Stamp:
    """The stamp of ``search_path`` now."""
    dirs: dict[str, Stat | None] = {}
    files: dict[str, Stat | None] = {}
    for directory in search_path:
        for subdir, suffix in _SUFFIXES:
            place = str(directory / subdir) if subdir else str(directory)
            dirs[place] = _stat(place)
            for path in _listed(place, suffix):
                files[path] = _stat(path)
    return Stamp(dirs, files)


def owner_uid(path: str) -> int | None:
    """The uid that owns ``path`` (through its links), or None when it is gone: who changed a profile file,
    as far as the file can tell (a ConfigMap's files are the kubelet's: root)."""
    try:
        return os.stat(path).st_uid
    except OSError:
        return None
