"""Best-effort file paths touched by a patch: unified/git diffs and the agent 'apply_patch' envelope."""

from __future__ import annotations

import re

_ENVELOPE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.M)
_GIT = re.compile(r"^diff --git a/(.+?) b/(.+?)\s*$", re.M)
_UNIFIED = re.compile(r"^(?:---|\+\+\+) (.+?)(?:\t.*)?$", re.M)
_RENAME = re.compile(r"^rename (?:from|to) (.+?)\s*$", re.M)


def _strip_prefix(path: str) -> str | None:
    path = path.strip().strip('"')
    if path == "/dev/null":
        return None
    if path.startswith(("a/", "b/")):
        return path[2:]
    return path


def patch_paths(patch: str, limit: int = 1000) -> list[str]:
    """Paths in order of first appearance, without duplicates; empty when nothing recognisable."""
    found: list[str] = []
    seen: set[str] = set()

    def add(path: str | None) -> None:
        if path and path not in seen and len(found) < limit:
            seen.add(path)
            found.append(path)

    for m in _ENVELOPE.finditer(patch):
        add((m.group(1) or m.group(2)).strip())
    for m in _GIT.finditer(patch):
        add(m.group(1))
        add(m.group(2))
    for m in _RENAME.finditer(patch):
        add(m.group(1))
    for m in _UNIFIED.finditer(patch):
        add(_strip_prefix(m.group(1)))
    return found
