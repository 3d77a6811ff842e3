"""Every profile on a search path at once, for a listing: the good ones, and each broken file once.

A broken file takes down its own profile and every profile that extends it, directly or through others,
whatever they set themselves (their settings would be a guess, and a run never gets a guess), and nothing
else: a listing shows the rest, names the broken file, says why, and which profiles wait on it. Files that
look like profiles but are never read (``NAME.yml``, a file name that is no profile name) are reported too:
ignored in silence, an override would seem to do nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.domain.errors import ConfigInvalid, OrchestratorError
from orchestrator.profiles.models import NAME_RE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from orchestrator.profiles.loader import ProfileRegistry
    from orchestrator.profiles.models import Profile


@dataclass(frozen=True, slots=True)
class BrokenFile:
    """One file that cannot be used: why (the error its own profile raises), and what cannot load until fixed."""

    file: str
    error: OrchestratorError
    unavailable: tuple[str, ...]  # profiles (its own among them) that need it; empty for a file never read


@dataclass(frozen=True, slots=True)
class Survey:
    profiles: tuple[Profile, ...]
    broken: tuple[BrokenFile, ...]


def survey(registry: ProfileRegistry) -> Survey:
    """Load every profile ``registry`` knows; a failure is filed under the file that caused it."""
    good: list[Profile] = []
    failed: dict[str, list[tuple[str, OrchestratorError]]] = {}
    for name in registry.names():
        try:
            good.append(registry.get(name))
        except OrchestratorError as err:
            file = err.details.get("file")
            failed.setdefault(str(file) if file else str(registry.path_of(name)), []).append((name, err))
    broken: list[BrokenFile] = []
    for file, errors in failed.items():
        # the file's own profile tells why best (a dependant's cycle message starts elsewhere)
        own = [err for name, err in errors if str(registry.path_of(name)) == file]
        broken.append(BrokenFile(file, own[0] if own else errors[0][1], tuple(name for name, _ in errors)))
    broken.extend(BrokenFile(str(err.details["file"]), err, ()) for err in unread_files(registry.search_path))
    return Survey(tuple(good), tuple(sorted(broken, key=lambda b: b.file)))


def unread_files(search_path: Sequence[Path]) -> list[ConfigInvalid]:
    """Files on the search path a user meant as profiles but that are never read, each with its fix."""
    found: list[ConfigInvalid] = []
    for directory in search_path:
        try:
            entries = sorted(directory.iterdir())
        except OSError:  # unreadable: the lookups of its files fail on their own, naming it
            continue
        for path in entries:
            if path.name.startswith(".") or path.suffix not in (".yaml", ".yml") or not path.is_file():
                continue  # hidden files (editors' and tools') are nobody's profiles
            if path.suffix == ".yml":
                why = f"profiles are NAME.yaml files: rename it to {path.stem}.yaml"
            elif not NAME_RE.match(path.stem):
                why = (
                    f"{path.stem!r} is not a profile name (lowercase letters, digits, '.', '_', '-'; at most 64 "
                    "characters): rename the file"
                )
            else:
                continue
            found.append(ConfigInvalid(f"{path}: not read: {why}", details={"file": str(path)}))
    return found
