"""Reading ``ip -4 -o addr show``: which addresses an interface (or a stray network namespace) holds."""

from __future__ import annotations

import ipaddress

from scripts.testcluster.network import ipv4_addresses

OUTPUT = (
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "2: eth0@if5    inet 10.253.0.17/24 brd 10.253.0.255 scope global eth0\\       valid_lft forever\n"
)


def test_ipv4_addresses() -> None:
    found = ipv4_addresses(OUTPUT)
    assert found == [ipaddress.IPv4Interface("127.0.0.1/8"), ipaddress.IPv4Interface("10.253.0.17/24")]
    assert any(a.ip in ipaddress.IPv4Network("10.253.0.0/24") for a in found)
    assert ipv4_addresses("") == []
