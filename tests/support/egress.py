"""Hosts for egress tests, in a network namespace the test run makes and removes itself (never another address).

``egress_net()`` makes the namespace, a veth pair to it (the host's end 10.231.N.1, the far end 10.231.N.2),
a self-signed certificate for the TLS server's names, and starts ``tests/support/egress_servers.py`` inside: HTTP
on 8080 and TLS on 8443. Names resolve through the proxy's static hosts (``egress.hosts``), never DNS.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SERVERS = Path(__file__).resolve().parent / "egress_servers.py"
HTTP_PORT, TLS_PORT = 8080, 8443

# What a sandbox runs, from its workspace (the CA file beside it): a fetch through the proxy, and a probe of
# what it could reach without it (the far host directly, a name by DNS).
FETCH = """
import json, ssl, sys, urllib.request
url = sys.argv[1]
# the TLS server's certificate is the test's own, given in the workspace
context = ssl.create_default_context(cafile="/workspace/ca.pem") if url.startswith("https") else None
try:
    body = urllib.request.urlopen(url, timeout=10, context=context).read()
    print(json.dumps({"ok": True, "body": body.decode(errors="replace")[:200], "size": len(body)}))
except Exception as exc:  # the test reads what failed
    print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}))
    sys.exit(3)
"""

PROBE = """
import errno, json, socket, sys
out = {}
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
    out["direct"] = "connected"
except OSError as exc:
    out["direct"] = errno.errorcode.get(exc.errno or 0, str(exc))
try:
    socket.getaddrinfo("web.test", 8080)
    out["dns"] = "resolved"
except OSError as exc:
    out["dns"] = type(exc).__name__
print(json.dumps(out))
"""
NAMES = ("web.test", "tls.test", "other.test")  # all served by the one far host


@dataclass(frozen=True)
class EgressNet:
    namespace: str
    host_ip: str  # the host's end of the veth
    far_ip: str  # where the servers listen
    ca_pem: str  # the TLS server's certificate (self-signed): what a client trusts

    @property
    def hosts(self) -> dict[str, str]:
        """``egress.hosts`` for the proxy: every test name to the far host."""
        return dict.fromkeys(NAMES, self.far_ip)


def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


def _certificate(directory: Path) -> tuple[Path, Path]:
    cert, key = directory / "server.pem", directory / "server.key"
    _run(
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=tls.test",
        "-addext", "subjectAltName=DNS:tls.test,DNS:web.test",
        "-keyout", str(key), "-out", str(cert),
    )  # fmt: skip
    return cert, key


@contextlib.contextmanager
def egress_net(tmp: Path) -> Iterator[EgressNet]:
    """The namespace, its servers and their certificate; everything removed afterwards."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("openssl") is None:
        pytest.skip("egress tests need root, iproute2 and openssl (make setup, as root)")
    tag = f"{os.getpid() % 10000}{random.randrange(100, 1000)}"
    net = random.randrange(1, 250)
    namespace, host_end, far_end = f"so-eg-{tag}", f"soegh{tag}", f"soegn{tag}"
    host_ip, far_ip = f"10.231.{net}.1", f"10.231.{net}.2"
    cert, key = _certificate(tmp)
    server = None
    try:
        _run("ip", "netns", "add", namespace)
        _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", far_end)
        _run("ip", "link", "set", far_end, "netns", namespace)
        _run("ip", "addr", "add", f"{host_ip}/24", "dev", host_end)
        _run("ip", "link", "set", host_end, "up")
        inside = ("ip", "netns", "exec", namespace)
        _run(*inside, "ip", "addr", "add", f"{far_ip}/24", "dev", far_end)
        _run(*inside, "ip", "link", "set", far_end, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        server = subprocess.Popen(
            [*inside, sys.executable, str(SERVERS), far_ip, str(HTTP_PORT), str(TLS_PORT), str(cert), str(key)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert server.stdout is not None
        if server.stdout.readline().strip() != b"ready":
            raise RuntimeError("the egress test servers did not start")
        yield EgressNet(namespace, host_ip, far_ip, cert.read_text())
    finally:
        if server is not None:
            server.kill()
            server.wait(timeout=10)
        subprocess.run(["ip", "link", "del", host_end], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
