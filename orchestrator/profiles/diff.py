"""Two sets of profiles compared as runs would get them (``sandboxctl profiles diff``): which profiles a proposal
adds, removes or changes, the fields of each changed one's resolved profile old -> new, and whether a running
service re-reading its profiles would take the proposed set at all (``changes.breakage``: the same rule).

A profile differs when its definition does (``definition_sha256``), as a service's ``profile_changed`` record
says; the fields are those of its resolved profile under the caps given (none: what the files say), without the
hashes and the seccomp JSON (its sha256 is a field).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from orchestrator.domain.errors import ConfigInvalid, OrchestratorError
from orchestrator.domain.profile_diff import FieldChange, ProfileDifference, ProfilesDiff
from orchestrator.profiles.changes import ChangeKind, breakage, change_kind
from orchestrator.profiles.models import NAME_RE, ProfileCaps
from orchestrator.profiles.paths import check_dir
from orchestrator.profiles.snapshot import ProfileSnapshot

# what a resolved profile says that is not a setting of its own: its hashes (shown apart) and the seccomp JSON
# (its seccomp_sha256 stands for it)
_NOT_FIELDS = frozenset({"profile_hash", "definition_sha256", "seccomp_json"})


def proposed(in_force: Sequence[Path], builtin: Path, against: str) -> ProfileSnapshot:
    """The proposed set ``against`` names: a ``NAME.yaml`` file (the set in force with it in place of NAME, or
    added), or directories separated by ':' (the built-ins and those, in place of ``$SANDBOX_PROFILES_PATH``:
    what a service started with ``SANDBOX_PROFILES_PATH=against`` would have)."""
    file = Path(against)
    if file.is_file():
        if file.suffix != ".yaml" or not NAME_RE.match(file.stem):
            raise ConfigInvalid(
                f"--against: {file}: a proposed profile is a NAME.yaml file (NAME: lowercase letters, digits, '.',"
                " '_', '-'; at most 64 characters), or a directory of them",
                details={"file": str(file)},
            )
        return ProfileSnapshot(in_force, pinned=[file])
    dirs = [check_dir(part, "--against") for part in against.split(":") if part.strip()]
    return ProfileSnapshot([builtin, *dirs])


def _flat(value: Any, prefix: str = "") -> dict[str, JsonValue]:
    """A resolved profile's fields by dotted path: mappings opened, lists kept whole."""
    if isinstance(value, dict) and (value or not prefix):
        out: dict[str, JsonValue] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


@dataclass(frozen=True, slots=True)
class _View:
    """One side of a profile: its fields and profile_hash as a run gets it, or why it does not resolve (all
    None: the side has no such profile)."""

    fields: dict[str, JsonValue] | None = None
    profile_hash: str | None = None
    error: str | None = None


def _view(snapshot: ProfileSnapshot, name: str, caps: ProfileCaps | None) -> _View:
    if name not in snapshot.names():
        return _View()
    try:
        resolved = snapshot.resolve(name, caps=caps)
    except OrchestratorError as err:
        return _View(error=f"{err.code}: {err.message}")
    return _View(_flat(resolved.model_dump(mode="json", exclude=set(_NOT_FIELDS))), resolved.profile_hash)


def _field_changes(old: dict[str, JsonValue] | None, new: dict[str, JsonValue] | None) -> tuple[FieldChange, ...]:
    if old is None or new is None:
        return ()
    return tuple(
        FieldChange(field=key, old=old.get(key), new=new.get(key))
        for key in sorted(old.keys() | new.keys())
        if old.get(key) != new.get(key)
    )


def _difference(
    name: str, kind: ChangeKind, old: ProfileSnapshot, new: ProfileSnapshot, caps: ProfileCaps | None
) -> ProfileDifference:
    before, after = _view(old, name, caps), _view(new, name, caps)
    return ProfileDifference(
        name=name,
        change=kind.value,
        old_profile_hash=before.profile_hash,
        new_profile_hash=after.profile_hash,
        old_error=before.error,
        new_error=after.error,
        fields=_field_changes(before.fields, after.fields),
    )


def compare_sets(
    old: ProfileSnapshot, new: ProfileSnapshot, *, caps: ProfileCaps | None = None, only: str | None = None
) -> ProfilesDiff:
    """``old`` (in force) against ``new`` (proposed), resolved under ``caps``; ``only``: that profile alone
    (PROFILE.NOT_FOUND when neither set has it)."""
    names = sorted({*old.names(), *new.names()})
    if only is not None:
        if only not in names:
            new.path_of(only)  # PROFILE.NOT_FOUND, listing the proposed names
        names = [only]
    differences: list[ProfileDifference] = []
    unchanged: list[str] = []
    for name in names:
        kind = change_kind(old, new, name)
        if kind is None:
            unchanged.append(name)
        else:
            differences.append(_difference(name, kind, old, new, caps))
    refused = breakage(old, new)
    return ProfilesDiff(
        old_search_path=tuple(str(p) for p in old.search_path),
        new_search_path=tuple(str(p) for p in (*new.search_path, *new.pinned)),
        differences=tuple(differences),
        unchanged=tuple(unchanged),
        refused=tuple(f"{name}: {err.message}" for name, err in refused.items() if only in (None, name)),
    )
