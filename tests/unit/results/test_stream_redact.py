"""Streaming redaction: whatever the chunks, what is shown is what the Redactor makes of the whole stream
(capped: what ``redact_capped`` keeps of the captured beginning), and no part of a secret is ever shown
early -- every intermediate output is a prefix of the whole stream's redaction. Ordinary output is not
held back."""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections.abc import Callable
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.results import Redactor
from orchestrator.results.redact import WindowScan, _builtin_rules
from orchestrator.results.stream_redact import StreamRedactor
from tests.support.secrets import POSITIVES

SECRET = "s3cr3t-Value_0123456789/+&é ok"
SECRET2 = "pässwörd-ü€-9z"  # multi-byte characters
LITERALS = (SECRET, SECRET2)
R = Redactor(literals=LITERALS)
MARKER = re.compile(rb"\[REDACTED:[a-z-]+\]")


def encodings(value: str) -> list[bytes]:
    raw = value.encode()
    aligned = raw[: len(raw) // 3 * 3]
    return [raw, quote(raw, safe="").encode(), json.dumps(value)[1:-1].encode(), base64.b64encode(aligned)]


SAMPLES = [data for data, _, kind in POSITIVES if kind] + [e for v in LITERALS for e in encodings(v)]
NEAR_MISSES = [
    b"password=",
    b"token: ",
    b"ghp_",
    b"eyJhbGciOi",
    b"-----BEGIN PRIVATE KEY-----\n",
    b"-----END PRIVATE KEY-----\n",
    b"https://user:",
    b"Authorization: Bearer ",
    b"s3cr3t-",
    b"p\xc3\xa4ss",
    b"\xe2\x82",
    b"AKIA",
    b"\xc3\xa9",
    b"\n",
    b" ",
]


def stream(redactor: Redactor, chunks: list[bytes]) -> bytes:
    """Feed ``chunks`` (no cap), checking after each that what was shown is a prefix of the whole redaction
    and holds no literal secret."""
    whole = redactor.redact(b"".join(chunks)).data
    streamer = StreamRedactor(redactor)
    shown = b""
    for chunk in chunks:
        shown += streamer.feed(chunk)
        assert whole.startswith(shown), (shown[-60:], whole[len(shown) - 60 : len(shown) + 20])
        assert all(secret.encode() not in shown for secret in LITERALS)
    return shown + streamer.finish()


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


pieces = st.one_of(
    st.sampled_from(SAMPLES),
    st.sampled_from(NEAR_MISSES),
    st.binary(max_size=24),
    st.text(max_size=16).map(str.encode),
    st.sampled_from(SAMPLES).map(lambda s: s[: len(s) // 2]),  # a secret's beginning, never finished
)
texts = st.lists(pieces, max_size=10).map(b"".join)
cut_lists = st.lists(st.integers(min_value=0, max_value=10_000), max_size=12)


@settings(max_examples=500, deadline=None)
@given(text=texts, cuts=cut_lists)
def test_any_split_shows_exactly_the_redaction_of_the_whole(text: bytes, cuts: list[int]) -> None:
    assert stream(R, split(text, cuts)) == R.redact(text).data


@settings(max_examples=500, deadline=None)
@given(
    text=texts,
    cuts=cut_lists,
    limit=st.integers(min_value=0, max_value=300),
    captured_only=st.booleans(),
    builtin=st.booleans(),
)
def test_any_split_any_cap_shows_what_redact_capped_keeps(
    text: bytes, cuts: list[int], limit: int, captured_only: bool, builtin: bool
) -> None:
    r = Redactor(literals=LITERALS, builtin=builtin)
    head = text[: limit + r.margin]  # what the backend captures
    complete = len(text) <= len(head)
    expected = r.redact_capped(head, limit, complete=complete)
    streamer = StreamRedactor(r, limit)
    shown = b""
    # the service feeds what was captured and says whether that was all; fed everything, it finds out
    for chunk in split(head if captured_only else text, cuts):
        shown += streamer.feed(chunk)
        assert expected.data.startswith(shown)
        if streamer.truncated:
            assert shown == expected.data  # once cut, nothing more comes
    shown += streamer.finish(complete=complete if captured_only else True)
    assert (shown, streamer.truncated, streamer.count, streamer.kinds) == (
        expected.data,
        expected.truncated,
        expected.count,
        expected.kinds,
    )


@pytest.mark.parametrize("sample", SAMPLES, ids=range(len(SAMPLES)))
def test_a_secret_split_at_every_offset_never_shows_any_part_early(sample: bytes) -> None:
    text = b"before " + sample + b" after\n"
    for cut in range(1, len(text)):
        assert stream(R, [text[:cut], text[cut:]]) == R.redact(text).data, cut
    assert stream(R, [bytes([b]) for b in text]) == R.redact(text).data  # a byte at a time


def test_every_builtin_pattern_knows_its_unfinished_matches() -> None:
    """Each built-in has the regex of its beginnings, and every beginning of a sample's secret is held from
    the secret's first byte (the samples redact part of the text: that part starts at the first byte where
    input and output differ and ends where they agree again from the end)."""
    assert all(rule.tail is not None for rule in _builtin_rules())
    r = Redactor()
    for data, expected, kind in POSITIVES:
        if not kind:
            continue
        start = 0
        while data[start] == expected[start]:
            start += 1
        end = len(data)
        while data[end - 1] == expected[len(expected) - (len(data) - end) - 1] and end > start:
            end -= 1
        for cut in range(start + 1, end):
            scan = r.scan_window(data[:cut], 0, final=False)
            held_from = min([scan.hold, *(s for s, e, _ in scan.spans if s < scan.hold < e)])
            assert held_from <= start, (kind, data[:cut])


ORDINARY_LINES = [
    b"hello world\n",
    b"password = get_password()\n",
    b"token: Token\n",
    b"export PATH=/usr/local/bin:/usr/bin\n",
    b"see https://example.com:8080/path?q=1\n",
    b"ghp_tooShort and -----not a key-----\n",
    b"eyJ is how a JWT starts\n",
    b"Downloading 57% [=======>      ] 1.2 MB/s\n",
    b"r\xc3\xa9sum\xc3\xa9 \xe2\x82\xac 12\n",
    b"password=hunter2xy9 and Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123\n",
]


@pytest.mark.parametrize("line", ORDINARY_LINES, ids=range(len(ORDINARY_LINES)))
def test_a_line_ending_in_a_newline_comes_out_at_once(line: bytes) -> None:
    streamer = StreamRedactor(R, 1 << 20)
    assert streamer.feed(line) == R.redact(line).data
    assert streamer.held == 0


def test_only_a_possible_secret_is_held_back() -> None:
    r = Redactor()
    cases = {
        b"a": b"a",  # nothing begins with it (`printf a`)
        b"progress 50%": b"progress 50%",
        b"password=hun": b"password=",  # the value may go on
        b"Authorization: Bearer abc": b"Authorization: ",
        b"clone https://user:pw@host": b"clone https://user:",  # the password may contain '@'
        b"token ghp_A1b2": b"token ",
        b"see g": b"see ",  # github_pat_... may follow
        b"x \xe2\x82": b"x ",  # an unfinished character
        b"-----BEGIN RSA PRIVATE KEY-----\nMIIE\n": b"",  # an open key block, until its END line
    }
    for text, shown_now in cases.items():
        streamer = StreamRedactor(r, 1 << 20)
        assert streamer.feed(text) == shown_now, text
        assert streamer.held == len(text) - len(shown_now)
        assert shown_now + streamer.finish() == r.redact(text).data
    streamer = StreamRedactor(Redactor(literals=["hunter2-very-secret"]), 1 << 20)
    assert streamer.feed(b"id hunter2-ve") == b"id "  # the beginning of a literal


def test_pieces_of_utf8_text_decode_on_their_own() -> None:
    text = ("é€𝄞 " * 40 + SECRET2 + " 終わり\n").encode() * 3
    for size in range(1, 9):
        streamer = StreamRedactor(R, 1 << 20)
        shown = []
        for at in range(0, len(text), size):
            piece = streamer.feed(text[at : at + size])
            piece.decode("utf-8")  # never ends inside a character
            shown.append(piece)
        shown.append(streamer.finish())
        assert b"".join(shown) == R.redact(text).data
        assert SECRET2.encode() not in b"".join(shown)


def test_the_cap_never_splits_a_character_or_a_marker() -> None:
    r = Redactor(literals=["hunter22"], builtin=False)
    text = b"ab hunter22 \xc3\xa9\xc3\xa9 more text\n"
    for limit in range(len(text) + 10):
        for size in (1, 2, 5):
            streamer = StreamRedactor(r, limit)
            shown = b"".join(streamer.feed(text[at : at + size]) for at in range(0, len(text), size))
            shown += streamer.finish()
            expected = r.redact_capped(text, limit, complete=True)
            assert (shown, streamer.truncated) == (expected.data, expected.truncated), (limit, size)
            assert not MARKER.sub(b"", shown).count(b"[REDACTED")


def test_once_the_cap_is_reached_nothing_more_is_shown_and_the_flag_says_so() -> None:
    streamer = StreamRedactor(R, 10)
    assert streamer.feed(b"0123456") == b"0123456"
    assert not streamer.truncated
    assert streamer.feed(b"789abc") == b"789"
    assert streamer.truncated
    assert streamer.feed(b"more\n") == b""
    assert streamer.finish() == b""
    exact = StreamRedactor(R, 4)
    assert exact.feed(b"abcd") == b"abcd"
    assert exact.finish() == b"" and not exact.truncated  # the stream ended right at the cap


def test_past_the_raw_cap_only_a_complete_stream_shows_more() -> None:
    """A redaction can make the output shorter than the raw stream: raw bytes past the cap are then shown
    only once the stream is known to have ended within the captured look-ahead (as redact_capped)."""
    r = Redactor(literals=["a-long-secret-value-0123456789"], builtin=False)
    text = b"x a-long-secret-value-0123456789 tail"
    longer = text + b"." * 100  # captured: its first limit + margin bytes only
    for stream_, complete in ((text, True), (longer[: 30 + r.margin], False)):
        streamer = StreamRedactor(r, 30)
        now = streamer.feed(stream_)
        assert now == b"x [REDACTED:literal]"  # " tail" is past raw offset 30: it waits
        shown = now + streamer.finish(complete=complete)
        assert shown == r.redact_capped(stream_, 30, complete=complete).data
        assert shown.endswith(b" tail") is complete
        assert streamer.truncated is not complete


class _Counting(Redactor):
    """The real redactor, counting the bytes it is asked to scan."""

    scanned = 0

    def scan_window(self, data: bytes, start: int, *, final: bool) -> WindowScan:
        self.scanned += len(data) - start
        return super().scan_window(data, start, final=final)


def _open_value(size: int) -> bytes:
    return b"start\npassword=" + b"a1" * (size // 2) + b"\nafter\n"


def _open_key(size: int) -> bytes:
    return b"start\n-----BEGIN PRIVATE KEY-----\n" + b"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n" * (size // 33) + b"end\n"


def _token_run(size: int) -> bytes:
    return b"jwt eyJ" + b"x" * size + b"\n"


@pytest.mark.parametrize("make", [_open_value, _open_key, _token_run], ids=["open value", "open key", "token run"])
def test_a_long_open_secret_in_tiny_chunks_takes_linear_work(make: Callable[[int], bytes]) -> None:
    """However long a secret stays open, chunk after chunk, scanning it costs in proportion to its size
    (twice as long: about twice the work, where rescanning all of it at each chunk would be four times)."""
    work = []
    for size in (100_000, 200_000):
        text = make(size)
        r = _Counting()
        streamer = StreamRedactor(r, 1 << 20)
        shown = b"".join(streamer.feed(text[at : at + 7]) for at in range(0, len(text), 7)) + streamer.finish()
        assert shown == r.redact_capped(text, 1 << 20, complete=True).data
        work.append(r.scanned)
    assert work[1] < 2.3 * work[0], work


def test_ordinary_output_keeps_only_a_small_window() -> None:
    streamer = StreamRedactor(R, 8 << 20)
    line = b"an ordinary line of build output, nothing secret in it at all 0123456789\n"
    for _ in range(20_000):
        assert streamer.feed(line) == line
        assert streamer.held == 0


def test_custom_patterns_hold_back_their_reach() -> None:
    r = Redactor(extra_patterns=[r"CUST-[0-9]{6}"], builtin=False)
    streamer = StreamRedactor(r, None)
    assert streamer.feed(b"id CUST-123") == b""  # its beginnings are unknown: up to margin bytes wait
    assert streamer.feed(b"456 ok\n" + b"." * r.margin) == b"id [REDACTED:custom] ok\n"
    assert streamer.finish() == b"." * r.margin


@settings(max_examples=200, deadline=None)
@given(text=texts, cuts=cut_lists)
def test_custom_patterns_split_anywhere(text: bytes, cuts: list[int]) -> None:
    r = Redactor(extra_patterns=[r"CUST-[0-9]{6}"], literals=LITERALS)
    text = text + b" CUST-" + text[:3] + b"123456\n"
    assert stream(r, split(text, cuts)) == r.redact(text).data
