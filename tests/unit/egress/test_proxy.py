"""The egress proxy over real sockets on 127.0.0.1: plain HTTP forwarding, CONNECT tunnels (real TLS end to end,
SNI checks), refusals and their records, bounds and timeouts, the connection cap, routing of peers, byte counts,
and closing (every record out before close_listener returns, no task or socket left).

The proxy's resolver is built with ``denied=()`` so that loopback upstreams are reachable, and names local
servers through its static hosts map (no DNS); one test checks that the default resolver refuses them."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import random
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import orchestrator.egress.proxy as egress_proxy
from orchestrator.egress import (
    Allowlist,
    ConnectionRecord,
    EgressProxy,
    EgressRefused,
    EgressRoute,
    ListenerHandle,
    Resolver,
    is_local,
)

HOSTS = {"up.test": "127.0.0.1", "tls.test": "127.0.0.1"}
LOOP_WAIT_S = 5.0  # upper bound of any wait in these tests: a hang fails, it never blocks the run


def client_hello(name: str) -> bytes:
    context = ssl.create_default_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


class Upstream:
    """A local server: ``handler`` gets each connection's streams; what it saw is kept in ``seen``."""

    def __init__(self, handler: Callable[[Upstream, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]):
        self._handler = handler
        self.seen: list[bytes] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> Upstream:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await self._handler(self, reader, writer)
            except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
                pass
            finally:
                writer.close()

        self.server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ssl_context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.server.wait_closed(), 1)


