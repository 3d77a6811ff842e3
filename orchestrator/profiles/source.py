"""The profiles in force, re-read when their files change: the profiles' counterpart of the policy's reload
(``gate/policy.PolicySource``).

Each look at the profiles (every request asks for them) stats the search path's directories and files
(``stamps.py``), at most every ``check_every_s``; when the stamp differs, the whole set is read anew into a
``ProfileSnapshot`` and compared with the set in force (``changes.py``). A new set that validates replaces the
old one at once, whole; one that does not is refused and the old set kept (logged, with the problem), until
the files change again. A set read while it was being changed (its stamp differs after the read: a ConfigMap's
``..data`` swapped halfway) is not taken either way: it is read again at the next look.

Listeners hear of each re-read that changed something or was refused, before the new set is in force: the
pipeline puts it on the evidence and drains the pool of the changed profiles (``pipeline/profile_changes.py``),
so no run resolves a new profile before its change is on the record.

What a run resolved stays its own: a run holds its ``ResolvedProfile`` from its start to its end, whatever
replaces the set meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

from orchestrator.domain.errors import ConfigInvalid
from orchestrator.profiles.changes import ProfileReload, compare, owned
from orchestrator.profiles.loader import ProfileRegistry
from orchestrator.profiles.paths import default_search_path
from orchestrator.profiles.snapshot import ProfileSnapshot
from orchestrator.profiles.stamps import Stamp, stamp

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0
"""How often the files are looked at, at most (a look is one stat per entry): a change is in force for the
runs that begin a second after it is on disk."""
STEADY_READS = 3
"""Reads at start-up until one is not changed under it (then the next look reads it again)."""

Listener = Callable[[ProfileReload], None]


class ProfilesInForce(Protocol):
    """Where the profiles in force come from: a set that follows its files, or one that never changes."""

    @property
    def search_path(self) -> tuple[Path, ...]: ...

    def current(self) -> ProfileRegistry:
        """The set in force now."""
        ...

    def subscribe(self, listener: Listener) -> None:
        """Hear of each change of the set (or refused one)."""
        ...


class FixedProfiles:
    """A registry as it is, never re-read: the profiles of a command that runs once (nothing to keep up to
    date; the registry reads each file when first asked, as it always has)."""

    def __init__(self, registry: ProfileRegistry) -> None:
        self._registry = registry

    @property
    def search_path(self) -> tuple[Path, ...]:
        return self._registry.search_path

    def current(self) -> ProfileRegistry:
        return self._registry

    def subscribe(self, listener: Listener) -> None:
        """Nothing to hear of: this set never changes."""


class ProfileSource:
    """The profiles in force: a snapshot of ``search_path`` (default: the built-ins and
    ``$SANDBOX_PROFILES_PATH``), re-read when its files change."""

    def __init__(
        self,
        search_path: Sequence[Path] | None = None,
        *,
        check_every_s: float = CHECK_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._search_path = tuple(search_path) if search_path is not None else default_search_path()
        self.last_error: ConfigInvalid | None = None
        self._every = check_every_s
        self._clock = clock
        self._next_look = clock() + check_every_s
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._stamp, snapshot = self._steady_read()
        self._registry = snapshot
        for name, err in sorted(snapshot.problems().items()):  # as a registry would: refused when used
            log.warning("profile %s cannot be used until its files are fixed: %s", name, err.message)

    @property
    def search_path(self) -> tuple[Path, ...]:
        """The directories read, in order (a later one wins)."""
        return self._search_path

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener`` with each re-read that changed a profile or was refused (in the looking thread,
        before a new set is in force; what it raises is logged, never in the way of the reload)."""
        self._listeners.append(listener)

    def current(self) -> ProfileSnapshot:
        """The set in force, re-read first when its files changed (looked at no more than every check_every_s)."""
        if self._clock() < self._next_look:
            return self._registry
        with self._lock:
            now = self._clock()
            if now >= self._next_look:  # not looked at by another thread meanwhile
                self._next_look = now + self._every
                seen = stamp(self.search_path)
                if seen != self._stamp:
                    self._reload(seen)
        return self._registry

    def _steady_read(self) -> tuple[Stamp | None, ProfileSnapshot]:
        """A snapshot and the stamp it was read under; no stamp (read again at the first look) when the files
        kept changing under every read."""
        for _ in range(STEADY_READS):
            before = stamp(self.search_path)
            snapshot = ProfileSnapshot(self.search_path)
            if stamp(self.search_path) == before:
                return before, snapshot
        return None, snapshot

    def _reload(self, seen: Stamp) -> None:
        old = self._registry
        before = self._stamp
        try:
            new: ProfileSnapshot | ConfigInvalid = ProfileSnapshot(self.search_path)
        except ConfigInvalid as err:  # a directory of the search path is gone: every profile of it would be
            new = _kept(err)
        if stamp(self.search_path) != seen:  # changed while it was read: read again at the next look
            return
        self._stamp = seen
        files = seen.changed_files(before) if before is not None else sorted(seen.files)
        reload = (
            ProfileReload(old, None, (), owned(files), refused=new)
            if isinstance(new, ConfigInvalid)
            else compare(old, new, files)
        )
        if reload.refused is not None:
            self.last_error = reload.refused
            log.error("%s", reload.refused.message)
            self._tell(reload)
            return
        assert reload.new is not None
        self.last_error = None
        if reload.changes:
            self._tell(reload)
            log.info("profiles reloaded: %s", ", ".join(f"{c.name} ({c.kind})" for c in reload.changes))
        else:
            log.info("profiles re-read: no profile changed (%d file(s) touched)", len(files))
        self._registry = reload.new  # after the listeners: nothing resolves a change before it is recorded

    def _tell(self, reload: ProfileReload) -> None:
        for listener in self._listeners:
            try:
                listener(reload)
            except Exception:  # a listener's bug: logged, and the set still follows its files
                log.exception("a listener of the profiles' reload failed")


def _kept(err: ConfigInvalid) -> ConfigInvalid:
    """A search path that cannot be read as a whole: refused as a broken profile is."""
    return ConfigInvalid(
        f"the profiles were not reloaded, the set in force is kept: {err.message}", details=dict(err.details)
    )
