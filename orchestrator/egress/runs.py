"""Egress, as the service sees it: one proxy for every run that may reach hosts, its connection records on
the evidence, the variables that point a command at it, and what a run was refused.

Each connection attempt of a sandbox, allowed or refused, becomes an ``egress_connection`` record of its
execution (host, port, method, bytes each way, duration; never a path, header or payload), written when the
connection ended: the backend closes a sandbox's listener before the sandbox is removed, so every one is on
the evidence before the end record. A sandbox could open connections in a loop: past ``max_records`` per
execution they are only counted, and an ``egress_summary`` record (written whenever a run had egress) gives
the totals, records left out included.
"""

from __future__ import annotations

import ipaddress
import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, field_validator

from orchestrator.domain.hosts import HostPattern
from orchestrator.egress import DEFAULT_DENIED, Allowlist, ConnectionRecord, EgressProxy, EgressRoute, Resolver
from orchestrator.evidence import EventType
from orchestrator.results import Redactor
from orchestrator.results.redact import MIN_LITERAL_LENGTH, marker

log = logging.getLogger(__name__)

#: how a command is pointed at the proxy: what curl, pip, git, npm, requests and the Go and Java tools read
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
_NO_PROXY = "localhost,127.0.0.1,::1"
_REDACTED_LITERAL = marker("literal").decode()
MAX_SUMMARY_HOSTS = 256  # distinct host:port a run's summary names; more are counted (hosts_left_out)