async def http_ok(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    up.seen.append(head)
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            up.seen.append(await reader.readexactly(int(line.split(b":")[1])))
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
    await writer.drain()


async def echo(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while line := await reader.readline():
        writer.write(line)
        await writer.drain()


async def sink_then_send(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Read everything up to the client's EOF, then answer ``DOWN`` bytes and close."""
    got = 0
    while chunk := await reader.read(1 << 16):
        got += len(chunk)
    up.seen.append(str(got).encode())
    writer.write(bytes(DOWN))
    await writer.drain()
    writer.write_eof()


async def banner(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A server that speaks first (SMTP, SSH): the tunnel must not wait for the client."""
    writer.write(b"220 hello\r\n")
    await writer.drain()
    up.seen.append(await reader.readline())


async def idle(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()


DOWN = 700_001
UP = 300_007


class Harness:
    """A proxy with one listener on 127.0.0.1, every record kept."""

    def __init__(
        self,
        allow: list[str],
        *,
        resolver: Resolver | None = None,
        route_for: Callable[[str], EgressRoute | None] | None = None,
        wait_for_route_s: float = 0.0,
        on_record: Callable[[ConnectionRecord], None] | None = None,
        **options: float | int | bool,
    ) -> None:
        self.records: list[ConnectionRecord] = []
        self.route = EgressRoute("exec-1", Allowlist(allow))
        self.proxy = EgressProxy(
            on_record or self.records.append,
            resolver=resolver or Resolver(hosts=HOSTS, denied=(), deny_local=False),
            **options,  # type: ignore[arg-type]
        )
        self._route_for = route_for or (lambda peer: self.route)
        self._wait = wait_for_route_s
        self.handle: ListenerHandle | None = None

    async def __aenter__(self) -> Harness:
        sock = socket.create_server(("127.0.0.1", 0))
        self.handle = await self.proxy.add_listener(sock, self._route_for, wait_for_route_s=self._wait)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.proxy.close()
        assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("egress-")]

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
        assert self.handle is not None
        reader, writer = await asyncio.open_connection("127.0.0.1", self.handle.port)
        try:
            yield reader, writer
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def ask(self, request: bytes) -> bytes:
        """Send a request, read until the proxy closes."""
        async with self.connection() as (reader, writer):
            writer.write(request)
            await writer.drain()
            return await asyncio.wait_for(read_all(reader), LOOP_WAIT_S)

    async def tunnel(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, target: str) -> None:
        writer.write(
            f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic c2VjcmV0\r\n\r\n".encode()
        )
        await writer.drain()
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), LOOP_WAIT_S)
        assert answer == b"HTTP/1.1 200 Connection established\r\n\r\n"

    async def records_after(self, count: int) -> list[ConnectionRecord]:
        deadline = time.monotonic() + LOOP_WAIT_S
        while len(self.records) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(self.records) == count, self.records
        return self.records


async def read_all(reader: asyncio.StreamReader) -> bytes:
    data = b""
    with contextlib.suppress(ConnectionError):
        while chunk := await reader.read(1 << 16):
            data += chunk
    return data


@contextlib.asynccontextmanager
async def upstream(
    handler: Callable[[Upstream, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[Upstream]:
    server = await Upstream(handler).start(ssl_context)
    try:
        yield server
    finally:
        await server.stop()


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


# -- plain HTTP


async def test_plain_http_get_is_forwarded_in_origin_form() -> None:
    async with upstream(http_ok) as up, Harness([f"up.test:{up.port}"]) as h:
        request = (
            f"GET http://up.test:{up.port}/path/secret?token=abc HTTP/1.1\r\nHost: up.test:{up.port}\r\n"
            "Proxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nKeep-Alive: 300\r\n"
            "Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nX-Keep: yes\r\nContent-Length: 4\r\n\r\nbody"
        ).encode()
        answer = await h.ask(request)
        assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"ok")
        head = up.seen[0]
        lines = head.split(b"\r\n")
        assert lines[0] == b"GET /path/secret?token=abc HTTP/1.1"
        names = [line.split(b":")[0].lower() for line in lines[1:] if line]
        assert b"proxy-authorization" not in names and b"proxy-connection" not in names
        assert b"keep-alive" not in names and b"x-drop" not in names
        assert b"X-Keep: yes" in lines and f"Host: up.test:{up.port}".encode() in lines
        assert [line for line in lines if line.lower().startswith(b"connection")] == [b"Connection: close"]
        assert up.seen[1] == b"body"
        (record,) = await h.records_after(1)
        assert (record.method, record.host, record.port, record.allowed) == ("GET", "up.test", up.port, True)
        assert (record.refusal, record.address, record.matched) == (None, "127.0.0.1", f"up.test:{up.port}")
        assert record.bytes_up == len(head) + 4  # the forwarded head and the body
        assert record.bytes_down == len(answer)
        assert "secret" not in repr(record) and "token" not in repr(record)
        assert record.started_at.tzinfo is UTC and record.duration_ms >= 0
        assert h.route.refused == []


async def test_plain_http_without_host_header_gets_one_and_default_port() -> None:
    async with upstream(http_ok) as up, Harness(["up.test:80", f"up.test:{up.port}"]) as h:
        await h.ask(f"GET http://UP.test:{up.port} HTTP/1.0\r\n\r\n".encode())
        assert up.seen[0].split(b"\r\n")[:2] == [b"GET / HTTP/1.0", f"Host: up.test:{up.port}".encode()]
        # port 80 by default: allowed by the pattern, refused at connect (nothing listens there, or denied)
        answer = await h.ask(b"GET http://up.test/x HTTP/1.1\r\n\r\n")
        assert status(answer) == 502
        records = await h.records_after(2)
        assert (records[1].port, records[1].refusal) == (80, "connect_failed")


async def test_host_header_mismatch_is_refused() -> None:
    async with upstream(http_ok) as up, Harness([f"up.test:{up.port}"]) as h:
        answer = await h.ask(f"GET http://up.test:{up.port}/ HTTP/1.1\r\nHost: evil.test\r\n\r\n".encode())
        assert status(answer) == 400 and b"Host header" in answer
        answer = await h.ask(f"GET http://up.test:{up.port}/ HTTP/1.1\r\nHost: up.test\r\n\r\n".encode())
        assert status(answer) == 400  # same name, port 80 implied: another host:port
        records = await h.records_after(2)
        assert all(r.refusal == "bad_request" and r.host == "up.test" and r.method == "GET" for r in records)
        assert up.seen == []


# -- CONNECT


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for tls.test: made with ``cryptography`` if installed, else ``openssl req``."""
    directory = tmp_path_factory.mktemp("egress-tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    if importlib.util.find_spec("cryptography") is not None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        private = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "tls.test")])
        now = datetime.now(UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(private.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("tls.test")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(private, hashes.SHA256())
        )
        cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        key.write_bytes(
            private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        return cert, key
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("neither the cryptography package nor openssl is available to make a test certificate")
    subprocess.run(
        [
            *(openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
            *("-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=tls.test"),
            *("-addext", "subjectAltName=DNS:tls.test"),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return cert, key


async def test_connect_with_real_tls_end_to_end(tls_files: tuple[Path, Path]) -> None:
    cert, key = tls_files
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(cert, key)
    client_context = ssl.create_default_context(cafile=str(cert))

    async def pong(up: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        writer.write(b"pong " + line)
        await writer.drain()

    async with upstream(pong, server_context) as up, Harness([f"tls.test:{up.port}"]) as h:
        async with h.connection() as (reader, writer):
            await h.tunnel(reader, writer, f"tls.test:{up.port}")
            await asyncio.wait_for(writer.start_tls(client_context, server_hostname="tls.test"), LOOP_WAIT_S)
            writer.write(b"ping\n")
            assert await asyncio.wait_for(reader.readline(), LOOP_WAIT_S) == b"pong ping\n"
        (record,) = await h.records_after(1)
        assert (record.method, record.host, record.sni, record.allowed) == ("CONNECT", "tls.test", "tls.test", True)
        assert record.matched == f"tls.test:{up.port}" and record.refusal is None
        assert record.bytes_up > 0 and record.bytes_down > 0


async def test_sni_mismatch_closes_the_tunnel() -> None:
    async with upstream(sink_then_send) as up, Harness([f"up.test:{up.port}"]) as h:
        async with h.connection() as (reader, writer):
            await h.tunnel(reader, writer, f"up.test:{up.port}")
            writer.write(client_hello("Other.Test"))
            assert await asyncio.wait_for(read_all(reader), LOOP_WAIT_S) == b""
        (record,) = await h.records_after(1)
        assert (record.refusal, record.allowed, record.sni) == ("sni_mismatch", False, "Other.Test")
        assert record.detail is not None and "Other.Test" in record.detail and "up.test" in record.detail
        assert record.bytes_up == 0  # the hello never reached the upstream
        assert h.route.refused == [record]


def hello_without_server_name() -> bytes:
    """A real ClientHello with its server_name extension (type 0) renamed to an unknown type (0xfafa)."""
    data = bytearray(client_hello("up.test"))
    at = data.find(b"\x00\x00" + (len(b"up.test") + 5).to_bytes(2, "big"))
    assert at > 0
    data[at : at + 2] = b"\xfa\xfa"
    return bytes(data)


@pytest.mark.parametrize(
    ("first_flight", "why"),
    [
        # an empty TLS record before a stock ClientHello (OpenSSL skips it; a parser that gives up must refuse)
        (b"\x16\x03\x01\x00\x00" + client_hello("evil.test"), "sni_mismatch"),
        # a ClientHello naming no server at all, for a CONNECT to a name
        (hello_without_server_name(), "sni_mismatch"),
        # plain HTTP inside the tunnel: its Host would not be checked (the absolute form is where it is)
        (b"GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", "bad_request"),
        (b"\r\n\r\nGET / HTTP/1.1\r\nHost: evil.test\r\n\r\n", "bad_request"),  # blank lines first
        (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "bad_request"),  # HTTP/2's preface
    ],
    # named, not by value: a ClientHello is random, and every xdist worker must collect the same ids
    ids=["empty-record-then-hello", "hello-without-server-name", "plain-http", "blank-lines-then-http", "http2"],
)
async def test_a_first_flight_the_proxy_cannot_vouch_for_is_refused(first_flight: bytes, why: str) -> None:
    async with upstream(sink_then_send) as up, Harness([f"up.test:{up.port}"]) as h:
        async with h.connection() as (reader, writer):
            await h.tunnel(reader, writer, f"up.test:{up.port}")
            writer.write(first_flight)
            await writer.drain()
            assert await asyncio.wait_for(read_all(reader), LOOP_WAIT_S) == b""
        (record,) = await h.records_after(1)
        assert (record.refusal, record.allowed, record.bytes_up) == (why, False, 0), record


async def test_plain_http_split_over_segments_is_still_seen() -> None:
    async with upstream(sink_then_send) as up, Harness([f"up.test:{up.port}"]) as h:
        async with h.connection() as (reader, writer):
            await h.tunnel(reader, writer, f"up.test:{up.port}")
            for piece in (b"GE", b"T /x HT", b"TP/1.1\r\nHost: evil.test\r\n\r\n"):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.02)
            assert await asyncio.wait_for(read_all(reader), LOOP_WAIT_S) == b""
        (record,) = await h.records_after(1)
        assert (record.refusal, record.bytes_up) == ("bad_request", 0)


async def test_a_protocol_with_no_name_in_it_is_tunnelled() -> None:
    """ssh and the like: the allowlisted host:port is all there is to check."""
    async with upstream(echo) as up, Harness([f"up.test:{up.port}"]) as h, h.connection() as (reader, writer):
        await h.tunnel(reader, writer, f"up.test:{up.port}")
        writer.write(b"SSH-2.0-OpenSSH_9.2\r\n")
        await writer.drain()
        assert await asyncio.wait_for(reader.readline(), LOOP_WAIT_S) == b"SSH-2.0-OpenSSH_9.2\r\n"


async def test_sni_split_over_segments_and_trailing_dot_and_case_pass() -> None:
    hello = client_hello("UP.test.")
    async with upstream(sink_then_send) as up, Harness([f"up.test:{up.port}"]) as h:
        async with h.connection() as (reader, writer):
            writer.write(f"CONNECT up.test:{up.port} HTTP/1.1\r\n\r\n".encode() + hello[:3])  # pipelined
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 200 Connection established\r\n\r\n"
            for i in range(3, len(hello), 40):
                writer.write(hello[i : i + 40])
                await writer.drain()
                await asyncio.sleep(0.002)
            writer.write_eof()
            assert len(await asyncio.wait_for(read_all(reader), LOOP_WAIT_S)) == DOWN
        (record,) = await h.records_after(1)
        assert (record.allowed, record.sni, record.bytes_up, record.bytes_down) == (True, "UP.test.", len(hello), DOWN)
        assert up.seen == [str(len(hello)).encode()]


async def test_incomplete_client_hello_times_out() -> None:
    async with upstream(idle) as up, Harness([f"up.test:{up.port}"], handshake_timeout_s=0.3) as h:
        async with h.connection() as (reader, writer):
            await h.tunnel(reader, writer, f"up.test:{up.port}")
            writer.write(client_hello("up.test")[:30])
            t0 = time.monotonic()
            assert await asyncio.wait_for(read_all(reader), LOOP_WAIT_S) == b""
            assert time.monotonic() - t0 < 2
        (record,) = await h.records_after(1)
        assert record.refusal == "bad_request" and "ClientHello incomplete" in (record.detail or "")


@pytest.mark.parametrize("use_splice", [True, False])
async def test_bytes_are_counted_exactly_both_ways_with_half_close(use_splice: bool) -> None:
    async with upstream(sink_then_send) as up, Harness([f"up.test:{up.port}"], use_splice=use_splice) as h:
        async with h.connection() as (reader, writer):
            await h.tunnel(reader, writer, f"up.test:{up.port}")
            writer.write(b"x" * UP)
            await writer.drain()
            writer.write_eof()  # the upstream answers only after our EOF: the half-close must pass
            assert len(await asyncio.wait_for(read_all(reader), LOOP_WAIT_S)) == DOWN
        (record,) = await h.records_after(1)
        assert (record.bytes_up, record.bytes_down, record.sni, record.detail) == (UP, DOWN, None, None)
        assert up.seen == [str(UP).encode()]
        assert h.proxy.pipe_bytes == 0


async def test_pipes_past_the_budget_keep_the_default_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(egress_proxy, "PIPE_BUDGET", egress_proxy.PIPE_SIZE)  # one enlarged pipe at most
    async with upstream(sink_then_send) as up, Harness([f"up.test:{up.port}"]) as h:

        async def one() -> int:
            async with h.connection() as (reader, writer):
                await h.tunnel(reader, writer, f"up.test:{up.port}")
                writer.write(b"y" * UP)
                await writer.drain()
                writer.write_eof()
                return len(await asyncio.wait_for(read_all(reader), LOOP_WAIT_S))

        assert await asyncio.gather(one(), one(), one()) == [DOWN] * 3
        records = await h.records_after(3)
        assert {(r.bytes_up, r.bytes_down) for r in records} == {(UP, DOWN)}
        assert h.proxy.pipe_bytes == 0


async def test_a_server_that_speaks_first_is_heard_before_the_client_sends() -> None:
    async with upstream(banner) as up, Harness([f"up.test:{up.port}"]) as h:
        async with h.connection() as (reader, writer):
            await h.tunnel(reader, writer, f"up.test:{up.port}")
            assert await asyncio.wait_for(reader.readline(), LOOP_WAIT_S) == b"220 hello\r\n"
            writer.write(b"QUIT\r\n")
            assert await asyncio.wait_for(read_all(reader), LOOP_WAIT_S) == b""
        (record,) = await h.records_after(1)
        assert (record.allowed, record.bytes_up, record.bytes_down) == (True, 6, 11)
        assert up.seen == [b"QUIT\r\n"]


async def test_idle_tunnels_are_closed() -> None:
    async with upstream(idle) as up, Harness([f"up.test:{up.port}"], idle_timeout_s=0.3) as h:
        async with h.connection() as (reader, writer):
            await h.tunnel(reader, writer, f"up.test:{up.port}")
            assert await asyncio.wait_for(read_all(reader), LOOP_WAIT_S) == b""
        (record,) = await h.records_after(1)
        assert (record.allowed, record.refusal, record.detail) == (True, None, "idle for 0.3s")


# -- refusals


async def test_a_host_not_listed_is_refused_with_403() -> None:
    async with Harness(["up.test:443"]) as h:
        answer = await h.ask(b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n")
        assert answer.endswith(b"egress refused (not_allowed): evil.test:443 is not in the egress allowlist\n")
        answer = await h.ask(b"GET http://up.test:8080/secret HTTP/1.1\r\n\r\n")
        assert status(answer) == 403
        records = await h.records_after(2)
        assert [(r.method, r.host, r.port, r.refusal, r.allowed) for r in records] == [
            ("CONNECT", "evil.test", 443, "not_allowed", False),
            ("GET", "up.test", 8080, "not_allowed", False),
        ]
        assert h.route.refused == records
        assert all("secret" not in repr(r) for r in records)


async def test_connect_failure_is_502() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    async with Harness([f"up.test:{port}"]) as h:
        answer = await h.ask(f"CONNECT up.test:{port} HTTP/1.1\r\n\r\n".encode())
        assert status(answer) == 502
        (record,) = await h.records_after(1)
        assert (record.refusal, record.allowed, record.address) == ("connect_failed", False, None)


async def test_default_resolver_refuses_local_and_metadata_addresses() -> None:
    hosts = {"loop.test": "127.0.0.1", "meta.test": "169.254.169.254", "mapped.test": "::ffff:127.0.0.1"}
    targets = ["127.0.0.1", "[::1]", "[::ffff:127.0.0.1]", "169.254.169.254", "0.0.0.0", "loop.test", "meta.test"]
    targets.append("mapped.test")
    allow = [f"{t}:80" for t in targets]
    async with upstream(http_ok) as up, Harness(allow, resolver=Resolver(hosts=hosts)) as h:
        for target in targets:
            answer = await h.ask(f"CONNECT {target}:80 HTTP/1.1\r\n\r\n".encode())
            assert status(answer) == 403, target
        records = await h.records_after(len(targets))
        assert {r.refusal for r in records} == {"address"}
        assert all(r.address is None and r.matched is not None for r in records)
        assert up.seen == []
    resolver = Resolver(hosts=hosts)
    for host in ("127.0.0.1", "::1", "::ffff:127.0.0.1", "169.254.169.254", "0.0.0.0", "224.0.0.1", "meta.test"):
        with pytest.raises(EgressRefused) as caught:
            await resolver.resolve(host, 80)
        assert caught.value.kind == "address"
    assert await Resolver(denied=(), deny_local=False).resolve("127.0.0.1", 80) == ["127.0.0.1"]
    assert await resolver.resolve("10.0.0.5", 80) == ["10.0.0.5"]


async def test_dns_failures_are_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    """No DNS here: the loop's getaddrinfo is replaced (a name that does not resolve, one that hangs, a mix)."""
    loop = asyncio.get_running_loop()

    async def getaddrinfo(host: str, port: int, **kwargs: int) -> list[tuple[int, int, int, str, tuple[str, int]]]:
        assert host.endswith("."), host  # absolute: no search domain is tried first
        host = host[:-1]
        if host == "hang.test":
            await asyncio.sleep(10)
        if host == "mixed.test":
            return [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.7", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("192.0.2.7", port)),
            ]
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    resolver = Resolver(timeout_s=0.2)
    for host, detail in (("nx.test", "does not resolve"), ("hang.test", "no answer within 0.2s")):
        with pytest.raises(EgressRefused) as caught:
            await resolver.resolve(host, 443)
        assert (caught.value.kind, detail in caught.value.detail) == ("dns", True)
    assert await resolver.resolve("mixed.test", 443) == ["192.0.2.7"]  # the denied one is skipped
    async with Harness(["nx.test:443"], resolver=resolver) as h:
        assert status(await h.ask(b"CONNECT nx.test:443 HTTP/1.1\r\n\r\n")) == 502
        (record,) = await h.records_after(1)
        assert record.refusal == "dns"


@pytest.mark.parametrize(
    ("request_bytes", "code", "host", "method"),
    [
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400, "", ""),
        (b"GET / HTTP/1.1\r\nHost: up.test\r\n\r\n", 400, "", "GET"),
        (b"GET https://up.test/ HTTP/1.1\r\n\r\n", 400, "", "GET"),
        (b"GET ftp://up.test/ HTTP/1.1\r\n\r\n", 400, "", "GET"),
        (b"GET http://user:pw@up.test/ HTTP/1.1\r\n\r\n", 400, "", "GET"),
        (b"GET http://up.test/ HTTP/2.0\r\n\r\n", 400, "", "GET"),
        (b"GET  http://up.test/ HTTP/1.1\r\n\r\n", 400, "", ""),
        (b"CONNECT up.test HTTP/1.1\r\n\r\n", 400, "", "CONNECT"),
        (b"CONNECT up.test:0 HTTP/1.1\r\n\r\n", 400, "", "CONNECT"),
        (b"CONNECT [::1 HTTP/1.1\r\n\r\n", 400, "", "CONNECT"),
        (b"CONNECT a..b:443 HTTP/1.1\r\n\r\n", 400, "", "CONNECT"),
        (b"CONNECT up.test:443 HTTP/1.1\r\n folded\r\n\r\n", 400, "up.test", "CONNECT"),
        (b"CONNECT up.test:443 HTTP/1.1\r\nNo-Colon\r\n\r\n", 400, "up.test", "CONNECT"),
        (b"CONNECT up.test:443 HTTP/1.1\r\nX: a\x00b\r\n\r\n", 400, "up.test", "CONNECT"),
        (b"CONNECT up.test:443 HTTP/1.1\r\n" + b"X: 1\r\n" * 101 + b"\r\n", 431, "up.test", "CONNECT"),
        (b"GET http://up.test/ HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, "up.test", "GET"),
        (
            b"POST http://up.test/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
            "up.test",
            "POST",
        ),
        (b"GET http://up.test/" + b"a" * 17000 + b" HTTP/1.1\r\n\r\n", 431, "", ""),
        (b"\r\n\r\n", 400, "", ""),
    ],
)
async def test_malformed_requests_are_refused(request_bytes: bytes, code: int, host: str, method: str) -> None:
    async with Harness(["up.test:*"]) as h:
        answer = await h.ask(request_bytes)
        assert status(answer) == code
        (record,) = await h.records_after(1)
        assert (record.refusal, record.host, record.method, record.allowed) == ("bad_request", host, method, False)
        assert record.port == (0 if not host else record.port)
        assert len(record.detail or "") <= 200


async def test_slow_and_silent_and_empty_clients() -> None:
    async with Harness(["up.test:*"], handshake_timeout_s=0.3) as h:
        t0 = time.monotonic()
        async with h.connection() as (reader, writer):  # a slowloris: a byte at a time, never the end
            for _ in range(5):  # 0.25 s of it: the proxy's clock runs from the connect, not from the last byte
                writer.write(b"G")
                await asyncio.sleep(0.05)
            answer = await asyncio.wait_for(read_all(reader), LOOP_WAIT_S)
        assert status(answer) == 408
        assert status(await h.ask(b"")) == 408  # silent
        assert time.monotonic() - t0 < 3
        async with h.connection():
            pass  # connects and closes at once
        records = await h.records_after(3)
        assert [r.refusal for r in records] == ["bad_request"] * 3
        assert records[2].detail == "closed unused"


async def test_the_connection_cap_answers_503() -> None:
    async with Harness(["up.test:*"], max_connections_per_listener=2) as h:
        async with h.connection() as (_, w1), h.connection() as (_, w2):
            w1.write(b"CONNECT up")  # both held in their handshake
            w2.write(b"CONNECT up")
            await asyncio.sleep(0.05)
            assert h.proxy.describe() == {"listeners": 1, "connections": 2}
            async with h.connection() as (reader, _):
                answer = await asyncio.wait_for(read_all(reader), LOOP_WAIT_S)
            assert status(answer) == 503
            (record,) = await h.records_after(1)
            assert (record.refusal, record.host, record.port, record.method) == ("limit", "", 0, "")
        await h.records_after(3)


# -- routing, records, closing


async def test_an_unknown_peer_is_closed_without_a_record() -> None:
    async with Harness(["up.test:*"], route_for=lambda peer: None) as h:
        assert await h.ask(b"CONNECT up.test:443 HTTP/1.1\r\n\r\n") == b""
        await asyncio.sleep(0.05)
        assert h.records == []


async def test_route_for_gets_the_peer_ip_and_a_late_route_is_waited_for() -> None:
    asked: list[str] = []
    t0 = time.monotonic()

    def late(peer: str) -> EgressRoute | None:
        asked.append(peer)
        return h.route if time.monotonic() - t0 > 0.2 else None

    async with upstream(http_ok) as up, Harness([f"up.test:{up.port}"], route_for=late, wait_for_route_s=2) as h:
        answer = await h.ask(f"GET http://up.test:{up.port}/ HTTP/1.1\r\n\r\n".encode())
        assert answer.endswith(b"ok")
        assert set(asked) == {"127.0.0.1"} and len(asked) > 1
        (record,) = await h.records_after(1)
        assert record.allowed and record.execution_id == "exec-1"
    async with Harness(["up.test:*"], route_for=lambda peer: None, wait_for_route_s=0.2) as h:
        t1 = time.monotonic()
        assert await h.ask(b"CONNECT up.test:443 HTTP/1.1\r\n\r\n") == b""
        assert 0.15 < time.monotonic() - t1 < 2
        assert h.records == []


async def test_route_for_and_on_record_failures_do_not_stop_the_proxy() -> None:
    calls: list[ConnectionRecord] = []

    def broken(record: ConnectionRecord) -> None:
        calls.append(record)
        raise RuntimeError("boom")

    async with Harness(["up.test:443"], on_record=broken) as h:
        for _ in range(2):
            assert status(await h.ask(b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")) == 403
        assert len(calls) == 2 and len(h.route.refused) == 2

    def raising(peer: str) -> EgressRoute | None:
        raise RuntimeError("no")

    async with Harness(["up.test:*"], route_for=raising) as h:
        assert await h.ask(b"CONNECT up.test:443 HTTP/1.1\r\n\r\n") == b""


async def test_refused_records_are_bounded_per_route() -> None:
    async with Harness(["up.test:443"]) as h:
        h.route.max_refused = 2
        for _ in range(3):
            await h.ask(b"CONNECT evil.test:443 HTTP/1.1\r\n\r\n")
        await h.records_after(3)
        assert (len(h.route.refused), h.route.refused_dropped) == (2, 1)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_close_listener_emits_every_record_first_and_leaves_nothing() -> None:
    async with upstream(idle) as up:
        fds = open_fds()
        h = Harness([f"up.test:{up.port}"])
        await h.__aenter__()
        assert h.handle is not None
        async with h.connection() as (r1, w1), h.connection() as (r2, w2), h.connection() as (r3, w3):
            await h.tunnel(r1, w1, f"up.test:{up.port}")  # an open tunnel
            w1.write(b"dat\n")  # not TLS, not HTTP: tunnelled
            await w1.drain()
            w2.write(b"CONNECT up.test")  # a request half sent
            await w2.drain()
            await h.tunnel(r3, w3, f"up.test:{up.port}")  # a tunnel still inspecting its first bytes
            w3.write(b"\x16\x03\x01")
            await w3.drain()
            await asyncio.sleep(0.1)
            assert h.proxy.describe() == {"listeners": 1, "connections": 3}
            await h.proxy.close_listener(h.handle)
            assert len(h.records) == 3  # all of them, before close_listener returned
            tunnels = sorted((r for r in h.records if r.allowed), key=lambda r: r.bytes_up)
            assert [(r.refusal, r.detail, r.bytes_up) for r in tunnels] == [
                (None, "closed by the proxy (listener closed)", 0),  # its 3 bytes held: a hello not yet complete
                (None, "closed by the proxy (listener closed)", 4),
            ]
            (half,) = [r for r in h.records if not r.allowed]
            assert (half.refusal, half.host) == ("closed", "")
            assert h.proxy.describe() == {"listeners": 0, "connections": 0}
            assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("egress-")]
            assert await asyncio.wait_for(read_all(r1), LOOP_WAIT_S) == b""
            assert (await asyncio.wait_for(read_all(r2), LOOP_WAIT_S)).startswith(b"HTTP/1.1 503 ")
            assert await asyncio.wait_for(read_all(r3), LOOP_WAIT_S) == b""
            await h.proxy.close_listener(h.handle)  # again: nothing to do
            with pytest.raises(OSError):
                socket.create_connection(("127.0.0.1", h.handle.port), timeout=1).close()
        await h.__aexit__(None, None, None)
        await asyncio.sleep(0.05)
        assert open_fds() <= fds


async def test_close_right_after_accepting_still_records() -> None:
    async with Harness(["up.test:*"]) as h:
        assert h.handle is not None
        clients = [socket.create_connection(("127.0.0.1", h.handle.port)) for _ in range(5)]
        try:
            await asyncio.sleep(0.05)
            await h.proxy.close()
            assert len(h.records) == 5
            assert {r.refusal for r in h.records} == {"closed"}
        finally:
            for client in clients:
                client.close()


async def test_closing_while_a_peer_waits_for_its_route() -> None:
    async with Harness(["up.test:*"], route_for=lambda peer: None, wait_for_route_s=LOOP_WAIT_S) as h:
        assert h.handle is not None
        async with h.connection() as (reader, writer):
            writer.write(b"CONNECT up.test:443 HTTP/1.1\r\n\r\n")
            await asyncio.sleep(0.1)
            assert h.proxy.describe()["connections"] == 1
            t0 = time.monotonic()
            await h.proxy.close_listener(h.handle)
            assert time.monotonic() - t0 < 1
            assert await asyncio.wait_for(read_all(reader), LOOP_WAIT_S) == b""  # no answer
        assert h.records == []


async def test_garbage_never_breaks_the_proxy() -> None:
    rng = random.Random(11)
    async with upstream(http_ok) as up, Harness([f"up.test:{up.port}"], handshake_timeout_s=1) as h:

        async def garbage() -> bytes:
            size = rng.choice([1, 5, 100, 3000, 20000])
            data = bytes(rng.randrange(256) for _ in range(size))
            if rng.random() < 0.5:
                data = rng.choice([b"CONNECT ", b"GET http://", b"\x16\x03\x01"]) + data + b"\r\n\r\n"
            async with h.connection() as (reader, writer):
                with contextlib.suppress(ConnectionError):
                    writer.write(data)
                    writer.write_eof()
                return await asyncio.wait_for(read_all(reader), LOOP_WAIT_S)

        answers = await asyncio.gather(*(garbage() for _ in range(30)))
        assert all(a == b"" or status(a) in (400, 403, 431) for a in answers)
        assert (await h.ask(f"GET http://up.test:{up.port}/ HTTP/1.1\r\n\r\n".encode())).endswith(b"ok")
        records = await h.records_after(31)
        assert sum(r.allowed for r in records) == 1


async def test_close_route_ends_one_routes_connections_on_a_shared_listener() -> None:
    """A shared listener (Kubernetes: routed by pod IP) serves two runs; one ends: its connections are closed
    and recorded before close_route returns, the other's tunnel goes on."""
    async with upstream(idle) as up:
        first, second = (EgressRoute(name, Allowlist([f"up.test:{up.port}"])) for name in ("exec-a", "exec-b"))
        order = iter([first, second])  # both peers are 127.0.0.1 here: the routes are handed out in turn
        h = Harness([], route_for=lambda peer: next(order))
        async with h, h.connection() as (r1, w1), h.connection() as (r2, w2):
            await h.tunnel(r1, w1, f"up.test:{up.port}")
            await h.tunnel(r2, w2, f"up.test:{up.port}")
            w1.write(b"ab\n")
            await w1.drain()
            await asyncio.sleep(0.05)
            await h.proxy.close_route(first)
            assert [(r.execution_id, r.allowed, r.bytes_up) for r in h.records] == [("exec-a", True, 3)]
            assert await asyncio.wait_for(read_all(r1), LOOP_WAIT_S) == b""
            assert h.proxy.describe() == {"listeners": 1, "connections": 1}
            w2.write(b"still ope\n")
            await w2.drain()
            await asyncio.sleep(0.05)  # spliced to the upstream: the tunnel was not touched by the other's end
            await h.proxy.close_route(second)
            assert [r.execution_id for r in h.records] == ["exec-a", "exec-b"] and h.records[1].bytes_up == 10


def test_this_hosts_own_addresses_are_local() -> None:
    assert is_local("127.0.0.1") and is_local("::ffff:127.0.0.1")
    assert not is_local("192.0.2.1")  # TEST-NET-1: no interface here has it (binding tells; nothing is sent)
    assert is_local("not an address")  # what is not an address is never connected to


async def test_a_dns_answer_never_leads_into_internal_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A name whose DNS someone else controls must not become the cluster's API, a neighbour or a metadata
    service; the operator's own addresses (an IP written in the allowlist, a pinned name) still are reached."""
    loop = asyncio.get_running_loop()
    answers = {
        "kube.test": "10.96.0.1",
        "ula.test": "fd00:ec2::254",
        "cgnat.test": "100.100.100.200",
        "nat64.test": "64:ff9b::a9fe:a9fe",
        "sixtofour.test": "2002:7f00:1::1",
        "public.test": "192.0.2.7",
    }

    async def getaddrinfo(host: str, port: int, **kwargs: int) -> list[tuple[int, int, int, str, tuple[str, int]]]:
        address = answers[host.removesuffix(".")]
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(loop, "getaddrinfo", getaddrinfo)
    resolver = Resolver(hosts={"git.internal": "10.0.4.7"})
    for name in ("kube.test", "ula.test", "cgnat.test", "nat64.test", "sixtofour.test"):
        with pytest.raises(EgressRefused) as refused:
            await resolver.resolve(name, 443)
        assert refused.value.kind == "address" and "egress.hosts" in refused.value.detail, name
    assert await resolver.resolve("public.test", 443) == ["192.0.2.7"]
    assert await resolver.resolve("git.internal", 443) == ["10.0.4.7"]  # pinned by the operator
    assert await resolver.resolve("10.0.4.8", 443) == ["10.0.4.8"]  # written in an allowlist
    with pytest.raises(EgressRefused):  # never the always-denied ones, written or not
        await resolver.resolve("169.254.169.254", 80)
