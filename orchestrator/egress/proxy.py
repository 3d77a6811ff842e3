"""The egress proxy: the only way out of a sandbox, one ``host:port`` of its allowlist at a time.

A sandbox's tools reach it through ``HTTP_PROXY``/``HTTPS_PROXY``; it speaks the two forms those tools send:

* ``CONNECT host:port`` -- a tunnel (TLS is not terminated). Once the upstream answers, the first bytes the
  sandbox sends are looked at: a TLS ClientHello naming another server (SNI) than the CONNECT host ends the
  tunnel (``sni_mismatch``), so an allowed address cannot front for other names.
* ``GET http://host[:port]/path HTTP/1.1`` (absolute form) -- forwarded in origin form, ``Proxy-*`` and
  hop-by-hop headers dropped, ``Connection: close`` forced: one request per connection, so every request is
  checked.

Order of checks, each a refusal of its own kind: parse (bounded: 16 KiB, 100 headers, the handshake timeout)
-> allowlist -> resolve (the proxy resolves; denied addresses are never connected to) -> connect. Then both
directions are spliced until both ended (a half-close is passed on with ``shutdown(SHUT_WR)``), with an idle
timeout. The data phase runs on the loop's callbacks, no task per direction: with ``os.splice`` (Linux) the
bytes go socket -> pipe -> socket without entering Python, else through a user-space buffer.

Every connection of a routed peer ends in exactly one :class:`ConnectionRecord` (after it ended: bytes and
duration final). Nothing a sandbox sends beyond the method and the host:port is ever logged or recorded:
paths, queries, header values and payloads may hold secrets.

Byte counts: ``bytes_up`` is what the proxy wrote to the upstream, ``bytes_down`` what it wrote to the sandbox,
after its own handshake: for a tunnel, the tunnel's payload exactly (neither the CONNECT request nor the
``200`` answer); for plain HTTP, the forwarded (rewritten) request head and the body, and the whole response.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import ipaddress
import itertools
import logging
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from orchestrator.domain.hosts import is_ip
from orchestrator.egress.allowlist import Allowlist, parse_authority
from orchestrator.egress.resolver import EgressRefused, Resolver
from orchestrator.egress.tls import MAX_CLIENT_HELLO, MAX_RAW, HelloState, scan_client_hello

__all__ = ["ConnectionRecord", "EgressProxy", "EgressRefused", "EgressRoute", "ListenerHandle"]

logger = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024  # request line + headers, final CRLF CRLF included
MAX_HEADERS = 100
MAX_DETAIL = 200
# The splice pipe of one direction. Big pipes mean fewer trips through the loop (measured on loopback: 1 MiB ~10%
# faster than 256 KiB, ~25% faster than the 64 KiB default), but an unprivileged user's pipes share a quota
# (fs.pipe-user-pages-soft, 64 MiB by default; past it the kernel gives every new pipe of that user -- not only
# ours -- a page or two). So pipes are enlarged only while the proxy's enlarged pipes stay within PIPE_BUDGET
# (16 busy tunnels at 1 MiB); the others keep the default size.
PIPE_SIZE = 1024 * 1024
PIPE_BUDGET = 32 * 1024 * 1024
COPY_CHUNK = 256 * 1024  # the user-space path's buffer, per direction
BURST = 8  # transfers per readiness callback before yielding to the other connections
ACCEPT_BURST = 32
ACCEPT_PAUSE_S = 0.5  # after an accept error such as EMFILE, instead of spinning on a ready listener
ROUTE_POLL_S = 0.05

_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}")
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-connection", b"te", b"trailer", b"upgrade"})
# what a Connection header may not strip: the body's framing and the host
_NEVER_STRIPPED = frozenset({b"host", b"content-length", b"transfer-encoding"})
_STATUS = {
    "bad_request": 400,
    "not_allowed": 403,
    "address": 403,
    "dns": 502,
    "connect_failed": 502,
    "limit": 503,
    "closed": 503,
}
_REASON = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
_SPLICE_FLAGS = getattr(os, "SPLICE_F_MOVE", 0) | getattr(os, "SPLICE_F_NONBLOCK", 0)
_CONNECTED = b"HTTP/1.1 200 Connection established\r\n\r\n"


def _bounded(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


@dataclass(frozen=True)
class ConnectionRecord:
    """One connection attempt of a sandbox, as it ended. Never a path, query, header value or payload."""

    execution_id: str
    host: str  # as asked (normalised): the CONNECT target or the absolute URL's host; "" when unparseable
    port: int  # 0 when unparseable
    method: str  # "CONNECT", "GET", ...; "" when unparseable
    allowed: bool  # the allowlist allowed it AND the upstream connection was made (and it was not refused later)
    refusal: str | None  # EgressRefused.kind when refused or failed, else None
    detail: str | None  # a short reason (bounded, no secrets)
    address: str | None  # the IP actually connected to
    matched: str | None  # the allowlist pattern text that allowed it
    sni: str | None  # the TLS server name seen in a CONNECT tunnel, if any
    bytes_up: int  # sandbox -> upstream, after the proxy's handshake (see the module's docstring)
    bytes_down: int  # upstream -> sandbox
    started_at: datetime  # UTC
    duration_ms: int

    def as_dict(self) -> dict[str, str | int | bool | None]:
        """JSON-ready (``started_at`` in ISO 8601)."""
        return {
            "execution_id": self.execution_id,
            "host": self.host,
            "port": self.port,
            "method": self.method,
            "allowed": self.allowed,
            "refusal": self.refusal,
            "detail": self.detail,
            "address": self.address,
            "matched": self.matched,
            "sni": self.sni,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "started_at": self.started_at.isoformat(),
            "duration_ms": self.duration_ms,
        }


@dataclass
class EgressRoute:
    """One execution's egress: made and kept by the caller, who reads ``refused`` after the run.

    ``refused`` keeps at most ``max_refused`` records (a sandbox could open refused connections in a loop);
    the ones left out are counted in ``refused_dropped``. ``on_record`` sees every one.
    """

    execution_id: str
    allowlist: Allowlist
    refused: list[ConnectionRecord] = field(default_factory=list)
    max_refused: int = 1000
    refused_dropped: int = 0
    #: connections of this run open at once (past it: refused, ``limit``); on a shared listener this is what
    #: keeps one run from taking every other run's share
    max_connections: int = 32
    open: int = 0  # counted by the proxy

    def full(self) -> str | None:
        """Why this run may open no more connections now (None: it may)."""
        if self.open >= self.max_connections:
            return f"more than {self.max_connections} open connections of this run"
        return None


@dataclass(frozen=True)
class ListenerHandle:
    """A listener of :meth:`EgressProxy.add_listener`: where it listens, and the key to close it."""

    id: int
    host: str
    port: int


class _HttpRefusal(EgressRefused):
    """A refusal answered with a status of its own (408, 431) rather than its kind's."""

    def __init__(self, kind: str, detail: str, status: int) -> None:
        super().__init__(kind, detail)
        self.status = status


