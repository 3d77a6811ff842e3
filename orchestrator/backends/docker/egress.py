"""A Docker sandbox's egress: our proxy, served on the sandbox's own 127.0.0.1 (``netns.listen_in_netns``).

The sandbox keeps ``--network none``: no interface but loopback, no route, no name server. The proxy's
listening socket is made inside that namespace, so the sandbox reaches it at 127.0.0.1:``EGRESS_PORT`` and
nothing else at all; the proxy resolves names and connects from the controller's own namespace. One
listener per sandbox: every connection on it is that sandbox's (its route), whatever address it comes from.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Final

from orchestrator.backends._support.netns import NetnsError, listen_in_netns
from orchestrator.domain.errors import SandboxUnavailable
from orchestrator.egress import EgressProxy, EgressRoute, ListenerHandle
from orchestrator.profiles import ResolvedProfile

EGRESS_PORT: Final = 3128  # on the sandbox's own loopback: no other process of the host is reachable there


def egress_problem(profile: ResolvedProfile, *, sees_sandboxes: bool) -> str | None:
    """Why sandboxes of ``profile`` cannot have the proxy as their route here (None: they can)."""
    if profile.runtime == "runsc":
        return (
            "a gVisor sandbox has its own network stack (the engine runs runsc with --network=none): the egress "
            "proxy cannot be its route in this release; use a runc profile for egress"
        )
    if not sees_sandboxes:
        return "egress needs a local engine whose sandboxes this process can see (their network namespaces)"
    if os.geteuid() != 0:
        return "egress needs root (CAP_SYS_ADMIN) to open the proxy inside a sandbox's network namespace"
    return None


@dataclass
class SandboxEgress:
    """The proxy serving one sandbox: opened once its init waits, closed before the sandbox is removed."""

    proxy: EgressProxy
    listener: ListenerHandle

    @classmethod
    async def open(cls, name: str, init_pidfd: int | None, route: EgressRoute, proxy: EgressProxy) -> SandboxEgress:
        if init_pidfd is None:
            raise SandboxUnavailable(
                f"the init of sandbox {name} is not visible to this process: its network cannot be reached",
                details={"sandbox": name},
            )
        try:
            sock = await asyncio.to_thread(listen_in_netns, init_pidfd, EGRESS_PORT)
        except NetnsError as exc:
            raise SandboxUnavailable(
                f"the egress proxy could not be opened in sandbox {name}: {exc.strerror or exc}",
                details={"sandbox": name},
            ) from exc
        try:
            listener = await proxy.add_listener(sock, lambda _peer: route)
        except BaseException:
            sock.close()
            raise
        return cls(proxy, listener)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{EGRESS_PORT}"

    async def close(self) -> None:
        """Stop serving the sandbox; returns once every connection of it ended and was recorded."""
        await self.proxy.close_listener(self.listener)
