"""The server name (SNI) of a TLS ClientHello, read without terminating TLS.

The proxy tunnels TLS untouched; it only looks at the first flight a sandbox sends through a CONNECT tunnel, so
that ``CONNECT allowed.example:443`` cannot carry a ClientHello for another name served from the same address
(a CDN front). The parser is incremental (the hello may arrive in several TCP segments and TLS records), bounded
(:data:`MAX_CLIENT_HELLO`), and total: any input gives a verdict, never an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["MAX_CLIENT_HELLO", "HelloState", "HelloScan", "scan_client_hello", "server_name"]

MAX_CLIENT_HELLO = 16 * 1024  # the handshake message; real ones are 0.5-2 KiB (4-5 KiB with PSKs and PQ keys)
MAX_RAW = 2 * MAX_CLIENT_HELLO + 5  # record headers included: fragmented into records, a hello grows a little

_HANDSHAKE = 22
_CLIENT_HELLO = 1
_EXT_SERVER_NAME = 0
_NAME_HOST = 0
_MAX_RECORD = 1 << 14  # TLSPlaintext.length limit
_MAX_NAME = 255


class HelloState(Enum):
    """What the bytes seen so far are."""

    MORE = "more"  # a valid beginning of a ClientHello: read more
    HELLO = "hello"  # a complete ClientHello, parsed (server_name set when it names one)
    NOT_HELLO = "not_hello"  # not TLS, or not a well-formed ClientHello: no SNI
    TOO_LARGE = "too_large"  # framed as a ClientHello but larger than the bound


@dataclass(frozen=True)
class HelloScan:
    state: HelloState
    server_name: str | None = None


_NOT_HELLO = HelloScan(HelloState.NOT_HELLO)
_MORE = HelloScan(HelloState.MORE)
_TOO_LARGE = HelloScan(HelloState.TOO_LARGE)


def scan_client_hello(data: bytes | bytearray | memoryview) -> HelloScan:
    """Look at the first bytes a client sent: need more, a complete hello (and its SNI), not a hello, too large."""
    try:
        return _scan(bytes(data))
    except (IndexError, ValueError, UnicodeError):  # pragma: no cover - the parser checks lengths; belt and braces
        return _NOT_HELLO


def server_name(data: bytes | bytearray | memoryview) -> str | None:
    """The SNI host name of a complete ClientHello in ``data``; None if incomplete, absent or malformed."""
    scan = scan_client_hello(data)
    return scan.server_name if scan.state is HelloState.HELLO else None


def _scan(data: bytes) -> HelloScan:
    message = bytearray()
    pos = 0
    while True:
        header = data[pos : pos + 5]
        if (header[:1] and header[0] != _HANDSHAKE) or (header[1:2] and header[1] != 3):
            return _NOT_HELLO
        if len(header) < 5:
            return _TOO_LARGE if len(data) >= MAX_RAW else _MORE
        length = int.from_bytes(header[3:5], "big")
        if length == 0 or length > _MAX_RECORD:
            return _NOT_HELLO
        fragment = data[pos + 5 : pos + 5 + length]
        message += fragment
        if message[:1] and message[0] != _CLIENT_HELLO:
            return _NOT_HELLO
        if len(message) >= 4:
            size = int.from_bytes(message[1:4], "big")
            if size > MAX_CLIENT_HELLO:
                return _TOO_LARGE
            if len(message) >= 4 + size:
                # a record may go on with further handshake messages: a client sends none before the reply
                return _parse_hello(bytes(message[4 : 4 + size]))
        if len(fragment) < length:
            return _TOO_LARGE if len(data) >= MAX_RAW else _MORE
        pos += 5 + length


class _Reader:
    """Length-checked reads over a byte string; ValueError past its end."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    @property
    def left(self) -> int:
        return len(self._data) - self._pos

    def take(self, n: int) -> bytes:
        if n > self.left:
            raise ValueError("truncated")
        chunk = self._data[self._pos : self._pos + n]
        self._pos += n
        return chunk

    def take_all(self) -> bytes:
        return self.take(self.left)

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, size: int) -> _Reader:
        return _Reader(self.take(self.number(size)))


def _parse_hello(body: bytes) -> HelloScan:
    try:
        return HelloScan(HelloState.HELLO, _hello_server_name(_Reader(body)))
    except ValueError:
        return _NOT_HELLO


def _hello_server_name(hello: _Reader) -> str | None:
    hello.take(2 + 32)  # legacy_version, random
    if hello.vector(1).left > 32:  # legacy_session_id
        raise ValueError("session id")
    suites = hello.vector(2)
    if suites.left == 0 or suites.left % 2:
        raise ValueError("cipher suites")
    if hello.vector(1).left == 0:  # compression methods
        raise ValueError("compression methods")
    if hello.left == 0:
        return None  # no extensions at all (TLS 1.0 era clients)
    extensions = hello.vector(2)
    if hello.left:
        raise ValueError("bytes after the extensions")
    found: str | None = None
    seen: set[int] = set()
    while extensions.left:
        kind = extensions.number(2)
        data = extensions.vector(2)
        if kind in seen:
            raise ValueError("duplicate extension")  # servers refuse these; so do we
        seen.add(kind)
        if kind == _EXT_SERVER_NAME:
            found = _server_name_extension(data)
    return found


def _server_name_extension(ext: _Reader) -> str | None:
    names = ext.vector(2)
    if ext.left:
        raise ValueError("bytes after the server name list")
    found: str | None = None
    while names.left:
        kind = names.number(1)
        name = names.vector(2).take_all()
        if kind == _NAME_HOST and found is None:
            if not name or len(name) > _MAX_NAME:
                raise ValueError("server name length")
            # not a host name (non-ASCII, NUL...)? kept, escaped, so it compares unequal to any CONNECT host
            found = name.decode("ascii", "backslashreplace")
    return found
