"""A set of profiles read once, whole: what a process that re-reads its profiles on change holds in force.

A ``ProfileRegistry`` reads a file when it is first asked for it and keeps it: one made an hour ago, asked
for a profile it has not read yet, reads today's file. A snapshot reads every profile of its search path,
and the seccomp profile each one uses, when it is made; afterwards nothing it answers depends on the files.
So the set in force is one set (a run resolves what was in force, never half of an edit), and the set a
change replaces can still be compared with the new one (``profiles/source.py``).

A profile that fails to load keeps its refusal, as a registry would give it: ``get`` raises it again (the
same code, message and details), and ``problems`` lists it with every other one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.domain.errors import ConfigInvalid
from orchestrator.profiles.loader import ProfileRegistry, unknown_profile
from orchestrator.profiles.models import Profile, definition_sha256
from orchestrator.profiles.seccomp import SeccompProfile


def _again(err: ConfigInvalid) -> ConfigInvalid:
    """A refusal raised anew: the same words, never the same exception object (it would pile up tracebacks)."""
    return ConfigInvalid(err.message, details=dict(err.details))


class ProfileSnapshot(ProfileRegistry):
    """Every profile of ``search_path`` (in order, a later directory wins), read now and never again.
    ``pinned``: profile files that win their names whatever the search path holds (a proposed file: the set in
    force with it in place; what extends its name extends it)."""

    def __init__(self, search_path: Sequence[Path], *, pinned: Sequence[Path] = ()) -> None:
        super().__init__(search_path, builtin=False)
        self._pinned.update({path.stem: path for path in pinned})
        self._paths: dict[str, Path] = {}
        for name in super().names():  # found once: the files of later answers
            self._paths[name] = super().path_of(name)
        self._failed: dict[str, ConfigInvalid] = {}  # its files do not load
        self._unrunnable: dict[str, ConfigInvalid] = {}  # it loads, its seccomp profile does not: no run could
        self._seccomp: dict[str, SeccompProfile | ConfigInvalid] = {}
        self._definitions: dict[str, str] = {}
        for name in self._paths:
            try:
                profile = super().get(name)
            except ConfigInvalid as err:
                self._failed[name] = err
                continue
            seccomp = self._read_seccomp(profile.seccomp)
            if isinstance(seccomp, ConfigInvalid):
                self._unrunnable[name] = seccomp
            else:
                self._definitions[name] = definition_sha256(profile, seccomp.sha256)

    def _read_seccomp(self, name: str) -> SeccompProfile | ConfigInvalid:
        if name not in self._seccomp:
            try:
                self._seccomp[name] = super().load_seccomp(name)
            except ConfigInvalid as err:
                self._seccomp[name] = err
        return self._seccomp[name]

    # -- what a registry answers, from what was read ------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self._paths)

    def path_of(self, name: str) -> Path:
        path = self._paths.get(name) if isinstance(name, str) else None
        if path is None:
            raise unknown_profile(name, self.names())
        return path

    def get(self, name: str) -> Profile:
        failed = self._failed.get(name) if isinstance(name, str) else None
        if failed is not None:
            raise _again(failed)
        return super().get(name)  # read when the snapshot was made, or PROFILE.NOT_FOUND

    def load_seccomp(self, name: str) -> SeccompProfile:
        found = self._seccomp.get(name)
        if isinstance(found, ConfigInvalid):
            raise _again(found)
        if found is not None:
            return found
        # a name no profile of the set uses (a Profile object handed to resolve as it is): read now
        return super().load_seccomp(name)

    @property
    def pinned(self) -> tuple[Path, ...]:
        """The files pinned in place of their names (none but for a proposal)."""
        return tuple(self._pinned.values())

    # -- what a change is made of ---------------------------------------------------------------------------
    def problems(self) -> dict[str, ConfigInvalid]:
        """Each profile of the set that no run could get, and why: its files do not load, or its seccomp
        profile does not."""
        return {**self._unrunnable, **self._failed}

    def definition(self, name: str) -> str | None:
        """``name``'s definition_sha256 in this set; None when it has none here (absent, or broken)."""
        return self._definitions.get(name)

    def sources(self, name: str) -> tuple[Path, ...]:
        """The files ``name``'s definition was read from: its ``extends`` chain (the bottom first) and its
        seccomp profile; only its own file when it failed to load; () when the set has no such profile."""
        path = self._paths.get(name)
        if path is None:
            return ()
        defined = self._defined_by.get(path)
        if defined is None:
            return (path,)
        seccomp = self._seccomp.get(defined.profile.seccomp)
        extra = (Path(seccomp.source),) if isinstance(seccomp, SeccompProfile) else ()
        return (*defined.files, *extra)
