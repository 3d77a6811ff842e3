"""The side-effect record of one run: bounded in advance, whatever names the workload chose.

Everything found is **counted** and enters a **digest** of the full list; only what fits in a fixed byte
budget is **listed**. Names (paths and link targets) are written the same way everywhere:

1. redacted with the request's :class:`~orchestrator.results.redact.Redactor` (an ``--env`` secret used
   as a file name or a link target never reaches evidence), on the raw bytes of the whole relative path;
2. escaped unambiguously (``\\`` doubled, bytes that are not UTF-8 as ``\\xNN``);
3. shortened to :data:`MAX_NAME_CHARS` characters (head … tail, with a note).

The listing takes changes in the order the scan finds them: changes to what existed before the run
(modified, deleted) first, then created entries, until :data:`LISTING_MAX_BYTES` of canonical JSON; after
the first change that does not fit, nothing more is listed (``listing_complete`` false). Problems (why the
record is incomplete) and set-id removals have their own small caps. So :meth:`SideEffects.to_json` is at
most :data:`SIDE_EFFECTS_MAX_BYTES`, always (tested with the worst names).

``digest`` is sha256 of the canonical JSON ``{"created": C, "deleted": D, "modified": M}`` where each of
C, D, M is the sha256 hex of the canonical JSON lines (each followed by ``\\n``) of every change of that
kind, in walk order, written as they would be listed: two records with the same digest changed the same.
"""

from __future__ import annotations

import hashlib
import os
import stat
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from orchestrator.domain.canonical import canonical_json, canonical_sha256
from orchestrator.results.fstree import Entry, EntryKind, display, other_note
from orchestrator.results.redact import Redactor

MAX_NAME_CHARS: Final = 256
"""Longest path or link target written (characters, after escaping); longer ones keep head and tail."""
LISTING_MAX_BYTES: Final = 64 * 1024
"""Canonical JSON bytes of the listed changes, at most."""
MAX_PROBLEMS_LISTED: Final = 10
MAX_SETID_LISTED: Final = 20
MAX_DETAIL_CHARS: Final = 200
SIDE_EFFECTS_MAX_BYTES: Final = 128 * 1024
"""Upper bound of :meth:`SideEffects.to_json` (listing + capped problems and set-id paths + counts)."""

NOTE_SHORTENED: Final = "name shortened"
_HEAD = (MAX_NAME_CHARS - 1) // 2
_TAIL = MAX_NAME_CHARS - 1 - _HEAD

Group = Literal["created", "modified", "deleted"]
ProblemKind = Literal[
    "before_truncated",  # the workspace had more entries than the snapshot limit
    "before_unlisted",  # a directory could not be listed before the run
    "unreachable",  # a directory that existed before could not be entered after the run
    "unlisted",  # a directory could not be listed after the run
    "path_too_long",  # a directory deeper than PATH_MAX bytes: below it, only set-id bits were checked
    "scan_budget",  # the scan stopped at its entry budget
    "setid_not_removed",  # a set-uid/set-gid bit could not be removed
]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class FileChange(_Frozen):
    """One created, modified or deleted path. Never content, never a resolved link."""

    path: str = Field(
        description="Relative path, '/'-separated, redacted, escaped ('\\\\' for a backslash, '\\xNN' for a byte "
        f"that is not UTF-8) and shortened to {MAX_NAME_CHARS} characters (note 'name shortened')."
    )
    kind: EntryKind = Field(description="file | dir | symlink | other (FIFO, socket, device); after the change.")
    size: int | None = Field(
        default=None, ge=0, description="Bytes: files (the size hashed, if hashed), symlinks (target length)."
    )
    mode: int = Field(ge=0, description="Permission bits as found (setuid/setgid/sticky included), as an integer.")
    sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="Content hash of created/modified regular files, when hashed (see note).",
    )
    link_target: str | None = Field(
        default=None, description="Symlinks: the target text (redacted, escaped, shortened like path), never resolved."
    )
    note: str | None = Field(
        default=None,
        description="Why a file was not hashed, what it was before a kind change, what kind of 'other' it is, "
        "that set-id bits were removed; several notes are joined with '; '.",
    )


class Problem(_Frozen):
    """Why the record is not complete: something that was not examined or not done."""

    kind: ProblemKind = Field(description="What went wrong (stable names).")
    path: str | None = Field(default=None, description="The directory or file concerned, written like a change's path.")
    detail: str = Field(max_length=MAX_DETAIL_CHARS, description="What it means for the record.")


