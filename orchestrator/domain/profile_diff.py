"""The difference between two sets of profiles, as runs would get them: ``sandboxctl profiles diff --json``, and
the shape an HTTP route comparing a proposal with the set in force would answer (defined here, with the other wire
shapes, so that the client can read it too).

A profile differs when its definition does (its settings, ``extends`` merged, and its seccomp file: what a running
service re-reading its profiles records as ``profile_changed``). The fields are those of its resolved profile
that differ, each a dotted path (``memory_bytes``, ``workspace.mode``, ``env.PATH``; a list whole).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue


class _Diff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class FieldChange(_Diff):
    """One field of a resolved profile, before and after."""

    field: str = Field(description="Its dotted path in the resolved profile (memory_bytes, workspace.mode, env.PATH).")
    old: JsonValue = Field(description="Its value in force (null: the field is not there).")
    new: JsonValue = Field(description="Its value proposed (null: the field is not there).")


class ProfileDifference(_Diff):
    """One profile that the proposal adds, removes or changes."""

    name: str = Field(description="The profile.")
    change: Literal["added", "removed", "changed"] = Field(description="What the proposal does to it.")
    old_profile_hash: str | None = Field(
        description="Its profile_hash in force (null: absent, or it does not resolve)."
    )
    new_profile_hash: str | None = Field(
        description="Its profile_hash proposed (null: absent, or it does not resolve)."
    )
    old_error: str | None = Field(default=None, description="Why it does not resolve in force ('CODE: message').")
    new_error: str | None = Field(default=None, description="Why it would not resolve ('CODE: message').")
    fields: tuple[FieldChange, ...] = Field(
        default=(),
        description="The fields of its resolved profile that differ (none for one added or removed, or when the caps"
        " hide every difference a run would see).",
    )


class ProfilesDiff(_Diff):
    """The profiles in force against a proposal."""

    old_search_path: tuple[str, ...] = Field(description="Where the profiles in force come from, in order.")
    new_search_path: tuple[str, ...] = Field(description="Where the proposed profiles come from, in order.")
    differences: tuple[ProfileDifference, ...] = Field(description="Each profile the proposal changes, by name.")
    unchanged: tuple[str, ...] = Field(description="The profiles the proposal leaves as they are.")
    refused: tuple[str, ...] = Field(
        default=(),
        description="Why a running service would refuse the proposed set and keep the one in force (each 'profile:"
        " problem'); empty: it would take it.",
    )
