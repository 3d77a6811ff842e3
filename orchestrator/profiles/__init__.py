"""Execution profiles: YAML files with ``extends``, resolution to the narrowest settings, seccomp.

Public API::

    registry = ProfileRegistry()                  # built-ins + $SANDBOX_PROFILES_PATH
    profile = registry.get("workspace-write")     # PROFILE.NOT_FOUND lists the known names
    resolved = resolve(profile, request_timeout_s=30, caps=ProfileCaps(max_memory="256m"))
    resolved.profile_hash, resolved.seccomp_json  # what the backend applies and evidence records
"""

from orchestrator.profiles.loader import ProfileRegistry
from orchestrator.profiles.models import (
    Limits,
    Profile,
    ProfileCaps,
    ResolvedMount,
    ResolvedProfile,
    ResolvedTmpfs,
    ResolvedWorkspace,
    Tmpfs,
    Workspace,
    format_size,
    parse_size,
)
from orchestrator.profiles.resolve import resolve
from orchestrator.profiles.schema import profile_json_schema, profile_json_schema_text
from orchestrator.profiles.seccomp import (
    SeccompProfile,
    blocked_syscalls,
    load_seccomp,
    parse_seccomp,
    syscall_action,
)
from orchestrator.profiles.survey import BrokenFile, Survey, survey

__all__ = [
    "BrokenFile",
    "Limits",
    "Profile",
    "ProfileCaps",
    "ProfileRegistry",
    "ResolvedMount",
    "ResolvedProfile",
    "ResolvedTmpfs",
    "ResolvedWorkspace",
    "SeccompProfile",
    "Survey",
    "Tmpfs",
    "Workspace",
    "blocked_syscalls",
    "format_size",
    "load_seccomp",
    "parse_seccomp",
    "parse_size",
    "profile_json_schema",
    "profile_json_schema_text",
    "resolve",
    "survey",
    "syscall_action",
]
