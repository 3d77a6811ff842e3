"""approval_key: one stable identifier for 'the same thing asked again'."""

from __future__ import annotations

from orchestrator.domain.canonical import canonical_sha256
from orchestrator.domain.ids import ApprovalKey
from orchestrator.domain.sanitized import SanitizedRequest


def approval_key(sanitized: SanitizedRequest) -> ApprovalKey:
    """sha256 of canonical JSON (sorted keys, no spaces, UTF-8) of {tool, request}.

    ``request`` is the asked action only (see ``SanitizedRequest.key_material``): per-call ids and
    analyzer output are left out, so the key is stable across calls, processes and releases.
    """
    material = sanitized.key_material()
    tool = material.pop("tool")
    return ApprovalKey(canonical_sha256({"tool": tool, "request": material}))