class _Ended(Exception):
    """A tunnel that ended otherwise than by both sides closing (idle, a reset): not a refusal."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass
class _Request:
    method: bytes
    version: bytes
    target_host: str
    target_port: int
    path: bytes  # origin form (plain HTTP only); never logged
    headers: list[tuple[bytes, bytes]]

    @property
    def connect(self) -> bool:
        return self.method == b"CONNECT"


def _authority(host: str, port: int, default_port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return shown if port == default_port else f"{shown}:{port}"


class _Pump:
    """One direction of a tunnel, driven by readiness callbacks: ``src`` -> ``dst``.

    It reads only when everything read before was written (the pipe or the buffer is empty), so a slow reader
    stalls its writer through TCP, never through our memory. ``initial`` bytes (a forwarded request head, what
    came after the CONNECT head) are written first. With ``inspect``, the first bytes are held until they are
    known not to be a TLS ClientHello, or a ClientHello whose server name is the CONNECT host.
    """

    def __init__(
        self,
        conn: _Connection,
        src: socket.socket,
        dst: socket.socket,
        initial: bytes,
        *,
        inspect: bool,
        use_splice: bool,
    ) -> None:
        self._conn = conn
        self._loop = conn.loop
        self._src = src
        self._dst = dst
        self._src_fd = src.fileno()
        self._dst_fd = dst.fileno()
        self._pending = memoryview(initial)
        self._hello: bytearray | None = bytearray(initial) if inspect else None
        if inspect:
            self._pending = memoryview(b"")
        self._hello_timer: asyncio.TimerHandle | None = None
        self._pipe: tuple[int, int] | None = None
        self._pipe_grant = 0  # bytes of the proxy's PIPE_BUDGET this pump's pipe holds
        self._in_pipe = 0
        self._buf: bytearray | None = None
        self._use_splice = use_splice
        self._reading = False
        self._writing = False
        self._eof = False
        self.closed = False
        self.ended = False
        self.count = 0

    # -- lifecycle
    def start(self) -> None:
        if self._hello:
            self._inspect()
        elif self._pending:
            self._on_writable()
        else:
            self._want_read()

    def close(self) -> None:
        """Stop (idempotent): unregister from the loop while the fds are still open, then close the pipe."""
        if self.closed:
            return
        self.closed = True
        self._cancel_hello_timer()
        if self._reading:
            self._loop.remove_reader(self._src_fd)
            self._reading = False
        if self._writing:
            self._loop.remove_writer(self._dst_fd)
            self._writing = False
        if self._pipe is not None:
            for fd in self._pipe:
                os.close(fd)
            self._pipe = None
            self._conn.proxy.pipe_bytes -= self._pipe_grant
            self._pipe_grant = 0

    # -- readiness
    def _want_read(self) -> None:
        if self._writing:
            self._loop.remove_writer(self._dst_fd)
            self._writing = False
        if not self._reading:
            self._loop.add_reader(self._src_fd, self._on_readable)
            self._reading = True

    def _want_write(self) -> None:
        if self._reading:
            self._loop.remove_reader(self._src_fd)
            self._reading = False
        if not self._writing:
            self._loop.add_writer(self._dst_fd, self._on_writable)
            self._writing = True

    def _on_readable(self) -> None:
        if self.closed:
            return
        try:
            if self._hello is not None:
                self._read_hello()
                return
            for _ in range(BURST):
                if self._read() == 0:
                    self._eof = True
                    self._end()
                    return
                if not self._flush():
                    self._want_write()
                    return
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._conn.pump_failed(self, e)

    def _on_writable(self) -> None:
        if self.closed:
            return
        try:
            if not self._flush():
                self._want_write()
                return
        except OSError as e:
            self._conn.pump_failed(self, e)
            return
        if self._eof:
            self._end()
        else:
            self._want_read()

    # -- moving bytes
    def _read(self) -> int:
        """Fill the pipe (or the buffer) from ``src``: the byte count, 0 at EOF; BlockingIOError when none."""
        if self._use_splice:
            if self._pipe is None:
                self._pipe = self._open_pipe()
            try:
                n = os.splice(self._src_fd, self._pipe[1], PIPE_SIZE, flags=_SPLICE_FLAGS)
            except OSError as e:
                if e.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
                logger.debug("egress: splice unavailable (%s), copying through user space", e)
                self._use_splice = False
                return self._read()
            self._in_pipe = n
            return n
        if self._buf is None:
            self._buf = bytearray(COPY_CHUNK)
        n = self._src.recv_into(self._buf)
        self._pending = memoryview(self._buf)[:n]
        return n

    def _flush(self) -> bool:
        """Write what is held (initial bytes, then the pipe or buffer) to ``dst``; False when ``dst`` is full."""
        try:
            while self._pending:
                sent = self._dst.send(self._pending)
                self._pending = self._pending[sent:]
                self._moved(sent)
            while self._in_pipe:
                assert self._pipe is not None
                sent = os.splice(self._pipe[0], self._dst_fd, self._in_pipe, flags=_SPLICE_FLAGS)
                self._in_pipe -= sent
                self._moved(sent)
        except (BlockingIOError, InterruptedError):
            return False
        return True

    def _moved(self, n: int) -> None:
        self.count += n
        self._conn.touch()

    def _end(self) -> None:
        """``src`` ended and everything was written: pass the half-close on."""
        if self._reading:
            self._loop.remove_reader(self._src_fd)
            self._reading = False
        if self._writing:
            self._loop.remove_writer(self._dst_fd)
            self._writing = False
        with contextlib.suppress(OSError):
            self._dst.shutdown(socket.SHUT_WR)
        self.ended = True
        self._conn.pump_ended()

    # -- the first flight of a tunnel
    def _read_hello(self) -> None:
        assert self._hello is not None
        chunk = self._src.recv(MAX_RAW + 1 - len(self._hello))
        if not chunk:  # ended before a verdict: what came is passed on, then the EOF
            self._eof = True
            self._release()
            return
        self._hello += chunk
        self._conn.touch()
        self._inspect()

    def _inspect(self) -> None:
        """The tunnel's first flight decides (fail closed): a TLS one must be a whole ClientHello naming the
        CONNECT host (none at all only for an IP literal); plain HTTP is refused (it goes through the absolute
        form, where its Host is checked); anything else (ssh, a protocol with no name in it) is tunnelled."""
        assert self._hello is not None
        if self._hello[0] != 0x16:
            kind = http_first_line(bytes(self._hello))
            if kind == "more" and len(self._hello) < MAX_RAW:
                self._wait_for_more()
            elif kind != "http":  # "other", or a line longer than any server takes as a request line
                self._release()
            else:
                self._fail(EgressRefused("bad_request", PLAIN_HTTP_IN_TUNNEL))
            return
        scan = scan_client_hello(self._hello)
        if scan.state is HelloState.MORE:
            self._wait_for_more()
            return
        if scan.state is HelloState.TOO_LARGE:
            self._fail(EgressRefused("bad_request", f"TLS ClientHello over {MAX_CLIENT_HELLO // 1024} KiB"))
            return
        if scan.state is not HelloState.HELLO:  # what the proxy cannot read, it cannot vouch for
            self._fail(EgressRefused("sni_mismatch", "a TLS first flight that is not a ClientHello the proxy reads"))
            return
        wanted = self._conn.host
        name = scan.server_name
        if name is None:
            if not is_ip(wanted):
                self._fail(EgressRefused("sni_mismatch", f"a TLS ClientHello without a server name for {wanted!r}"))
                return
        else:
            self._conn.sni = name
            if name.lower().removesuffix(".") != wanted:
                detail = f"TLS server name {name[:255]!r} is not the CONNECT host {wanted!r}"
                self._fail(EgressRefused("sni_mismatch", detail))
                return
        self._release()

    def _wait_for_more(self) -> None:
        if self._hello_timer is None:
            timeout = self._conn.proxy.handshake_timeout_s
            self._hello_timer = self._loop.call_later(timeout, self._hello_timed_out)
        self._want_read()

    def _release(self) -> None:
        """The held first bytes may go: write them, then tunnel."""
        assert self._hello is not None
        self._cancel_hello_timer()
        self._pending = memoryview(bytes(self._hello))
        self._hello = None
        self._on_writable()

    def _open_pipe(self) -> tuple[int, int]:
        read_fd, write_fd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        proxy = self._conn.proxy
        if proxy.pipe_bytes + PIPE_SIZE <= PIPE_BUDGET:
            # refused over the user's quota, or with pipe-max-size lowered: the default size works too
            with contextlib.suppress(OSError):
                self._pipe_grant = fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
            proxy.pipe_bytes += self._pipe_grant
        return read_fd, write_fd

    def _hello_timed_out(self) -> None:
        self._hello_timer = None
        timeout = self._conn.proxy.handshake_timeout_s
        self._fail(EgressRefused("bad_request", f"TLS ClientHello incomplete after {timeout:g}s"))

    def _cancel_hello_timer(self) -> None:
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None

    def _fail(self, error: Exception) -> None:
        self._cancel_hello_timer()
        self._conn.pump_failed(self, error)


class _Connection:
    """One accepted connection: its handshake (a task), its tunnel (callbacks), and its one record."""

    def __init__(
        self, proxy: EgressProxy, listener: _Listener, client: socket.socket, peer: str, route: EgressRoute | None
    ) -> None:
        self.proxy = proxy
        self.listener = listener
        self.loop = asyncio.get_running_loop()
        self.client = client
        self.peer = peer
        self.route = route
        self.started_at = datetime.now(UTC)
        self._t0 = self.loop.time()
        self.host = ""
        self.port = 0
        self.method = ""
        self.allowed = False
        self.refusal: str | None = None
        self.detail: str | None = None
        self.address: str | None = None
        self.matched: str | None = None
        self.sni: str | None = None
        self.upstream: socket.socket | None = None
        self.task: asyncio.Task[None] | None = None
        self._answered = False
        self._pumps: list[_Pump] = []
        self._done: asyncio.Future[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last = self._t0
        self._finished = False
        self._counted: EgressRoute | None = None  # the route whose open count holds this connection

    # -- the handler task
    async def run(self) -> None:
        try:
            if self.route is None:
                route = await self._wait_for_route()
                if route is None:
                    logger.debug("egress: no route for peer %s; closed", self.peer)
                    return
                self.route = route
                full = route.full()
                if full is not None:
                    raise EgressRefused("limit", full)
                self.count_in(route)
            await self._handle(self.route)
        except EgressRefused as refusal:
            self._refuse(refusal)
        except _Ended as ended:
            self.detail = _bounded(ended.detail)
        except asyncio.CancelledError:
            if self.route is None:
                raise  # still waiting for its route: closed without an answer or a record
            if self.allowed:
                self.detail = "closed by the proxy (listener closed)"
            else:
                self._refuse(EgressRefused("closed", "the listener closed before the connection was through"))
            raise
        except OSError as e:
            what = f"connection error: {e.strerror or type(e).__name__}"
            if self.allowed:
                self.detail = what
            else:
                self._refuse(EgressRefused("bad_request", what))
        except Exception:
            logger.exception("egress: connection from %s failed", self.peer)
            if self.allowed:
                self.detail = "proxy error"
            else:
                self._refuse(EgressRefused("closed", "proxy error"))
        finally:
            self.finish()

    async def _wait_for_route(self) -> EgressRoute | None:
        deadline = self.loop.time() + self.listener.wait_for_route_s
        while (remaining := deadline - self.loop.time()) > 0:
            await asyncio.sleep(min(ROUTE_POLL_S, remaining))
            route = self.listener.route(self.peer)
            if route is not None:
                return route
        return None

    async def _handle(self, route: EgressRoute) -> None:
        try:
            async with asyncio.timeout(self.proxy.handshake_timeout_s):
                head, rest = await self._read_head()
        except TimeoutError:
            raise _HttpRefusal(
                "bad_request", f"no complete request within {self.proxy.handshake_timeout_s:g}s", 408
            ) from None
        except OSError as e:
            raise EgressRefused("bad_request", f"connection error: {e.strerror or type(e).__name__}") from None
        request = self._parse(head)
        pattern = route.allowlist.match(self.host, self.port)
        shown = _authority(self.host, self.port, 0)
        if pattern is None:
            raise EgressRefused("not_allowed", f"{shown} is not in the egress allowlist")
        self.matched = pattern.text
        addresses = await self.proxy.resolver.resolve(self.host, self.port)
        self.upstream, self.address = await self._connect(addresses)
        self.allowed = True
        if request.connect:
            await self._send(_CONNECTED)
            self._answered = True
            await self._tunnel(rest, inspect=True)
        else:
            self._answered = True  # from here on the upstream answers
            await self._tunnel(self._forward_head(request) + rest, inspect=False)

    async def _read_head(self) -> tuple[bytes, bytes]:
        buf = bytearray()
        while True:
            chunk = await self.loop.sock_recv(self.client, MAX_HEAD + 1 - len(buf))
            if not chunk:
                raise EgressRefused("bad_request", "closed before a complete request" if buf else "closed unused")
            start = max(0, len(buf) - 3)
            buf += chunk
            end = buf.find(b"\r\n\r\n", start)
            if end >= 0 and end + 4 <= MAX_HEAD:
                return bytes(buf[: end + 4]), bytes(buf[end + 4 :])
            if end >= 0 or len(buf) > MAX_HEAD:
                raise _HttpRefusal("bad_request", f"request head over {MAX_HEAD // 1024} KiB", 431)

    def _parse(self, head: bytes) -> _Request:
        """Parse a request head, setting method, host and port as soon as each is known (for the record)."""
        lines = head[:-4].split(b"\r\n")
        while lines and not lines[0]:  # empty lines before the request line are allowed (RFC 9112 2.2)
            lines.pop(0)
        if not lines:
            raise EgressRefused("bad_request", "empty request")
        parts = lines[0].split(b" ")
        if len(parts) != 3:
            raise EgressRefused("bad_request", "malformed request line")
        method, target, version = parts
        if not _TOKEN.fullmatch(method):
            raise EgressRefused("bad_request", "malformed method")
        self.method = method.decode("ascii")
        if version not in (b"HTTP/1.1", b"HTTP/1.0"):
            raise EgressRefused("bad_request", "unsupported HTTP version")
        if not target or not target.isascii() or any(b <= 0x20 or b == 0x7F for b in target):
            raise EgressRefused("bad_request", "malformed request target")
        path = b""
        if method == b"CONNECT":
            try:
                self.host, self.port = parse_authority(target.decode("ascii"), None)
            except ValueError as e:
                raise EgressRefused("bad_request", f"bad CONNECT target: {e}") from None
        else:
            self.host, self.port, path = _absolute_target(target.decode("ascii"))
        if len(lines) - 1 > MAX_HEADERS:
            raise _HttpRefusal("bad_request", f"more than {MAX_HEADERS} headers", 431)
        headers = [_header(line) for line in lines[1:]]
        if method != b"CONNECT":
            _check_plain_headers(headers, self.host, self.port)
        return _Request(method, version, self.host, self.port, path, headers)

    def _forward_head(self, request: _Request) -> bytes:
        named = {
            token.strip().lower()
            for name, value in request.headers
            if name.lower() == b"connection"
            for token in value.split(b",")
        }
        named -= _NEVER_STRIPPED
        lines = [request.method + b" " + request.path + b" " + request.version]
        has_host = False
        for name, value in request.headers:
            lower = name.lower()
            if lower in _HOP_BY_HOP or lower.startswith(b"proxy-") or lower in named:
                continue
            has_host = has_host or lower == b"host"
            lines.append(name + b": " + value)
        if not has_host:
            lines.append(b"Host: " + _authority(request.target_host, request.target_port, 80).encode("ascii"))
        lines.append(b"Connection: close")
        return b"\r\n".join(lines) + b"\r\n\r\n"

    async def _connect(self, addresses: list[str]) -> tuple[socket.socket, str]:
        deadline = self.loop.time() + self.proxy.connect_timeout_s
        shown = _authority(self.host, self.port, 0)
        last = "no address"
        for address in addresses:
            sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                async with asyncio.timeout_at(deadline):
                    await self.loop.sock_connect(sock, (address, self.port))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except TimeoutError:
                sock.close()
                timeout = self.proxy.connect_timeout_s
                raise EgressRefused("connect_failed", f"{shown}: no connection within {timeout:g}s") from None
            except OSError as e:
                sock.close()
                last = f"{address}: {e.strerror or type(e).__name__}"
                continue
            except BaseException:
                sock.close()
                raise
            return sock, address
        raise EgressRefused("connect_failed", f"{shown}: {last}")

    async def _send(self, data: bytes) -> None:
        try:
            sent = self.client.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        if sent < len(data):
            async with asyncio.timeout(self.proxy.handshake_timeout_s):
                await self.loop.sock_sendall(self.client, data[sent:])

    async def _tunnel(self, up_initial: bytes, *, inspect: bool) -> None:
        assert self.upstream is not None
        self.client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._done = self.loop.create_future()
        use_splice = self.proxy.use_splice
        self._pumps = [
            _Pump(self, self.client, self.upstream, up_initial, inspect=inspect, use_splice=use_splice),
            _Pump(self, self.upstream, self.client, b"", inspect=False, use_splice=use_splice),
        ]
        self.touch()
        self._arm_idle()
        for pump in self._pumps:
            pump.start()
        await self._done

    # -- called by the pumps
    def touch(self) -> None:
        self._last = self.loop.time()

    def pump_ended(self) -> None:
        if all(pump.ended for pump in self._pumps) and self._done is not None and not self._done.done():
            self._done.set_result(None)

    def pump_failed(self, pump: _Pump, error: Exception) -> None:
        if self._done is None or self._done.done():
            return
        if isinstance(error, OSError):
            way = "sandbox->upstream" if pump is self._pumps[0] else "upstream->sandbox"
            error = _Ended(f"connection error ({way}): {error.strerror or type(error).__name__}")
        self._done.set_exception(error)

    def _arm_idle(self) -> None:
        self._idle_timer = self.loop.call_at(self._last + self.proxy.idle_timeout_s, self._check_idle)

    def _check_idle(self) -> None:
        if self._done is None or self._done.done():
            return
        if self.loop.time() - self._last >= self.proxy.idle_timeout_s:
            self._done.set_exception(_Ended(f"idle for {self.proxy.idle_timeout_s:g}s"))
        else:
            self._arm_idle()

    # -- the end
    def _refuse(self, refusal: EgressRefused) -> None:
        if self.refusal is None:
            self.refusal = refusal.kind
            self.detail = _bounded(refusal.detail)
        self.allowed = False
        if not self._answered:
            self._answered = True
            status = refusal.status if isinstance(refusal, _HttpRefusal) else _STATUS.get(refusal.kind, 502)
            body = f"egress refused ({refusal.kind}): {self.detail}\n".encode("ascii", "backslashreplace")
            head = (
                f"HTTP/1.1 {status} {_REASON.get(status, 'Error')}\r\nContent-Type: text/plain; charset=us-ascii\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode("ascii")
            with contextlib.suppress(OSError):  # best effort: a small answer fits any fresh socket's buffer
                self.client.send(head + body)

    def count_in(self, route: EgressRoute) -> None:
        """This connection is one of ``route``'s open ones until it finishes."""
        route.open += 1
        self._counted = route

    def refuse_now(self, refusal: EgressRefused) -> None:
        """Refuse before any handling (over the connection cap): answer, close, record."""
        self._refuse(refusal)
        self.finish()

    def finish(self) -> None:
        """Close everything and emit the record (once, whatever path got here)."""
        if self._finished:
            return
        self._finished = True
        if self._counted is not None:
            self._counted.open -= 1
            self._counted = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        for pump in self._pumps:
            pump.close()
        if self._done is not None and not self._done.done():
            self._done.cancel()
        for sock in (self.upstream, self.client):
            if sock is not None:
                sock.close()
        if self.route is not None:
            up = self._pumps[0].count if self._pumps else 0
            down = self._pumps[1].count if self._pumps else 0
            duration_ms = int((self.loop.time() - self._t0) * 1000)
            record = ConnectionRecord(
                execution_id=self.route.execution_id,
                host=self.host,
                port=self.port,
                method=self.method,
                allowed=self.allowed,
                refusal=self.refusal,
                detail=self.detail,
                address=self.address,
                matched=self.matched,
                sni=self.sni,
                bytes_up=up,
                bytes_down=down,
                started_at=self.started_at,
                duration_ms=duration_ms,
            )
            self.proxy.emit(self.route, record)