def _empty_digest() -> str:
    empty = hashlib.sha256().hexdigest()
    return canonical_sha256({"created": empty, "deleted": empty, "modified": empty})


EMPTY_DIGEST: Final = _empty_digest()


class SideEffects(_Frozen):
    """The workspace changes of one execution, for evidence: bounded (see the module docstring)."""

    created: tuple[FileChange, ...] = Field(default=(), description="New paths listed, in walk order.")
    modified: tuple[FileChange, ...] = Field(default=(), description="Changed paths listed, in walk order.")
    deleted: tuple[FileChange, ...] = Field(default=(), description="Removed paths listed (as they were).")
    created_count: int = Field(default=0, ge=0, description="New paths found (listed or not).")
    modified_count: int = Field(default=0, ge=0, description="Changed paths found.")
    deleted_count: int = Field(default=0, ge=0, description="Removed paths found.")
    listing_complete: bool = Field(default=True, description="Every change found is listed.")
    digest: str = Field(
        default=EMPTY_DIGEST, pattern=r"^[0-9a-f]{64}$", description="sha256 of the full list (module docstring)."
    )
    bytes_written: int = Field(
        default=0,
        ge=0,
        description="How much the run grew the workspace: sizes of the regular files it created "
        "(hard links once) plus the growth of files that existed before.",
    )
    hashed_bytes: int = Field(default=0, ge=0, description="Bytes read to hash files.")
    hashed_files: int = Field(default=0, ge=0, description="Files hashed.")
    entries_examined: int = Field(default=0, ge=0, description="Entries compared or listed by the scan.")
    setid_removed_count: int = Field(
        default=0, ge=0, description="Regular files the run left set-uid/set-gid whose bits were removed."
    )
    setid_removed: tuple[str, ...] = Field(
        default=(), max_length=MAX_SETID_LISTED, description="The first of them (paths written like a change's)."
    )
    complete: bool = Field(
        default=True,
        description="Everything was examined and done: no problem. False is a failure "
        "(SANDBOX.SIDE_EFFECTS_INCOMPLETE): changes may be missing from the counts.",
    )
    problems_count: int = Field(default=0, ge=0, description="How many problems were found.")
    problems: tuple[Problem, ...] = Field(
        default=(), max_length=MAX_PROBLEMS_LISTED, description="The first problems found."
    )

    @model_validator(mode="after")
    def _consistent(self) -> SideEffects:
        if (
            len(self.created) > self.created_count
            or len(self.modified) > self.modified_count
            or len(self.deleted) > self.deleted_count
        ):
            raise ValueError("more changes listed than counted")
        if len(self.problems) > self.problems_count or self.complete != (self.problems_count == 0):
            raise ValueError("complete must be true exactly when there is no problem")
        if len(self.setid_removed) > self.setid_removed_count:
            raise ValueError("more set-id removals listed than counted")
        return self

    def to_dict(self) -> dict[str, JsonValue]:
        """JSON values; fields of a change that do not apply are left out."""
        dumped: dict[str, JsonValue] = self.model_dump(mode="json", exclude_none=True)
        return dumped

    def to_json(self) -> bytes:
        """Canonical JSON (sorted keys, no spaces, UTF-8): at most SIDE_EFFECTS_MAX_BYTES."""
        return canonical_json(self.to_dict())

    def summary(self) -> dict[str, JsonValue]:
        """The few figures a caller needs at a glance (the run's result, not evidence)."""
        return {
            "complete": self.complete,
            "created": self.created_count,
            "modified": self.modified_count,
            "deleted": self.deleted_count,
            "bytes_written": self.bytes_written,
            "setid_removed": self.setid_removed_count,
        }

    def incompleteness(self) -> str | None:
        """One sentence saying why the record is incomplete (None when complete), safe to show."""
        if self.complete:
            return None
        first = self.problems[0] if self.problems else None
        more = self.problems_count - 1
        text = f"{first.kind}: {first.detail}" if first is not None else "incomplete"
        return f"the workspace side-effect record is incomplete ({text}{f'; {more} more' if more > 0 else ''})"


