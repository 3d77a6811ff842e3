"""The server name of a TLS ClientHello: from real hellos (made by ``ssl`` through a memory BIO), split over
records and segments, and from truncated, oversized and garbage input (a verdict, never an exception)."""

from __future__ import annotations

import random
import ssl

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.egress.tls import MAX_CLIENT_HELLO, MAX_RAW, HelloState, scan_client_hello, server_name


def client_hello(name: str | None = "x.test") -> bytes:
    """The first flight of a real TLS client."""
    context = ssl.create_default_context()
    if name is None:
        context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def reframe(hello: bytes, size: int) -> bytes:
    """The same handshake message in records of ``size`` bytes (TLS allows any fragmentation)."""
    message = hello[5:]
    chunks = [message[i : i + size] for i in range(0, len(message), size)]
    return b"".join(b"\x16\x03\x01" + len(chunk).to_bytes(2, "big") + chunk for chunk in chunks)


def record(message: bytes) -> bytes:
    return b"\x16\x03\x01" + len(message).to_bytes(2, "big") + message


def handshake(body: bytes) -> bytes:
    return b"\x01" + len(body).to_bytes(3, "big") + body


def hello_body(extensions: bytes | None) -> bytes:
    body = b"\x03\x03" + bytes(32) + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    if extensions is not None:
        body += len(extensions).to_bytes(2, "big") + extensions
    return body


def sni_extension(*names: tuple[int, bytes]) -> bytes:
    entries = b"".join(bytes([kind]) + len(name).to_bytes(2, "big") + name for kind, name in names)
    data = len(entries).to_bytes(2, "big") + entries
    return b"\x00\x00" + len(data).to_bytes(2, "big") + data


def test_sni_of_a_real_client_hello() -> None:
    hello = client_hello("x.test")
    assert hello[0] == 0x16
    scan = scan_client_hello(hello)
    assert scan.state is HelloState.HELLO
    assert scan.server_name == "x.test"
    assert server_name(hello) == "x.test"


def test_a_hello_without_sni() -> None:
    scan = scan_client_hello(client_hello(None))
    assert scan.state is HelloState.HELLO
    assert scan.server_name is None


def test_every_prefix_asks_for_more_and_the_whole_completes() -> None:
    hello = client_hello("prefix.example.org")
    for cut in range(len(hello)):
        assert scan_client_hello(hello[:cut]).state is HelloState.MORE, cut
        assert server_name(hello[:cut]) is None
    assert server_name(hello) == "prefix.example.org"


@pytest.mark.parametrize("size", [1, 7, 100, 512])
def test_split_over_records(size: int) -> None:
    split = reframe(client_hello("split.test"), size)
    assert server_name(split) == "split.test"
    for cut in range(0, len(split), 97):
        assert scan_client_hello(split[:cut]).state is HelloState.MORE


def test_bytes_after_the_hello_do_not_matter() -> None:
    assert server_name(client_hello("x.test") + b"\x17\x03\x03garbage") == "x.test"


def test_not_tls_and_not_a_hello() -> None:
    for data in (b"GET / HTTP/1.1\r\n", b"SSH-2.0-OpenSSH\r\n", b"\x16\x02\x00", b"\x15\x03\x01\x00\x02\x02\x28"):
        assert scan_client_hello(data).state is HelloState.NOT_HELLO
    # a handshake record holding another message than a ClientHello (a ServerHello)
    assert scan_client_hello(record(b"\x02\x00\x00\x04abcd")).state is HelloState.NOT_HELLO
    # a zero-length record, a record over 2^14
    assert scan_client_hello(b"\x16\x03\x01\x00\x00").state is HelloState.NOT_HELLO
    assert scan_client_hello(b"\x16\x03\x01\x40\x01" + bytes(10)).state is HelloState.NOT_HELLO
    # a handshake record followed by an alert before the hello is complete
    hello = client_hello()
    broken = reframe(hello, 100)[:105] + b"\x15\x03\x01\x00\x02\x02\x28"
    assert scan_client_hello(broken).state is HelloState.NOT_HELLO


def test_too_large() -> None:
    declared = handshake(bytes(MAX_CLIENT_HELLO + 1))[:4]
    assert scan_client_hello(record(declared)).state is HelloState.TOO_LARGE
    # within the bound but split so finely that the raw bytes pass the raw bound (what the proxy reads at most)
    slow = b"".join(record(bytes([b])) for b in handshake(bytes(MAX_CLIENT_HELLO - 4)))
    assert scan_client_hello(slow[:MAX_RAW]).state is HelloState.TOO_LARGE
    assert scan_client_hello(slow[: MAX_RAW - 1]).state is HelloState.MORE


def test_crafted_hellos() -> None:
    assert server_name(record(handshake(hello_body(None)))) is None
    assert server_name(record(handshake(hello_body(b"")))) is None
    assert server_name(record(handshake(hello_body(sni_extension((0, b"Crafted.Test")))))) == "Crafted.Test"
    # an unknown name type first, then the host name
    assert server_name(record(handshake(hello_body(sni_extension((7, b"zz"), (0, b"b.test")))))) == "b.test"
    # a name that is no host name is kept, escaped: it can never equal a CONNECT host
    odd = server_name(record(handshake(hello_body(sni_extension((0, b"a\xffb.test"))))))
    assert odd == "a\\xffb.test"
    # malformed: a duplicate SNI extension, an empty name, a length past the end, bytes after the extensions
    for body in (
        hello_body(sni_extension((0, b"a.test")) + sni_extension((0, b"b.test"))),
        hello_body(sni_extension((0, b""))),
        hello_body(b"\x00\x00\x00\x09\x00\x07\x00\x00\x09a.test"),
        hello_body(sni_extension((0, b"a.test"))) + b"x",
        b"\x03\x03" + bytes(32) + b"\x21" + bytes(33),
    ):
        assert scan_client_hello(record(handshake(body))).state is HelloState.NOT_HELLO


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600))
def test_garbage_never_raises(data: bytes) -> None:
    for candidate in (data, b"\x16\x03\x01" + data, record(handshake(data))):
        scan = scan_client_hello(candidate)
        assert scan.state in HelloState
        assert scan.server_name is None or scan.state is HelloState.HELLO


def test_mutated_real_hellos_never_raise() -> None:
    hello = bytearray(client_hello("mutate.test"))
    rng = random.Random(7)
    for _ in range(2000):
        mutated = bytearray(hello)
        for _ in range(rng.randint(1, 4)):
            mutated[rng.randrange(len(mutated))] = rng.randrange(256)
        scan_client_hello(bytes(mutated[: rng.randint(0, len(mutated))]))
