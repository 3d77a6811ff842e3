"""Egress host patterns and allowlists: which ``host:port`` a sandbox may reach through the egress proxy.

Pure (no I/O): the request and profile models validate their patterns with it, the gate compares a run's
hosts with the policy's, and the proxy matches each connection against a run's allowlist.

A pattern is deliberately narrow: an exact host name, ``*.example.com`` (any subdomain, never the bare
domain), or an IP literal, each with a port or ``*``. Nothing fuzzy: no partial-label wildcards, no CIDR,
no unicode (an IDNA name must be written as its ``xn--`` form, so what the operator reads is what is matched).
Host text is normalised one way everywhere (lowercase, one trailing dot dropped, IPs in their canonical
form), both for patterns and for the hosts the sandbox asks for, so that ``Example.COM.`` cannot slip past
a pattern written ``example.com``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Allowlist", "HostPattern", "is_ip", "normalise_host", "parse_authority", "parse_pattern"]

MAX_HOST_LENGTH = 253
# letters, digits, '-' and '_' (seen in real service names); no '-' at either end; 1..63 characters
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")


def _host_problem(host: str) -> str | None:
    """Why ``host`` (lowercase, ASCII, no trailing dot) is not a usable DNS name, or None."""
    if len(host) > MAX_HOST_LENGTH:
        return f"host name longer than {MAX_HOST_LENGTH} characters"
    labels = host.split(".")
    for label in labels:
        if not label:
            return "empty label (two dots in a row, or a leading dot)"
        if "*" in label:
            return "'*' may only be the whole first label, as in *.example.com"
        if not _LABEL.fullmatch(label):
            return f"invalid label {label[:63]!r} (letters, digits, '-', '_'; at most 63; no '-' at either end)"
    if labels[-1].isdigit():
        # "1.2.3", "010.0.0.1", "2130706433": resolvers read those as IPv4 in odd notations
        return "not a valid IPv4 address, and a host name cannot end in an all-digit label"
    return None


def normalise_host(host: str) -> str:
    """The canonical form of a host (a DNS name or an IP literal, IPv6 without brackets); ValueError if invalid.

    Lowercase, one trailing dot dropped, IPv4 dotted-quad, IPv6 compressed. Used on patterns and on what a
    sandbox asks for alike, so the two compare as plain strings.
    """
    if not host:
        raise ValueError("empty host")
    if not host.isascii():
        raise ValueError("non-ASCII host name: write an IDNA name in its ASCII form (xn--...)")
    if any(c.isspace() for c in host):
        raise ValueError("whitespace in the host")
    name = host.lower()
    if name.endswith(".") and not name.endswith(".."):
        name = name[:-1]
    if ":" in name:
        if "%" in name:
            raise ValueError("an IPv6 zone index (%...) is not allowed")
        try:
            return ipaddress.IPv6Address(name).compressed
        except ValueError:
            raise ValueError(f"invalid IPv6 address {host[:64]!r}") from None
    try:
        return str(ipaddress.IPv4Address(name))
    except ValueError:
        pass
    problem = _host_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name


def _parse_port(text: str) -> int:
    if not text:
        raise ValueError("empty port")
    if not (text.isascii() and text.isdigit()) or len(text) > 5:
        raise ValueError(f"bad port {text[:16]!r} (a number 1..65535, or * in a pattern)")
    port = int(text)
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} out of range 1..65535")
    return port


def _split_host_port(text: str) -> tuple[str, str | None, bool]:
    """``host``, the port text (None when there is no ``:``), and whether the host was in brackets."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError("unclosed '[' in an IPv6 address")
        rest = text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError("expected ':port' after ']'")
        return text[1:end], (rest[1:] if rest else None), True
    if text.count(":") > 1:
        raise ValueError("an IPv6 address must be written in brackets, as in [2001:db8::1]:443")
    host, sep, port = text.partition(":")
    return host, (port if sep else None), False


def parse_authority(text: str, default_port: int | None) -> tuple[str, int]:
    """``host[:port]`` (a CONNECT target, a URL's authority, a Host header) -> (normalised host, port).

    ``default_port`` None means the port is required. ValueError names the problem.
    """
    host, port_text, bracketed = _split_host_port(text)
    if bracketed and ":" not in host:
        raise ValueError("only an IPv6 address may be written in brackets")
    if not bracketed and ":" in host:
        raise ValueError("an IPv6 address must be written in brackets")
    if port_text is None:
        if default_port is None:
            raise ValueError("no port")
        port = default_port
    else:
        port = _parse_port(port_text)
    return normalise_host(host), port


