"""The /tmp rule every backend applies: a read-only root always gets an explicit /tmp.

Without one, a runtime may put its own there: runsc mounts a writable, uncapped tmpfs on /tmp, silently
breaking the read-only root the profile asked for. So /tmp is always an explicit mount: the profile's tmpfs,
or, when the profile has none there and its root is read-only, an empty read-only one (each backend writes
it in its own form: Docker a tmpfs option string, Kubernetes an emptyDir).
"""

from __future__ import annotations

from typing import Final

from orchestrator.profiles import ResolvedProfile

TMP: Final = "/tmp"  # noqa: S108 - a path inside the sandbox


def needs_empty_tmp(profile: ResolvedProfile) -> bool:
    """Whether sandboxes of ``profile`` get an empty read-only /tmp (a read-only root, no tmpfs of its own there)."""
    return profile.read_only_root and all(tmpfs.path != TMP for tmpfs in profile.tmpfs)