class Names:
    """Writes paths and link targets: redacted, escaped, shortened (see the module docstring)."""

    __slots__ = ("_redactor",)

    def __init__(self, redactor: Redactor | None) -> None:
        self._redactor = redactor

    def render(self, text: str) -> tuple[str, bool]:
        """The written form of ``text`` (a name as ``os.fsdecode`` gives it) and whether it was shortened."""
        if self._redactor is not None:
            raw = os.fsencode(text)
            redacted = self._redactor.redact(raw).data
            if redacted is not raw:
                text = os.fsdecode(redacted)
        shown = display(text)
        if len(shown) <= MAX_NAME_CHARS:
            return shown, False
        return f"{shown[:_HEAD]}…{shown[-_TAIL:]}", True


class RecordBuilder:
    """Collects changes as a scan finds them; :meth:`build` makes the bounded :class:`SideEffects`."""

    def __init__(self, names: Names, *, listing_bytes: int = LISTING_MAX_BYTES) -> None:
        self.names = names
        self._listing_left = listing_bytes
        self._listing_open = True
        self._listed: dict[Group, list[dict[str, JsonValue]]] = {"created": [], "modified": [], "deleted": []}
        self._counts: dict[Group, int] = {"created": 0, "modified": 0, "deleted": 0}
        self._hashes = {group: hashlib.sha256() for group in self._counts}
        self._problems: list[Problem] = []
        self._problems_count = 0
        self._setid: list[str] = []
        self._setid_count = 0

    def add(
        self,
        group: Group,
        key: str,
        entry: Entry,
        *,
        sha256: str | None = None,
        size: int | None = None,
        notes: list[str] | None = None,
    ) -> None:
        """One change: ``key`` is the relative path, ``entry`` what it is now (deleted: what it was)."""
        notes = list(notes or ())
        path, shortened = self.names.render(key)
        change: dict[str, JsonValue] = {"path": path, "kind": entry.kind, "mode": stat.S_IMODE(entry.mode)}
        if entry.kind == "file":
            change["size"] = entry.size if size is None else size
        elif entry.kind == "symlink":
            change["size"] = entry.size
        elif entry.kind == "other":
            notes.append(other_note(entry.mode))
        if sha256 is not None:
            change["sha256"] = sha256
        if entry.link_target is not None:
            target, target_shortened = self.names.render(entry.link_target)
            change["link_target"] = target
            shortened = shortened or target_shortened
        if shortened:
            notes.append(NOTE_SHORTENED)
        if notes:
            change["note"] = "; ".join(notes)
        line = canonical_json(change)
        self._counts[group] += 1
        self._hashes[group].update(line + b"\n")
        if self._listing_open:
            if len(line) + 1 <= self._listing_left:
                self._listing_left -= len(line) + 1
                self._listed[group].append(change)
            else:
                self._listing_open = False

    def problem(self, kind: ProblemKind, key: str | None, detail: str) -> None:
        self._problems_count += 1
        if len(self._problems) < MAX_PROBLEMS_LISTED:
            path = self.names.render(key)[0] if key is not None else None
            self._problems.append(Problem(kind=kind, path=path, detail=detail[:MAX_DETAIL_CHARS]))

    def setid_removed(self, key: str) -> None:
        self._setid_count += 1
        if len(self._setid) < MAX_SETID_LISTED:
            self._setid.append(self.names.render(key)[0])

    @property
    def complete(self) -> bool:
        return self._problems_count == 0

    def build(self, *, bytes_written: int, hashed_bytes: int, hashed_files: int, entries_examined: int) -> SideEffects:
        listed = self._listed
        counts = self._counts
        return SideEffects(
            created=tuple(FileChange.model_validate(c) for c in listed["created"]),
            modified=tuple(FileChange.model_validate(c) for c in listed["modified"]),
            deleted=tuple(FileChange.model_validate(c) for c in listed["deleted"]),
            created_count=counts["created"],
            modified_count=counts["modified"],
            deleted_count=counts["deleted"],
            listing_complete=all(len(listed[g]) == counts[g] for g in counts),
            digest=canonical_sha256({g: h.hexdigest() for g, h in sorted(self._hashes.items())}),
            bytes_written=bytes_written,
            hashed_bytes=hashed_bytes,
            hashed_files=hashed_files,
            entries_examined=entries_examined,
            setid_removed_count=self._setid_count,
            setid_removed=tuple(self._setid),
            complete=self._problems_count == 0,
            problems_count=self._problems_count,
            problems=tuple(self._problems),
        )