def is_ip(host: str) -> bool:
    """Whether ``host`` is an IP address (v4 or v6, no brackets)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class HostPattern:
    """One allowlist entry: ``host`` is normalised (see :func:`normalise_host`), ``*.`` first for a wildcard."""

    host: str
    port: int | None
    text: str

    @property
    def wildcard(self) -> bool:
        """True for ``*.example.com``: any subdomain, at any depth, but not ``example.com`` itself."""
        return self.host.startswith("*.")

    def allows(self, host: str, port: int) -> bool:
        """Whether this pattern lets a sandbox reach ``host`` (already normalised) on ``port``."""
        if self.port is not None and self.port != port:
            return False
        if self.wildcard:
            suffix = self.host[1:]  # ".example.com"
            return len(host) > len(suffix) and host.endswith(suffix)
        return host == self.host

    def covers(self, other: HostPattern) -> bool:
        """Every host:port ``other`` allows, this pattern allows too."""
        if self.port is not None and self.port != other.port:
            return False
        if self.host == other.host:
            return True
        if not self.wildcard:
            return False
        # "*.a.com" covers "x.a.com" and "*.x.a.com" (both only ever name subdomains of a.com)
        target = other.host[2:] if other.wildcard else other.host
        suffix = self.host[1:]
        return len(target) > len(suffix) and target.endswith(suffix)

    @property
    def canonical(self) -> str:
        """The pattern in one spelling (``*.example.com:443``, ``[2001:db8::1]:*``): what keys and records hold."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{'*' if self.port is None else self.port}"

    def __str__(self) -> str:
        return self.text


def parse_pattern(text: str) -> HostPattern:
    """``host:port`` | ``host:*`` | ``*.host:443`` | ``10.0.0.5:8080`` | ``[2001:db8::1]:443`` -> a pattern.

    ValueError with a message naming the pattern and the problem.
    """
    try:
        return _parse_pattern(text)
    except ValueError as e:
        raise ValueError(f"egress pattern {text[:300]!r}: {e}") from None


def _parse_pattern(text: str) -> HostPattern:
    if not isinstance(text, str):
        raise ValueError(f"expected text, got {type(text).__name__}")
    if not text:
        raise ValueError("empty pattern")
    if any(c.isspace() for c in text):
        raise ValueError("contains whitespace")
    if not text.isascii():
        raise ValueError("non-ASCII host name: write an IDNA name in its ASCII form (xn--...)")
    host_text, port_text, bracketed = _split_host_port(text)
    if port_text is None:
        raise ValueError("no port: write host:port, or host:* for any port")
    port = None if port_text == "*" else _parse_port(port_text)
    if bracketed:
        if ":" not in host_text:
            raise ValueError("only an IPv6 address may be written in brackets")
        return HostPattern(normalise_host(host_text), port, text)
    if host_text == "*":
        raise ValueError("a bare '*' would allow every host: name the hosts")
    if host_text.startswith("*."):
        rest = host_text[2:]
        if not rest or rest == ".":
            raise ValueError("nothing after '*.'")
        domain = normalise_host(rest)
        if is_ip(domain):
            raise ValueError("a wildcard cannot precede an IP address")
        if "." not in domain:
            raise ValueError(f"'*.{domain}' would allow a whole top-level domain: name a domain under it")
        return HostPattern("*." + domain, port, text)
    if "*" in host_text:
        raise ValueError("'*' may only be the whole first label, as in *.example.com")
    return HostPattern(normalise_host(host_text), port, text)


class Allowlist:
    """An ordered set of patterns; a host:port is allowed when any pattern allows it (the first one is named)."""

    def __init__(self, patterns: Iterable[str | HostPattern]) -> None:
        parsed: list[HostPattern] = []
        seen: set[tuple[str, int | None]] = set()
        for item in patterns:
            pattern = item if isinstance(item, HostPattern) else parse_pattern(item)
            if (pattern.host, pattern.port) not in seen:  # "A.test.:1" after "a.test:1" adds nothing
                seen.add((pattern.host, pattern.port))
                parsed.append(pattern)
        self._patterns = tuple(parsed)

    @property
    def patterns(self) -> tuple[HostPattern, ...]:
        return self._patterns

    def match(self, host: str, port: int) -> HostPattern | None:
        """The first pattern allowing ``host:port``, or None (also for a host that is not a valid name)."""
        if not 1 <= port <= 65535:
            return None
        try:
            name = normalise_host(host)
        except ValueError:
            return None
        for pattern in self._patterns:
            if pattern.allows(name, port):
                return pattern
        return None

    def covers(self, other: HostPattern) -> bool:
        """Whether every host:port ``other`` allows is allowed here too.

        Judged pattern by pattern (one of ours must cover ``other`` alone): a union of patterns that happens to
        cover it, such as every single port listed one by one, is not recognised (and is never written).
        """
        return any(pattern.covers(other) for pattern in self._patterns)

    def __len__(self) -> int:
        return len(self._patterns)

    def __repr__(self) -> str:
        return f"Allowlist({[p.text for p in self._patterns]!r})"