PLAIN_HTTP_IN_TUNNEL = "plain HTTP inside a CONNECT tunnel (use http:// through the proxy: its Host is checked)"
# a request line: a method token, a target, an HTTP version (HTTP/2's preface "PRI * HTTP/2.0" too)
_REQUEST_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ +\S+ +HTTP/[0-9]", re.IGNORECASE)
_MAYBE_REQUEST = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ ")
MAX_METHOD = 20  # a first flight of letters longer than any method is not the start of a request line


def http_first_line(data: bytes) -> str:
    """Whether a tunnel's first client bytes are an HTTP request ("http"), may still become one ("more"), or
    are something else ("other"). Leading blank lines are skipped, as servers skip them."""
    text = data.lstrip(b"\r\n")
    line, newline, _ = text.partition(b"\n")
    if _REQUEST_LINE.match(line):
        return "http"
    if not newline and (not text or _MAYBE_REQUEST.match(text) or (text.isalpha() and len(text) <= MAX_METHOD)):
        return "more"
    return "other"


def _header(line: bytes) -> tuple[bytes, bytes]:
    if line[:1] in (b" ", b"\t"):
        raise EgressRefused("bad_request", "folded header line")
    name, sep, value = line.partition(b":")
    if not sep or not _TOKEN.fullmatch(name):
        raise EgressRefused("bad_request", "malformed header line")
    value = value.strip(b" \t")
    if any((b < 0x20 and b != 0x09) or b == 0x7F for b in value):
        raise EgressRefused("bad_request", "control character in a header value")
    return name, value


