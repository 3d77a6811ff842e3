"""Egress allowlists (the grammar lives in the domain, ``orchestrator.domain.hosts``: requests, profiles and
the gate validate with it too); re-exported here for the proxy and its callers."""

from __future__ import annotations

from orchestrator.domain.hosts import Allowlist, HostPattern, normalise_host, parse_authority, parse_pattern

__all__ = ["Allowlist", "HostPattern", "normalise_host", "parse_authority", "parse_pattern"]
