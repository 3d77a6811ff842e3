"""Is it up? etcd's health, the API server's readiness, the node's Ready condition, the default
ServiceAccount: HTTPS requests on 127.0.0.1 with the cluster's own certificates (standard library only, so
``status`` needs no client library and answers in milliseconds).
"""

from __future__ import annotations

import http.client
import json
import ssl
import subprocess
from pathlib import Path
from typing import Any

from .settings import API_PORT, ETCD_PORT, LOOPBACK, NODE_NAME, Settings

TIMEOUT_S = 3.0


def _context(ca: Path, cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca))
    context.load_cert_chain(str(cert), str(key))
    return context


def https_get(port: int, path: str, ca: Path, cert: Path, key: Path, timeout: float = TIMEOUT_S) -> tuple[int, bytes]:
    """GET https://127.0.0.1:<port><path> with a client certificate: (status, body). Raises OSError."""
    conn = http.client.HTTPSConnection(LOOPBACK, port, context=_context(ca, cert, key), timeout=timeout)
    try:
        conn.request("GET", path, headers={"Accept": "application/json"})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def etcd_healthy(s: Settings) -> bool:
    """GET /health with the API server's etcd client certificate: {"health":"true"}."""
    try:
        status, body = https_get(ETCD_PORT, "/health", s.ca_cert, s.cert("etcd-client"), s.key("etcd-client"))
        return status == 200 and json.loads(body).get("health") == "true"
    except (OSError, ValueError):
        return False


def api_get(s: Settings, path: str, timeout: float = TIMEOUT_S) -> tuple[int, bytes]:
    """A GET on the API server as the cluster's admin."""
    return https_get(API_PORT, path, s.ca_cert, s.cert("admin"), s.key("admin"), timeout)


def api_ready(s: Settings) -> bool:
    try:
        return api_get(s, "/readyz", timeout=2.0)[0] == 200
    except OSError:
        return False


def node_condition(node: dict[str, Any], kind: str = "Ready") -> str | None:
    for condition in node.get("status", {}).get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status"))
    return None


def node_ready(s: Settings) -> bool:
    try:
        status, body = api_get(s, f"/api/v1/nodes/{NODE_NAME}")
        return status == 200 and node_condition(json.loads(body)) == "True"
    except (OSError, ValueError):
        return False


def no_pods(s: Settings) -> bool:
    """True when the API server says there is no pod in any namespace."""
    try:
        status, body = api_get(s, "/api/v1/pods?limit=1")
        return status == 200 and not json.loads(body).get("items")
    except (OSError, ValueError):
        return False


def default_service_account(s: Settings) -> bool:
    """The controller-manager made the default namespace's ServiceAccount (pods there wait for it)."""
    try:
        return api_get(s, "/api/v1/namespaces/default/serviceaccounts/default")[0] == 200
    except OSError:
        return False


def containerd_answers(s: Settings) -> bool:
    try:
        proc = subprocess.run(
            ["ctr", "--address", str(s.containerd_socket), "version"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0
