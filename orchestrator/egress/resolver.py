"""Name resolution for the egress proxy: the sandbox never resolves, and never reaches a denied address.

The allowlist names hosts; what is finally connected to is an address, and a name can resolve anywhere
(``metadata.attacker.example`` -> 169.254.169.254). So every address, whether it came from DNS, the static map
or an IP literal in the request, is checked against denied networks right before it is handed out; the
IPv4-mapped IPv6 form of an address (``::ffff:127.0.0.1``, which the kernel connects to 127.0.0.1) is judged
as the IPv4 address it stands for.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Iterable, Mapping

from orchestrator.domain.hosts import is_ip, normalise_host

__all__ = ["DEFAULT_DENIED", "DEFAULT_INTERNAL", "EgressRefused", "IPNetwork", "Resolver", "is_denied", "is_local"]

logger = logging.getLogger(__name__)

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_DENIED_V4 = (
    "0.0.0.0/8",  # "this network", incl. the unspecified address
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local, incl. the cloud metadata address 169.254.169.254
    "224.0.0.0/4",  # multicast
    "255.255.255.255/32",  # limited broadcast
)
_DENIED_V6 = (
    "::/128",  # unspecified
    "::1/128",  # loopback
    "fe80::/10",  # link-local
    "ff00::/8",  # multicast
)

DEFAULT_DENIED: tuple[IPNetwork, ...] = (
    *(ipaddress.IPv4Network(net) for net in _DENIED_V4),
    *(ipaddress.IPv6Network(net) for net in _DENIED_V6),
    # the IPv4-mapped forms, listed too (is_denied also maps any ::ffff:a.b.c.d back to IPv4 before checking)
    *(
        ipaddress.IPv6Network(f"::ffff:{net.network_address}/{96 + net.prefixlen}")
        for net in (ipaddress.IPv4Network(n) for n in _DENIED_V4)
    ),
)


_INTERNAL_V4 = (
    "10.0.0.0/8",  # private (RFC 1918): a cluster's services and pods, a Docker bridge's containers
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",  # shared address space (CGNAT), incl. a cloud's metadata at 100.100.100.200
    "198.18.0.0/15",  # benchmarking
    "192.0.0.0/24",  # IETF protocol assignments
)
_INTERNAL_V6 = (
    "fc00::/7",  # unique local, incl. a cloud's IPv6 metadata at fd00:ec2::254
    "fec0::/10",  # site-local (deprecated, still routed in places)
    "64:ff9b::/96",  # NAT64: an IPv4 address behind it, any of them
    "64:ff9b:1::/48",
    "2002::/16",  # 6to4: likewise
    "2001::/32",  # Teredo
    "::/96",  # IPv4-compatible
)

DEFAULT_INTERNAL: tuple[IPNetwork, ...] = (
    *(ipaddress.IPv4Network(net) for net in _INTERNAL_V4),
    *(ipaddress.IPv6Network(net) for net in _INTERNAL_V6),
)
"""Networks a name's DNS answer never leads to: only an address the operator wrote down (an IP in an allowlist
pattern, a name pinned in ``egress.hosts``) is connected to there. An approver approves a *name*; whoever
controls that name's DNS must not turn it into the cluster's API, a neighbour container or a metadata service."""


class EgressRefused(Exception):
    """Why the proxy did not (or no longer) let a connection through; ``kind`` is one of :data:`KINDS`.

    Defined here, the lowest module that raises it; :mod:`orchestrator.egress.proxy` re-exports it.
    """

    KINDS = ("not_allowed", "dns", "address", "sni_mismatch", "bad_request", "connect_failed", "limit", "closed")

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


def is_denied(address: str, denied: Iterable[IPNetwork]) -> bool:
    """Whether ``address`` lies in one of ``denied`` (an IPv4-mapped IPv6 address also as its IPv4 self).

    Something that is not an IP address at all counts as denied: the proxy connects to addresses only.
    """
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return True
    candidates: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = [ip]
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        candidates.append(ip.ipv4_mapped)
    return any(c.version == net.version and c in net for c in candidates for net in denied)


def is_local(address: str) -> bool:
    """Whether ``address`` is one of this host's own (in the proxy's network namespace): binding to it works.
    The controller's own services listen there, whatever address a name resolves to; so does anything else
    of the host's. A host that lets any address be bound (``ip_nonlocal_bind``) counts every one as local:
    egress is then refused, never open."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return True
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((str(ip), 0))
        except OSError:
            return False
    return True