class EgressSettings(BaseModel):
    """``egress:`` in the config: how the proxy resolves and what it never connects to."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    hosts: dict[str, str] = Field(
        default_factory=dict,
        description="Names the proxy resolves to a fixed IP before DNS (as /etc/hosts): pin an internal API.",
    )
    deny_networks: list[str] = Field(
        default_factory=list,
        description="CIDRs the proxy never connects to, whatever name resolves there, beside the built-in "
        "loopback, link-local (the metadata address), unspecified and multicast ranges (add your cluster's "
        "service and pod ranges, the controller's own network).",
    )
    max_records: int = Field(
        default=1000, ge=1, le=1_000_000, description="Connection records per execution; more are only counted."
    )
    max_connections_per_run: int = Field(
        default=32, ge=1, le=1024, description="Connections one run may hold open at once (past it: refused)."
    )
    max_connections: int = Field(
        default=128,
        ge=1,
        le=4096,
        description="Connections the proxy holds open at once, all runs together (each takes 4-6 descriptors).",
    )
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300, description="Connecting to an allowed host.")
    idle_timeout_s: float = Field(default=300.0, gt=0, le=86_400, description="A connection idle this long ends.")

    @field_validator("hosts")
    @classmethod
    def _addresses(cls, hosts: dict[str, str]) -> dict[str, str]:
        Resolver(hosts=hosts)  # raises naming the entry
        return hosts

    @field_validator("deny_networks")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        for text in networks:
            ipaddress.ip_network(text, strict=False)  # ValueError names it
        return networks


class NameRedactor:
    """Secrets out of what a sandbox names (a host, a TLS server name, a refusal's detail): the request's env
    values and the built-in patterns, as in its output, and the values in any letter case too (the proxy
    lower-cases host names). A sandbox could otherwise spell a secret into a name it connects to."""

    def __init__(self, literals: Iterable[str]) -> None:
        kept = [value for value in literals if len(value.strip()) >= MIN_LITERAL_LENGTH]
        self._exact = Redactor(literals=kept)
        self._folded = [re.compile(re.escape(value), re.IGNORECASE) for value in kept]

    def __call__(self, text: str) -> str:
        cleaned = self._exact.redact(text.encode("utf-8", "surrogateescape")).data.decode("utf-8", "replace")
        for pattern in self._folded:
            cleaned = pattern.sub(_REDACTED_LITERAL, cleaned)
        return cleaned


def proxy_environment(url: str) -> dict[str, str]:
    """The variables that point a command's tools at the proxy (set over the request's own)."""
    return {**dict.fromkeys(_PROXY_VARIABLES, url), "NO_PROXY": _NO_PROXY, "no_proxy": _NO_PROXY}


Write = Callable[..., None]
"""``write(event, **fields)``: appends a record of one execution (queued, in order)."""


@dataclass
class _Tracked:
    write: Write
    redact: Callable[[str], str]
    written: int = 0
    left_out: int = 0
    allowed: int = 0
    refused: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    hosts: set[str] = field(default_factory=set)
    hosts_left_out: int = 0


class Egress:
    """The proxy of this orchestrator (made at the first run that needs it) and its runs' routes."""

    def __init__(self, settings: EgressSettings) -> None:
        self.settings = settings
        self._proxy: EgressProxy | None = None
        self._runs: dict[str, _Tracked] = {}

    @property
    def proxy(self) -> EgressProxy:
        if self._proxy is None:
            networks = [ipaddress.ip_network(text, strict=False) for text in self.settings.deny_networks]
            self._proxy = EgressProxy(
                self._on_record,
                resolver=Resolver(hosts=self.settings.hosts, denied=(*DEFAULT_DENIED, *networks)),
                connect_timeout_s=self.settings.connect_timeout_s,
                idle_timeout_s=self.settings.idle_timeout_s,
                max_connections_per_listener=self.settings.max_connections,  # a shared listener serves many runs
                max_connections=self.settings.max_connections,
            )
        return self._proxy

    def open(
        self, execution_id: str, allow: tuple[str, ...], write: Write, redact: Callable[[str], str]
    ) -> EgressRoute:
        """The route of one run: what it may reach, and what it was refused (read after it); ``write`` puts
        the run's records on the evidence, ``redact`` takes secrets out of the names a sandbox gives."""
        route = EgressRoute(
            execution_id=execution_id, allowlist=Allowlist(allow), max_connections=self.settings.max_connections_per_run
        )
        self._runs[execution_id] = _Tracked(write, redact)
        return route

    def close(self, execution_id: str) -> None:
        """Done with a run (its sandbox is gone): its ``egress_summary`` record."""
        tracked = self._runs.pop(execution_id, None)
        if tracked is None:
            return
        summary = {
            "connections": tracked.allowed + tracked.refused,
            "allowed": tracked.allowed,
            "refused": tracked.refused,
            "bytes_up": tracked.bytes_up,
            "bytes_down": tracked.bytes_down,
            "hosts": sorted(tracked.hosts),
            "hosts_left_out": tracked.hosts_left_out,
            "records_left_out": tracked.left_out,
        }
        tracked.write(EventType.EGRESS_SUMMARY, data=summary)

    def _on_record(self, record: ConnectionRecord) -> None:
        tracked = self._runs.get(record.execution_id)
        if tracked is None:  # a run already closed (cannot happen: its listener closes first); say so
            log.warning("an egress record of %s came after its run ended", record.execution_id)
            return
        if record.allowed:
            tracked.allowed += 1
        else:
            tracked.refused += 1
        tracked.bytes_up += record.bytes_up
        tracked.bytes_down += record.bytes_down
        if record.host:
            host = tracked.redact(f"{record.host}:{record.port}")
            if host in tracked.hosts or len(tracked.hosts) < MAX_SUMMARY_HOSTS:
                tracked.hosts.add(host)
            else:  # a sandbox asking for fresh names in a loop: counted, never held
                tracked.hosts_left_out += 1
        if tracked.written >= self.settings.max_records:
            tracked.left_out += 1
            return
        tracked.written += 1
        fields = record.as_dict()
        del fields["execution_id"]
        for name in ("host", "sni", "detail"):  # what the sandbox named: never a secret on the evidence
            value = fields[name]
            if isinstance(value, str):
                fields[name] = tracked.redact(value)
        status = "allowed" if record.allowed else "refused"
        tracked.write(EventType.EGRESS_CONNECTION, status=status, data=fields)

    async def aclose(self) -> None:
        if self._proxy is not None:
            await self._proxy.close()


#: refusals an approved escalation could lift (a host not on the run's allowlist); a denied address, a name
#: that does not resolve or a malformed request would be refused again, whatever was approved
LIFTABLE = frozenset({"not_allowed"})


def denied_hosts(route: EgressRoute, redact: Callable[[str], str], limit: int = 64) -> list[str]:
    """The host:port a run was refused for not being on its allowlist (what ``retry_of`` may ask for), with
    secrets taken out (a name holding one is said redacted: nobody may be offered it)."""
    seen: dict[str, None] = {}
    for record in route.refused:
        if record.refusal in LIFTABLE and record.host:
            seen.setdefault(redact(HostPattern(record.host, record.port, "").canonical))
    return list(seen)[:limit]
