"""The pods' network beyond what CNI makes: the egress attachment (a network namespace on the pods' bridge
holding the one address a controller's egress proxy listens on), and the network's clean-up.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

from . import supervise
from .settings import BRIDGE, CNI_NETWORK, CNI_RESULTS_DIR, EGRESS_LINK, EGRESS_NETNS, EGRESS_PEER, Settings

NETNS_DIR = Path("/var/run/netns")


class NetworkError(RuntimeError):
    pass


def ip(*args: str, netns: str | None = None) -> subprocess.CompletedProcess[str]:
    argv = ["ip", "netns", "exec", netns, "ip", *args] if netns else ["ip", *args]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def _must(proc: subprocess.CompletedProcess[str], what: str) -> None:
    if proc.returncode != 0:
        raise NetworkError(f"could not {what}: {proc.stderr.strip()}")


def link_exists(name: str) -> bool:
    return ip("link", "show", name).returncode == 0


def ipv4_addresses(output: str) -> list[ipaddress.IPv4Interface]:
    """The addresses of ``ip -4 -o addr show`` output."""
    found = []
    for line in output.splitlines():
        words = line.split()
        if "inet" in words:
            found.append(ipaddress.IPv4Interface(words[words.index("inet") + 1]))
    return found


def ensure_egress_attachment(s: Settings) -> None:
    """The bridge (made here if no pod made it yet: the CNI plugin takes an existing one), the namespace,
    and the veth between them, its inner end holding the egress address. Idempotent."""
    if not link_exists(BRIDGE):
        _must(ip("link", "add", BRIDGE, "type", "bridge"), f"make the bridge {BRIDGE}")
    _must(ip("link", "set", BRIDGE, "up"), f"set {BRIDGE} up")
    if not (NETNS_DIR / EGRESS_NETNS).exists():
        _must(ip("netns", "add", EGRESS_NETNS), f"make {EGRESS_NETNS}")
    if not link_exists(EGRESS_LINK):
        _must(
            ip("link", "add", EGRESS_LINK, "type", "veth", "peer", "name", EGRESS_PEER, "netns", EGRESS_NETNS),
            "make the egress attachment's veth",
        )
    _must(ip("link", "set", EGRESS_LINK, "master", BRIDGE, "up"), f"attach {EGRESS_LINK} to {BRIDGE}")
    _must(ip("link", "set", "lo", "up", netns=EGRESS_NETNS), f"set lo up in {EGRESS_NETNS}")
    shown = ip("-4", "-o", "addr", "show", "dev", EGRESS_PEER, netns=EGRESS_NETNS)
    if s.egress_ip not in {a.ip for a in ipv4_addresses(shown.stdout)}:
        address = f"{s.egress_ip}/{s.pod_subnet.prefixlen}"
        _must(ip("addr", "add", address, "dev", EGRESS_PEER, netns=EGRESS_NETNS), f"give {EGRESS_PEER} {address}")
    _must(ip("link", "set", EGRESS_PEER, "up", netns=EGRESS_NETNS), f"set {EGRESS_PEER} up")


def remove_egress_attachment() -> None:
    if link_exists(EGRESS_LINK):
        ip("link", "del", EGRESS_LINK)
    if (NETNS_DIR / EGRESS_NETNS).exists() and ip("netns", "del", EGRESS_NETNS).returncode != 0:
        supervise.warn(f"could not delete {EGRESS_NETNS}")


def remove_stray_netns(s: Settings) -> None:
    """Network namespaces of pods that an older configuration (or a containerd without netns under its
    state dir) made in /var/run/netns: ours when their eth0 has an address in the pod subnet."""
    for ns in sorted(NETNS_DIR.glob("cni-*")):
        shown = ip("-4", "-o", "addr", "show", netns=ns.name)
        if not any(a.ip in s.pod_subnet for a in ipv4_addresses(shown.stdout)):
            continue
        for args in (["umount", str(ns)], ["umount", "-l", str(ns)]):
            if subprocess.run(args, capture_output=True, check=False).returncode == 0:
                break
        ns.unlink(missing_ok=True)


def remove_network(s: Settings) -> None:
    remove_stray_netns(s)
    remove_egress_attachment()
    if link_exists(BRIDGE) and ip("link", "del", BRIDGE).returncode != 0:
        supervise.warn(f"could not delete {BRIDGE}")
    # libcni's result cache (containerd 1.6 cannot move it): only our network's entries
    for entry in CNI_RESULTS_DIR.glob(f"{CNI_NETWORK}-*"):
        entry.unlink(missing_ok=True)