def _absolute_target(target: str) -> tuple[str, int, bytes]:
    """``http://host[:port]/path?query`` -> (host, port, origin-form path). Anything else: bad_request."""
    scheme = target[:8].lower()
    if scheme.startswith("https://"):
        raise EgressRefused("bad_request", "https:// in a proxy request: use CONNECT (HTTPS_PROXY)")
    if target.startswith("/"):
        raise EgressRefused("bad_request", "origin-form request: a proxy needs absolute-form (http://host/path)")
    if not scheme.startswith("http://"):
        raise EgressRefused("bad_request", "unsupported request target (only http:// URLs and CONNECT)")
    rest = target[7:]
    end = len(rest)
    for stop in "/?#":
        found = rest.find(stop)
        if 0 <= found < end:
            end = found
    authority, path = rest[:end], rest[end:].split("#", 1)[0]
    if "@" in authority:
        raise EgressRefused("bad_request", "credentials in the URL are not forwarded: refused")
    try:
        host, port = parse_authority(authority, 80)
    except ValueError as e:
        raise EgressRefused("bad_request", f"bad URL host: {e}") from None
    if not path.startswith("/"):
        path = "/" + path
    return host, port, path.encode("ascii")


def _check_plain_headers(headers: list[tuple[bytes, bytes]], host: str, port: int) -> None:
    hosts = [value for name, value in headers if name.lower() == b"host"]
    if len(hosts) > 1:
        raise EgressRefused("bad_request", "several Host headers")
    if hosts:
        try:
            named = parse_authority(hosts[0].decode("ascii"), 80)
        except (ValueError, UnicodeDecodeError):
            raise EgressRefused("bad_request", "malformed Host header") from None
        if named != (host, port):
            raise EgressRefused("bad_request", "the Host header names another host:port than the URL")
    names = {name.lower() for name, _ in headers}
    if b"content-length" in names and b"transfer-encoding" in names:
        raise EgressRefused("bad_request", "both Content-Length and Transfer-Encoding")


