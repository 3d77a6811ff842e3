"""Redact, then cap: a secret cut in two by the output cap never shows its first part.

The stream goes through the backend's real sink (``StreamSink``, keeping ``limit + margin`` bytes), then
``Redactor.redact_capped``. The oracle is the redaction of the *whole* stream: what is kept must be a
prefix of it (so no byte the whole-stream redaction hides is shown), at most ``limit`` bytes, never cut
inside a ``[REDACTED:...]`` marker, and it keeps everything before the secret.
"""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.backends.docker.capture import StreamSink
from orchestrator.results import PATTERN_REACH, CappedOutput, Redactor
from tests.support.secrets import POSITIVES

LIMIT = 256
TAIL = b"\n" + b"done. " * 1500  # longer than the margin: the stream goes on past what is captured
MARKER = re.compile(rb"\[REDACTED:[a-z-]+\]")
R = Redactor()


def captured(redactor: Redactor, stream: bytes, limit: int, *, chunk: int = 4093) -> CappedOutput:
    """What the pipeline keeps of ``stream``: the sink holds ``limit + margin`` bytes, then redact, cap."""
    sink = StreamSink(limit + redactor.margin)
    for at in range(0, len(stream), chunk):
        sink.write(stream[at : at + chunk])
    capture = sink.result()
    assert capture.total_bytes == len(stream)
    return redactor.redact_capped(capture.data, limit, complete=not capture.truncated)


def assert_prefix_of_whole(redactor: Redactor, stream: bytes, out: CappedOutput, limit: int, clear: int) -> None:
    """``out`` is a prefix of the whole stream's redaction, within ``limit``, not inside a marker, and keeps
    the first ``clear`` bytes (the text before the secret)."""
    whole = redactor.redact(stream).data
    assert len(out.data) <= limit
    assert whole.startswith(out.data), (out.data[-80:], whole[len(out.data) - 80 : len(out.data) + 40])
    for m in MARKER.finditer(whole):
        assert not m.start() < len(out.data) < m.end(), "cut inside a marker"
    assert len(out.data) >= min(clear, limit)
    assert out.count == len(MARKER.findall(out.data))


def filler(size: int) -> bytes:
    return b"." * (size - 1) + b"\n" if size else b""


def _secret_start(data: bytes, expected: bytes) -> int:
    """Where the first secret byte of a POSITIVES sample is: the common prefix of input and output."""
    n = 0
    while n < min(len(data), len(expected)) and data[n] == expected[n]:
        n += 1
    return n


REDACTED_SAMPLES = [(data, expected, kind) for data, expected, kind in POSITIVES if kind]


@pytest.mark.parametrize(("data", "expected", "kind"), REDACTED_SAMPLES, ids=[k for _, _, k in REDACTED_SAMPLES])
def test_builtin_secret_straddling_the_cap_at_every_offset(data: bytes, expected: bytes, kind: str) -> None:
    start = _secret_start(data, expected)
    # a sample that is a secret only at the very end of the output (an unterminated quote) is checked
    # against the whole stream's redaction alone
    secret_mid_stream = R.redact(data + TAIL).data.startswith(expected)
    for inside in range(len(data) + 1):  # the cap falls `inside` bytes into the sample
        head = filler(LIMIT - inside)
        stream = head + data + TAIL
        out = captured(R, stream, LIMIT)
        assert out.truncated
        assert_prefix_of_whole(R, stream, out, LIMIT, len(head) + min(start, inside))
        if secret_mid_stream and start < inside:  # part of the secret lies before the cap: its marker, or nothing of it
            tail = out.data[len(head) + start :]
            assert tail == b"" or tail.startswith(b"[REDACTED:"), (inside, out.data[len(head) :])


SECRET = "s3cr3t-Value_0123456789/+&é ok"


