"""Egress for sandbox pods: one listener of the egress proxy for all of this backend's pods, each connection
routed by the pod's IP to its run's allowlist.

The pod's only route is to that listener: the chart's NetworkPolicy lets pods of allowlist profiles (their
label ``LABEL_EGRESS``) reach the controller's pods on the proxy's port and nothing else, and pods have no
DNS (``dnsPolicy: None``). Pods hold no capability: none can send from another pod's address. A pod's route
is registered once its IP is known and before its command is launched, and dropped (its connections closed
and recorded) before the pod is deleted, so an IP reused by a later pod never inherits it.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass
from typing import Final

from orchestrator.backends._support.netns import NetnsError, listen_in_netns_file
from orchestrator.backends.kubernetes.settings import EgressListener
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.egress import EgressProxy, EgressRoute, ListenerHandle

LABEL_EGRESS: Final = "org.sandbox-orchestrator.egress"  # "proxy" on pods whose one route is the egress proxy


@dataclass
class _Open:
    proxy: EgressProxy
    listener: ListenerHandle


class PodEgress:
    """The shared listener (made at the first run that needs it) and the routes of the pods being served."""

    def __init__(self, settings: EgressListener | None) -> None:
        self.settings = settings
        self._routes: dict[str, EgressRoute] = {}
        self._open: _Open | None = None
        self._lock = asyncio.Lock()

    def problem(self) -> str | None:
        """Why pods cannot have the proxy as their route as configured (None: they can)."""
        if self.settings is None:
            return "the cluster has no egress proxy configured (backend.kubernetes.egress)"
        if self._address() is None:
            return "backend.kubernetes.egress names no address pods reach the proxy at (address or address_env)"
        if self.settings.netns is not None and os.geteuid() != 0:
            return "backend.kubernetes.egress.netns needs root (CAP_SYS_ADMIN) to listen in that namespace"
        return None

    def _address(self) -> str | None:
        settings = self.settings
        if settings is None:
            return None
        if settings.address_env is not None:
            return os.environ.get(settings.address_env) or None
        if settings.address is not None:
            return settings.address
        host = settings.listen.rsplit(":", 1)[0]
        return None if host == "0.0.0.0" else host  # noqa: S104 - the config's wildcard, not a bind here

    async def open(self, proxy: EgressProxy, pod: str, ip: str, route: EgressRoute) -> str:
        """Serve ``route`` to the pod at ``ip``; the proxy URL the pod's command is given."""
        address = self._address()
        if self.settings is None or address is None:
            raise SandboxUnavailable(f"no egress proxy for pod {pod}: {self.problem()}", details={"sandbox": pod})
        await self._listen(proxy, pod)
        if ip in self._routes:  # an address still routed: never handed to another run
            raise SandboxUnavailable(f"pod {pod}'s address {ip} is still another run's", details={"sandbox": pod})
        self._routes[ip] = route
        return f"http://{address}:{self.settings.listen.rsplit(':', 1)[1]}"

    async def _listen(self, proxy: EgressProxy, pod: str) -> None:
        assert self.settings is not None
        async with self._lock:
            if self._open is not None:  # one proxy per orchestrator, one orchestrator per backend
                return
            host, port = self.settings.listen.rsplit(":", 1)
            try:
                if self.settings.netns is not None:
                    sock = await asyncio.to_thread(listen_in_netns_file, self.settings.netns, int(port), host)
                else:
                    sock = socket.create_server((host, int(port)), reuse_port=False)
                    sock.setblocking(False)
            except (NetnsError, OSError) as exc:
                raise SandboxUnavailable(
                    f"the egress proxy cannot listen on {self.settings.listen}: {exc}", details={"sandbox": pod}
                ) from exc
            # a pod's route is in place before its command is launched: a peer without one is closed at once
            listener = await proxy.add_listener(sock, self._routes.get)
            self._open = _Open(proxy, listener)

    async def close(self, ip: str) -> None:
        """Stop serving the pod at ``ip``: no new connection is routed; its open ones end and are recorded."""
        route = self._routes.pop(ip, None)
        if route is not None and self._open is not None:
            await self._open.proxy.close_route(route)