def _peer_ip(address: object) -> str:
    """The peer's IP as route_for expects it (an IPv4-mapped IPv6 peer as its IPv4 address)."""
    if not isinstance(address, tuple) or not address:
        return ""
    text = str(address[0])
    try:
        ip = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return text
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ip)


class _Listener:
    """A listening socket handed to the proxy, and the connections it accepted that are still open."""

    def __init__(
        self,
        handle: ListenerHandle,
        sock: socket.socket,
        route_for: Callable[[str], EgressRoute | None],
        wait_for_route_s: float,
    ) -> None:
        self.handle = handle
        self.sock = sock
        self.route_for = route_for
        self.wait_for_route_s = wait_for_route_s
        self.connections: set[_Connection] = set()
        self.accepting = False
        self.closed = False
        self.resume: asyncio.TimerHandle | None = None

    def route(self, peer: str) -> EgressRoute | None:
        try:
            return self.route_for(peer)
        except Exception:
            logger.exception("egress: route_for(%r) failed; treated as no route", peer)
            return None


class EgressProxy:
    """The proxy: listeners (one per sandbox, or one shared and routed by peer IP), connections, records.

    ``on_record`` is called on the event loop, once per connection of a routed peer, after it ended; an
    exception from it is logged and does not stop the proxy. ``use_splice`` (default on, where ``os.splice``
    exists) moves tunnel bytes in the kernel; off, through a user-space buffer.
    """

    def __init__(
        self,
        on_record: Callable[[ConnectionRecord], None],
        *,
        resolver: Resolver | None = None,
        connect_timeout_s: float = 10.0,
        handshake_timeout_s: float = 10.0,
        idle_timeout_s: float = 300.0,
        max_connections_per_listener: int = 64,
        max_connections: int = 128,
        use_splice: bool = True,
    ) -> None:
        self._on_record = on_record
        self.resolver = resolver if resolver is not None else Resolver()
        self.connect_timeout_s = connect_timeout_s
        self.handshake_timeout_s = handshake_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections_per_listener = max_connections_per_listener
        # all listeners together: a connection holds 4-6 descriptors (sockets, splice pipes), and the controller's
        # own (evidence, store, engine, API) must never run out because sandboxes opened connections
        self.max_connections = max_connections
        self.use_splice = use_splice and hasattr(os, "splice")
        self.pipe_bytes = 0  # capacity of the enlarged splice pipes open now (see PIPE_BUDGET)
        self._listeners: dict[int, _Listener] = {}
        self._ids = itertools.count(1)

    async def add_listener(
        self,
        sock: socket.socket,
        route_for: Callable[[str], EgressRoute | None],
        *,
        wait_for_route_s: float = 0.0,
    ) -> ListenerHandle:
        """Accept on ``sock`` (bound and listening, maybe in another network namespace); the proxy owns it now.

        ``route_for(peer_ip)`` names the route of a connecting peer; an IPv4-mapped peer is given as IPv4. An
        unknown peer is polled for up to ``wait_for_route_s``, then closed without a record.
        """
        sockname = sock.getsockname()
        host, port = (str(sockname[0]), int(sockname[1])) if isinstance(sockname, tuple) else (str(sockname), 0)
        handle = ListenerHandle(next(self._ids), host, port)
        sock.setblocking(False)
        listener = _Listener(handle, sock, route_for, wait_for_route_s)
        self._listeners[handle.id] = listener
        self._start_accepting(listener)
        logger.debug("egress: listening on %s:%d (listener %d)", host, port, handle.id)
        return handle

    async def close_listener(self, handle: ListenerHandle) -> None:
        """Stop accepting, close every connection of the listener; return once each one's record was emitted."""
        listener = self._listeners.pop(handle.id, None)
        if listener is None:
            return
        listener.closed = True
        self._stop_accepting(listener)
        listener.sock.close()
        # a task created by the last accept runs its first step before we go on: its `finally` then holds
        await asyncio.sleep(0)
        connections = list(listener.connections)
        tasks = [c.task for c in connections if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for connection in connections:  # a task cancelled before its first step never ran its `finally`
            connection.finish()
        listener.connections.clear()

    async def close_route(self, route: EgressRoute) -> None:
        """Close every connection of ``route`` on any listener (a shared listener's pod that ended); return once
        each one's record was emitted. The caller stops routing the peer to ``route`` first."""
        connections = [c for lst in self._listeners.values() for c in lst.connections if c.route is route]
        tasks = [c.task for c in connections if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for connection in connections:  # a tunnel's pumps, or a task cancelled before its first step
            connection.finish()
            connection.listener.connections.discard(connection)

    async def close(self) -> None:
        """Close every listener (see :meth:`close_listener`)."""
        await asyncio.gather(*(self.close_listener(lst.handle) for lst in list(self._listeners.values())))

    def describe(self) -> dict[str, int]:
        return {
            "listeners": len(self._listeners),
            "connections": sum(len(lst.connections) for lst in self._listeners.values()),
        }

    def emit(self, route: EgressRoute, record: ConnectionRecord) -> None:
        """Hand a finished connection's record out (internal: called by the connection)."""
        if record.refusal is not None:
            if len(route.refused) < route.max_refused:
                route.refused.append(record)
            else:
                route.refused_dropped += 1
        logger.debug(
            "egress %s: %s %s:%d allowed=%s refusal=%s up=%d down=%d",
            record.execution_id,
            record.method or "-",
            record.host or "-",
            record.port,
            record.allowed,
            record.refusal,
            record.bytes_up,
            record.bytes_down,
        )
        try:
            self._on_record(record)
        except Exception:
            logger.exception("egress: on_record failed for a record of %s", record.execution_id)

    # -- accepting
    def _start_accepting(self, listener: _Listener) -> None:
        listener.resume = None
        if listener.closed or listener.accepting:
            return
        asyncio.get_running_loop().add_reader(listener.sock.fileno(), self._on_acceptable, listener)
        listener.accepting = True

    def _stop_accepting(self, listener: _Listener) -> None:
        if listener.resume is not None:
            listener.resume.cancel()
            listener.resume = None
        if listener.accepting:
            asyncio.get_running_loop().remove_reader(listener.sock.fileno())
            listener.accepting = False

    def _on_acceptable(self, listener: _Listener) -> None:
        for _ in range(ACCEPT_BURST):
            if listener.closed:
                return
            try:
                client, address = listener.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:
                continue
            except OSError as e:  # EMFILE, ENFILE, ENOBUFS...: pause rather than spin on a ready socket
                logger.warning("egress listener %d: accept failed (%s); pausing", listener.handle.id, e)
                self._stop_accepting(listener)
                loop = asyncio.get_running_loop()
                listener.resume = loop.call_later(ACCEPT_PAUSE_S, self._start_accepting, listener)
                return
            self._admit(listener, client, address)

    def _over_cap(self, listener: _Listener, route: EgressRoute | None) -> str | None:
        """Why one more connection may not be admitted (None: it may)."""
        full = route.full() if route is not None else None
        if full is not None:
            return full
        if len(listener.connections) >= self.max_connections_per_listener:
            return f"more than {self.max_connections_per_listener} open connections through this listener"
        if sum(len(lst.connections) for lst in self._listeners.values()) >= self.max_connections:
            return f"the proxy holds its most connections ({self.max_connections}) at once"
        return None

    def _admit(self, listener: _Listener, client: socket.socket, address: object) -> None:
        client.setblocking(False)
        peer = _peer_ip(address)
        route = listener.route(peer)
        if route is None and listener.wait_for_route_s <= 0:
            logger.debug("egress: no route for peer %s; closed", peer)
            client.close()
            return
        connection = _Connection(self, listener, client, peer, route)
        over = self._over_cap(listener, route)
        if over is not None:
            if route is None:
                logger.debug("egress: peer %s over the connection cap and without a route; closed", peer)
                client.close()
                return
            connection.refuse_now(EgressRefused("limit", over))
            return
        if route is not None:
            connection.count_in(route)
        listener.connections.add(connection)
        task = asyncio.get_running_loop().create_task(connection.run(), name=f"egress-{peer}")
        connection.task = task

        def done(task: asyncio.Task[None]) -> None:
            listener.connections.discard(connection)
            if not task.cancelled() and task.exception() is not None:  # run() catches everything: a bug
                logger.error("egress: connection handler crashed", exc_info=task.exception())

        task.add_done_callback(done)