class Resolver:
    """Host -> the addresses the proxy may connect to, in order.

    ``hosts`` is a static map checked first (as /etc/hosts is): operators pin names with it, and tests name
    local servers without DNS. Everything else goes through ``loop.getaddrinfo`` (the system resolver, on the
    loop's executor), bounded by ``timeout_s``.
    """

    def __init__(
        self,
        *,
        hosts: Mapping[str, str] | None = None,
        denied: Iterable[IPNetwork] = DEFAULT_DENIED,
        internal: Iterable[IPNetwork] = DEFAULT_INTERNAL,
        timeout_s: float = 5.0,
        deny_local: bool = True,
    ) -> None:
        self._hosts: dict[str, str] = {}
        for name, address in (hosts or {}).items():
            try:
                key = normalise_host(name)
                value = str(ipaddress.ip_address(address))
            except ValueError as e:
                raise ValueError(f"egress hosts entry {name!r}: {address!r}: {e}") from None
            self._hosts[key] = value
        self._denied = tuple(denied)
        self._internal = tuple(internal)  # denied to DNS answers, not to what the operator wrote (hosts, IPs)
        self._timeout_s = timeout_s
        self._deny_local = deny_local  # this host's own addresses (is_local): off only for tests on loopback

    @property
    def denied(self) -> tuple[IPNetwork, ...]:
        return self._denied

    async def resolve(self, host: str, port: int) -> list[str]:
        """Addresses to try for ``host:port``; EgressRefused ``dns`` when none, ``address`` when all are denied."""
        try:
            name = normalise_host(host)
        except ValueError as e:
            raise EgressRefused("dns", f"invalid host: {e}") from None
        written = name in self._hosts or is_ip(name)  # the operator's own address, not a DNS answer
        if name in self._hosts:
            found = [self._hosts[name]]
        elif is_ip(name):
            found = [name]
        else:
            found = await self._lookup(name, port)
        if not found:
            raise EgressRefused("dns", f"{name} does not resolve")
        usable = [
            address
            for address in found
            if not is_denied(address, self._denied)
            and (written or not is_denied(address, self._internal))
            and not (self._deny_local and is_local(address))
        ]
        if not usable:
            shown = ", ".join(found[:3]) + (", ..." if len(found) > 3 else "")
            raise EgressRefused(
                "address",
                f"{name} resolves only to denied, internal or this host's own addresses ({shown}); pin an internal "
                "name in egress.hosts",
            )
        return usable

    async def _lookup(self, name: str, port: int) -> list[str]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._timeout_s):
                # absolute: the controller's search domains (a pod's ndots:5) are never tried first
                infos = await loop.getaddrinfo(name + ".", port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except TimeoutError:
            raise EgressRefused("dns", f"{name}: no answer within {self._timeout_s:g}s") from None
        except (OSError, UnicodeError) as e:  # socket.gaierror is an OSError
            logger.debug("egress: %s does not resolve: %s", name, e)
            raise EgressRefused("dns", f"{name} does not resolve") from None
        addresses: list[str] = []
        for family, _type, _proto, _name, sockaddr in infos:
            if family not in (socket.AF_INET, socket.AF_INET6):
                continue
            address = str(sockaddr[0])
            if address not in addresses:
                addresses.append(address)
        return addresses