def literal_forms(value: str) -> dict[str, bytes]:
    raw = value.encode()
    aligned = raw[: len(raw) // 3 * 3]
    return {
        "raw": raw,
        "percent": quote(raw, safe="").encode(),
        "percent-plus": quote_plus(raw, safe="").encode(),
        "json": json.dumps(value)[1:-1].encode(),
        "base64": base64.b64encode(aligned),
        "base64-url": base64.urlsafe_b64encode(aligned),
    }


@pytest.mark.parametrize("form", sorted(literal_forms(SECRET)))
@pytest.mark.parametrize("builtin", [True, False], ids=["builtin", "literals-only"])
def test_literal_and_its_encodings_straddling_the_cap_at_every_offset(form: str, builtin: bool) -> None:
    r = Redactor(literals=[SECRET], builtin=builtin)
    encoded = literal_forms(SECRET)[form]
    for inside in range(len(encoded) + 1):
        head = filler(LIMIT - inside)
        stream = head + b"<" + encoded + b">" + TAIL
        out = captured(r, stream, LIMIT)
        assert_prefix_of_whole(r, stream, out, LIMIT, len(head) + min(inside, 1))
        kept = out.data[len(head) + 1 :]
        assert kept in (b"", b"[REDACTED:literal]") or kept.startswith(b"[REDACTED:literal]>"), (inside, kept)


def test_a_long_literal_widens_the_margin() -> None:
    value = "k" * 3000 + "é" * 1000  # percent-encoded: 9000 + 6000 bytes
    r = Redactor(literals=[value], builtin=False)
    assert r.margin == len(quote(value.encode(), safe="")) > PATTERN_REACH
    encoded = quote(value.encode(), safe="").encode()
    for inside in [*range(64), *range(64, len(encoded), 997), len(encoded) - 1, len(encoded)]:
        stream = filler(10) + encoded + TAIL
        out = captured(r, stream, 10 + inside)
        marker = b"[REDACTED:literal]"
        assert out.data == filler(10) + (marker if inside >= len(marker) else b""), inside


def test_unterminated_secret_at_the_end_of_what_was_captured_is_not_shown() -> None:
    # a private key block longer than the margin: cut in the capture itself, it is redacted to the end
    block = b"-----BEGIN RSA PRIVATE KEY-----\n" + b"MIIEpAIBAAKCAQEA" * 2000
    out = captured(R, filler(100) + block, LIMIT)
    assert out.data == filler(100) + b"[REDACTED:private-key]"
    assert out.truncated
    # a JWT whose payload is longer than the margin: the part before the cap is a marker (when it fits), never a prefix
    jwt = b"eyJhbGciOiJIUzI1NiJ9.eyJ" + b"a" * (2 * PATTERN_REACH) + b".sig"
    for inside in (1, 5, 13, 14, 30):
        out = captured(R, filler(LIMIT - inside) + jwt + TAIL, LIMIT)
        marker = b"[REDACTED:jwt]"
        assert out.data == filler(LIMIT - inside) + (marker if inside >= len(marker) else b""), inside


def test_nothing_past_the_look_ahead_is_shown_in_the_clear() -> None:
    # a redaction early on shortens the output: the room it frees is not filled with bytes that were
    # not judged with a full margin of look-ahead
    key = b"-----BEGIN PRIVATE KEY-----\n" + b"A" * 3000 + b"\n-----END PRIVATE KEY-----\n"
    stream = key + b"x" * (R.margin - 10) + b"ghp_" + b"A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8" * 4 + TAIL
    out = captured(R, stream, 4000)
    assert b"ghp_" not in out.data and b"A1b2" not in out.data
    assert_prefix_of_whole(R, stream, out, 4000, 0)


def test_complete_output_under_the_cap_is_whole() -> None:
    out = captured(R, b"token=abc123def\nok\n", LIMIT)
    assert (out.data, out.truncated, out.count, out.kinds) == (
        b"token=[REDACTED:secret-assignment]\nok\n",
        False,
        1,
        ("secret-assignment",),
    )
    assert captured(R, b"", LIMIT) == CappedOutput(b"", 0, (), False)


def test_cap_never_splits_a_marker_or_a_character() -> None:
    r = Redactor(literals=["hunter22"], builtin=False)
    stream = b"ab hunter22 \xc3\xa9\xc3\xa9"
    for limit in range(len(stream) + 30):
        out = r.redact_capped(stream, limit, complete=True)
        whole = r.redact(stream).data
        assert whole.startswith(out.data)
        assert out.data in (
            b"",
            b"a",
            b"ab",
            b"ab ",
            b"ab [REDACTED:literal]",
            b"ab [REDACTED:literal] ",
            b"ab [REDACTED:literal] \xc3\xa9",
            b"ab [REDACTED:literal] \xc3\xa9\xc3\xa9",
        ), (limit, out.data)
        assert out.truncated is (out.data != whole)


@settings(max_examples=300, deadline=None)
@given(
    before=st.binary(max_size=300),
    after=st.binary(max_size=300),
    limit=st.integers(min_value=0, max_value=400),
    chunk=st.integers(min_value=1, max_value=700),
    sample=st.sampled_from([data for data, _, _ in REDACTED_SAMPLES] + [SECRET.encode()]),
)
def test_any_stream_any_cap_any_chunking(before: bytes, after: bytes, limit: int, chunk: int, sample: bytes) -> None:
    r = Redactor(literals=[SECRET])
    stream = before + sample + after + TAIL
    out = captured(r, stream, limit, chunk=chunk)
    assert_prefix_of_whole(r, stream, out, limit, 0)
    assert out.truncated
