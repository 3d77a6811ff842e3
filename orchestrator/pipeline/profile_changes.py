"""What the pipeline does when the profiles in force change (profiles/source.py): it puts the change on the
record, and drains the pool of the profiles it changed.

Each re-read that changed something gets one id (``profiles-<execution id>``) and one ``profile_changed``
record per profile it added, changed or removed: the profile's name, its profile_hash before and after (as a
run that asks for nothing narrower gets it under this config's caps: what ``sandboxctl profiles show --resolved
--config`` shows; None on a side where it is absent or does not resolve), its definition_sha256 before and
after, and the files whose change made it change with their owner uid (None: the file is gone). A refused
re-read gets one ``profile_change_refused`` record: the problems, and the files that changed. Auditors see the
attempt too: a change someone made that never governed a run.

The records are queued before the new set is in force: the begin record of the first run of a changed profile
(durable) is written after them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from orchestrator.domain.errors import OrchestratorError
from orchestrator.domain.ids import new_execution_id
from orchestrator.evidence import EventType
from orchestrator.pipeline.pool import SandboxPool
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.pipeline.recorder import Evidence
from orchestrator.profiles import ProfileCaps, ProfileRegistry
from orchestrator.profiles.changes import ChangedFile, ProfileChange, ProfileReload

log = logging.getLogger(__name__)

SUBJECT = "profiles"
"""The subject of the records of a re-read: no one asked for it (who changed a file is in its records' data)."""


def _files(files: tuple[ChangedFile, ...]) -> list[dict[str, Any]]:
    return [{"path": f.path, "owner_uid": f.owner_uid} for f in files]


@dataclass(frozen=True, slots=True)
class ProfileChanges:
    """The listener of a ``ProfileSource``: ``evidence`` gets the records, ``pool`` (if any) is drained."""

    evidence: Evidence
    caps: ProfileCaps | None
    pool: SandboxPool | None

    def __call__(self, reload: ProfileReload) -> None:
        records = self.evidence.of(f"profiles-{new_execution_id()}", subject=SUBJECT)
        if reload.refused is not None:
            err = reload.refused
            records.record_nowait(
                EventType.PROFILE_CHANGE_REFUSED,
                status="refused",
                error_code=err.code,
                reason=err.message,
                data={
                    "problems": list(err.details.get("problems", [err.message])),
                    "profiles": list(err.details.get("profiles", [])),
                    "files": _files(reload.files),
                },
            )
            return
        assert reload.new is not None
        for change in reload.changes:
            old_hash = self._hash(reload.old, change.name)
            new_hash = self._hash(reload.new, change.name)
            records.record_nowait(
                EventType.PROFILE_CHANGED,
                status=change.kind.value,
                profile_hash=new_hash,
                reason=_said(change),
                data={
                    "profile": change.name,
                    "change": change.kind.value,
                    "old_profile_hash": old_hash,
                    "new_profile_hash": new_hash,
                    "old_definition_sha256": change.old_definition,
                    "new_definition_sha256": change.new_definition,
                    "files": _files(change.files),
                },
            )
        if self.pool is not None and reload.changes:
            drained = self.pool.drain_profiles({c.name: c.new_definition for c in reload.changes})
            log.info("profiles changed: %d pre-started sandbox(es) of them destroyed", drained)

    def _hash(self, registry: ProfileRegistry, name: str) -> str | None:
        """``name``'s profile_hash in ``registry`` as a run that asks for nothing narrower gets it here."""
        if name not in registry.names():
            return None
        try:
            return Profiles.under(self.caps, registry).named(name).profile_hash
        except OrchestratorError:  # broken there, or refused by the caps: no run gets it
            return None


def _said(change: ProfileChange) -> str:
    """The record's reason: what changed, from which files."""
    files = ", ".join(
        f"{f.path} (owner uid {f.owner_uid})" if f.owner_uid is not None else f"{f.path} (gone)" for f in change.files
    )
    return f"profile {change.name!r} {change.kind.value}" + (f": {files}" if files else "")
