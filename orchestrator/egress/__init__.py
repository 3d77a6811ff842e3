"""Egress for sandboxes: an allowlisting HTTP proxy (CONNECT tunnels and plain HTTP), standard library only.

A sandbox has no network but a route to this proxy (``HTTP_PROXY``/``HTTPS_PROXY``). Each connection is checked
against the execution's :class:`Allowlist`, resolved by the proxy (never to a denied address), looked at for a
TLS server name that differs from the CONNECT host, then spliced; each one ends in one :class:`ConnectionRecord`.
``egress.runs`` (imported on its own) puts an orchestrator's runs behind one proxy and their records on the evidence.
"""

from __future__ import annotations

from orchestrator.egress.allowlist import Allowlist, HostPattern, normalise_host, parse_authority, parse_pattern
from orchestrator.egress.proxy import ConnectionRecord, EgressProxy, EgressRoute, ListenerHandle
from orchestrator.egress.resolver import (
    DEFAULT_DENIED,
    DEFAULT_INTERNAL,
    EgressRefused,
    IPNetwork,
    Resolver,
    is_denied,
    is_local,
)
from orchestrator.egress.tls import HelloScan, HelloState, scan_client_hello, server_name

__all__ = [
    "DEFAULT_DENIED",
    "DEFAULT_INTERNAL",
    "Allowlist",
    "ConnectionRecord",
    "EgressProxy",
    "EgressRefused",
    "EgressRoute",
    "HelloScan",
    "HelloState",
    "HostPattern",
    "IPNetwork",
    "ListenerHandle",
    "Resolver",
    "is_denied",
    "is_local",
    "normalise_host",
    "parse_authority",
    "parse_pattern",
    "scan_client_hello",
    "server_name",
]
