"""A backend's one client of its engine or API server: made lazily, once, under a lock, off the event loop.

Connecting blocks (a socket's API version negotiation, a kubeconfig read and its TLS set-up), so it runs on
the backend's own pool (``BlockingCalls``), never on the event loop. ``prepare`` starts it early, as a
speed-up only; concurrent first calls wait for the one connection under way. Once the backend is closed no
client is made any more, and one that was being made meanwhile is closed by its maker (nobody else would).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from orchestrator.backends._support.blocking import BlockingCalls

C = TypeVar("C")


class ClientClosed(Exception):
    """The backend was closed: its client is not made (again)."""


class LazyClient(Generic[C]):
    """``connect()`` makes the client (blocking); ``close(client)`` closes it."""

    def __init__(self, connect: Callable[[], C], close: Callable[[C], None], calls: BlockingCalls) -> None:
        self._connect = connect
        self._close = close
        self._calls = calls
        self._connecting = threading.Lock()  # one connection at a time: held while it is made
        self._state = threading.Lock()  # the client and the closed flag: held for an instant only
        self._client: C | None = None
        self._closed = False

    @property
    def current(self) -> C | None:
        """The client, if it was made (never waits)."""
        return self._client

    @property
    def closed(self) -> bool:
        return self._closed

    def connect(self) -> C:
        """The client, made now if it was not yet: blocks, so only on a backend thread."""
        with self._connecting:
            client = self._client
            if client is not None:
                return client
            if self._closed:
                raise ClientClosed
            made = self._connect()
            with self._state:
                closed = self._closed
                if not closed:
                    self._client = made
            if closed:  # closed while connecting: nobody would close it later
                self._close(made)
                raise ClientClosed
            return made

    async def get(self) -> C:
        """The client; the first call connects on the backend's pool. ClientClosed once closed."""
        if self._closed:
            raise ClientClosed
        client = self._client
        if client is not None:
            return client
        return await self._calls.call(self.connect)

    def prepare(self, quiet: tuple[type[Exception], ...], then: Callable[[C], object] | None = None) -> None:
        """Begin connecting in the background, then ``then(client)`` (what the first call would otherwise ask
        for). A speed-up only: never raises; ``quiet`` errors are left for the first real call to report."""
        if self._client is not None or self._closed:
            return

        def run() -> None:
            with contextlib.suppress(ClientClosed, *quiet):
                client = self.connect()
                if then is not None:
                    then(client)

        self._calls.pool().submit(run)

    def detach(self) -> C | None:
        """No client from now on (one made meanwhile is closed by its maker); the one made, if any, is handed
        to the caller to close once nothing uses it any more (a backend's last calls on its way out)."""
        with self._state:
            self._closed = True
            client, self._client = self._client, None
        return client

    def close(self) -> None:
        """No client from now on; the one made, if any, is closed (never waits for a connection under way)."""
        client = self.detach()
        if client is not None:
            self._close(client)
