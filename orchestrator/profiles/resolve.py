"""Resolution: the effective profile of one execution is the narrowest of profile, request and caps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING

from orchestrator.domain.errors import ConfigInvalid, InputInvalid, PolicyDenied
from orchestrator.profiles.models import (
    RUNSC_MIN_PIDS,
    Profile,
    ProfileCaps,
    ResolvedProfile,
    ResolvedTmpfs,
    ResolvedWorkspace,
    definition_sha256,
)
from orchestrator.profiles.seccomp import load_seccomp

if TYPE_CHECKING:
    from orchestrator.profiles.loader import ProfileRegistry


def _refuse(profile: Profile, field: str, message: str) -> ConfigInvalid:
    return ConfigInvalid(
        f"{field}: profile {profile.name!r} {message}", details={"field": field, "profile": profile.name}
    )


def resolve(
    profile: Profile,
    *,
    request_timeout_s: float | None = None,
    caps: ProfileCaps | None = None,
    writable_root: bool = False,
    session: bool = False,
    registry: ProfileRegistry | None = None,
    egress: Sequence[str] = (),
    image: str | None = None,
) -> ResolvedProfile:
    """The effective settings: every limit is the minimum of the profile's, the request's and the caps'.

    * ``request_timeout_s`` can lower the wall-clock deadline, never raise it (INPUT.INVALID unless > 0).
    * ``caps`` lower limits further. A cap that forbids the profile's runtime or image is a conflict
      between two pieces of configuration, refused with CONFIG.INVALID naming the field: nothing is
      ever silently swapped for something weaker, and retrying cannot help (unlike
      SANDBOX.UNAVAILABLE, which reports what the engine cannot give right now).
    * ``writable_root`` is an approved ``sandbox_permissions.writable_root`` escalation: the only way
      ``read_only_root`` becomes false.
    * ``egress``: approved ``sandbox_permissions.network`` hosts (canonical patterns): added to the
      profile's allowlist (a profile with network none then reaches them, and only them, through the proxy).
    * ``image``: a request's image instead of the profile's (a CI job's container), only where the caps'
      ``allowed_images`` name it (POLICY.DENIED otherwise: without that list, only the profile's own image).
    * ``session``: the sandbox of an interactive session: its deadline is the session's lifetime (a
      request's timeout and the caps still lower it).
    * The seccomp profile is loaded from the registry's search path (default: built-ins plus
      ``$SANDBOX_PROFILES_PATH``); CONFIG.INVALID when missing or invalid.
    """
    caps = caps or ProfileCaps()
    limits = profile.limits

    if caps.allowed_runtimes is not None and profile.runtime not in caps.allowed_runtimes:
        allowed = ", ".join(caps.allowed_runtimes) or "none"
        raise _refuse(
            profile,
            "runtime",
            f"needs runtime {profile.runtime!r}, which the policy caps do not allow (allowed_runtimes: {allowed})",
        )
    if caps.allowed_images is not None and not any(fnmatchcase(profile.image, p) for p in caps.allowed_images):
        allowed = ", ".join(caps.allowed_images) or "none"
        raise _refuse(
            profile,
            "image",
            f"uses image {profile.image!r}, which the policy caps do not allow (allowed_images: {allowed})",
        )

    if (
        image is not None
        and image != profile.image
        and (caps.allowed_images is None or not any(fnmatchcase(image, p) for p in caps.allowed_images))
    ):
        allowed = ", ".join(caps.allowed_images or ()) or "none: only the profile's own image"
        raise PolicyDenied(
            f"image {image!r} is not one the config allows instead of profile {profile.name!r}'s"
            f" {profile.image!r} (policy caps allowed_images: {allowed})",
            details={"fields": ["image"]},
        )

    lifetime = profile.sessions.max_lifetime_s or limits.wall_timeout_s
    wall = lifetime if session else limits.wall_timeout_s
    if request_timeout_s is not None:
        if isinstance(request_timeout_s, bool) or not math.isfinite(request_timeout_s) or request_timeout_s <= 0:
            raise InputInvalid("timeout: must be a positive number of seconds", details={"field": "timeout"})
        wall = min(wall, float(request_timeout_s))
    if caps.max_wall_timeout_s is not None:
        wall = min(wall, caps.max_wall_timeout_s)

    def capped(value: int, cap: int | None) -> int:
        return value if cap is None else min(value, cap)

    memory = capped(limits.memory, caps.max_memory)
    pids = capped(limits.pids, caps.max_pids)
    if profile.runtime == "runsc" and pids < RUNSC_MIN_PIDS:
        raise _refuse(
            profile,
            "max_pids",
            f"runs under runsc, which needs pids >= {RUNSC_MIN_PIDS} "
            f"(gVisor's own threads count against it); the caps allow {pids}",
        )
    cpus = limits.cpus if caps.max_cpus is None else min(limits.cpus, caps.max_cpus)

    seccomp = registry.load_seccomp(profile.seccomp) if registry is not None else load_seccomp(profile.seccomp)
    allow = tuple(sorted({*profile.network.allow, *egress}))

    return ResolvedProfile(
        name=profile.name,
        image=profile.image if image is None else image,
        runtime=profile.runtime,
        uid=profile.uid,
        gid=profile.gid,
        read_only_root=not writable_root,
        network="allowlist" if allow else "none",
        egress_allow=allow,
        workspace=ResolvedWorkspace(mode=profile.workspace.mode, container_path=profile.workspace.container_path),
        tmpfs=tuple(ResolvedTmpfs(path=t.path, size_bytes=t.size, mode=t.mode, noexec=t.noexec) for t in profile.tmpfs),
        cpus=float(cpus),
        memory_bytes=memory,
        memory_swap_bytes=memory,
        pids_limit=pids,
        wall_timeout_s=float(wall),
        stdout_max_bytes=capped(limits.stdout_max_bytes, caps.max_output_bytes),
        stderr_max_bytes=capped(limits.stderr_max_bytes, caps.max_output_bytes),
        nofile=limits.nofile,
        fsize_bytes=limits.fsize,
        workspace_write_bytes=capped(limits.workspace_write_bytes, caps.max_workspace_write_bytes),
        workspace_write_files=capped(limits.workspace_write_files, caps.max_workspace_write_files),
        seccomp=seccomp.name,
        seccomp_sha256=seccomp.sha256,
        seccomp_json=seccomp.json_text,
        env=dict(sorted(profile.env.items())),
        env_allowlist=tuple(sorted(profile.env_allowlist)),
        sessions_enabled=profile.sessions.enabled,
        interactive_shells=profile.sessions.interactive_shells,
        session_idle_timeout_s=profile.sessions.idle_timeout_s,
        session_lifetime_s=float(wall) if session else float(lifetime),
        pool_enabled=profile.pool.enabled,
        definition_sha256=definition_sha256(profile, seccomp.sha256),
    )
