"""What a re-read of the profiles changes: which profiles, from which files — or why the new set is refused.

A new set is taken whole or not at all. It is refused when it breaks anything: a profile that does not load
(a YAML or schema error, an ``extends`` cycle or unknown parent) or whose seccomp profile does not — except
one that failed in just the same way in the set in force already (a broken file a process started with stays
broken as it was, and does not hold every other change back). Half a new set is never in force.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from orchestrator.domain.errors import ConfigInvalid
from orchestrator.profiles.snapshot import ProfileSnapshot
from orchestrator.profiles.stamps import owner_uid

MAX_LISTED = 20
"""Problems a refusal lists (its message names the first; the others are in its details)."""


class ChangeKind(StrEnum):
    ADDED = "added"
    CHANGED = "changed"
    REMOVED = "removed"


@dataclass(frozen=True, slots=True)
class ChangedFile:
    """A file whose change made a profile change: its path, and who owns it now (None: it is gone)."""

    path: str
    owner_uid: int | None


@dataclass(frozen=True, slots=True)
class ProfileChange:
    """One profile of the set, changed: its definition before and after (None: absent or broken there)."""

    name: str
    kind: ChangeKind
    old_definition: str | None
    new_definition: str | None
    files: tuple[ChangedFile, ...]


@dataclass(frozen=True, slots=True)
class ProfileReload:
    """One re-read of the profiles: the set in force before, the new one (None when it was refused), what
    changed in it, and the files that changed on disk."""

    old: ProfileSnapshot
    new: ProfileSnapshot | None
    changes: tuple[ProfileChange, ...]
    files: tuple[ChangedFile, ...]
    refused: ConfigInvalid | None = None


def change_kind(old: ProfileSnapshot, new: ProfileSnapshot, name: str) -> ChangeKind | None:
    """What ``new`` does to the profile ``name`` of ``old``: None when its definition is the same (or it fails
    the same way in both)."""
    in_old, in_new = name in old.names(), name in new.names()
    if not in_old:
        return ChangeKind.ADDED
    if not in_new:
        return ChangeKind.REMOVED
    return None if old.definition(name) == new.definition(name) else ChangeKind.CHANGED


def breakage(old: ProfileSnapshot, new: ProfileSnapshot) -> dict[str, ConfigInvalid]:
    """The new set's problems that the set in force does not have in just the same words."""
    before = {name: err.message for name, err in old.problems().items()}
    return {name: err for name, err in sorted(new.problems().items()) if before.get(name) != err.message}


def refusal(broken: dict[str, ConfigInvalid]) -> ConfigInvalid:
    """CONFIG.INVALID for a new set with ``broken`` profiles: the first problem in the message (its file and
    line in the details, as a single profile's refusal has them), every one in ``details["problems"]``."""
    first_name, first = next(iter(broken.items()))
    more = f" (and {len(broken) - 1} more problem(s))" if len(broken) > 1 else ""
    listed = list(broken.items())[:MAX_LISTED]
    return ConfigInvalid(
        f"the profiles were not reloaded, the set in force is kept: profile {first_name!r}: {first.message}{more}",
        details={
            **{k: v for k, v in first.details.items() if k in ("file", "line", "fields")},
            "profiles": [name for name, _ in listed],
            "problems": [f"{name}: {err.message}" for name, err in listed],
        },
    )


def owned(paths: list[str]) -> tuple[ChangedFile, ...]:
    """``paths`` (files that changed) with who owns each now."""
    return tuple(ChangedFile(path, owner_uid(path)) for path in paths)


def compare(old: ProfileSnapshot, new: ProfileSnapshot, changed_files: list[str]) -> ProfileReload:
    """What taking ``new`` in place of ``old`` changes (``changed_files``: the files that differ on disk), or
    why it is refused."""
    files = owned(changed_files)
    broken = breakage(old, new)
    if broken:
        return ProfileReload(old, None, (), files, refused=refusal(broken))
    changes = []
    by_path = {f.path: f for f in files}
    for name in sorted({*old.names(), *new.names()}):
        kind = change_kind(old, new, name)
        if kind is None:
            continue
        read_from = {str(p) for p in (*old.sources(name), *new.sources(name))}
        changes.append(
            ProfileChange(
                name,
                kind,
                old.definition(name),
                new.definition(name),
                tuple(by_path[p] for p in sorted(read_from & by_path.keys())),
            )
        )
    return ProfileReload(old, new, tuple(changes), files)
