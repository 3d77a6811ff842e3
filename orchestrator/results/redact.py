"""Secret redaction for command output, before it leaves the orchestrator.

:class:`Redactor` replaces every secret it recognises in a byte string with ``[REDACTED:<kind>]`` and reports
how many replacements it made and of which kinds (never the secret itself). It works on bytes (output may
be any encoding, or binary), with ``re`` patterns compiled on bytes.

Two sources of secrets:

* **literals** -- values the orchestrator knows are secret (the request's env values). Each is redacted
  wherever it appears, byte for byte, together with its common encodings: percent-encoding (``quote``
  and ``quote_plus``), the JSON string escape, and base64 (standard and URL-safe) of the value as printed
  alone (``echo $TOKEN | base64``: the aligned prefix, which does not depend on what follows the value).
  Literals shorter than :data:`MIN_LITERAL_LENGTH` characters, and whitespace-only ones, are ignored:
  redacting every ``1``, ``C`` or ``yes`` of the output would destroy it and protect nothing (a secret that
  short cannot be kept anyway). Matching is case-sensitive. Overlapping literals are redacted as their
  union (so "longest first" holds: a literal inside a longer one never leaves part of the longer one).
* **built-in patterns** -- well-known credential shapes, listed in :data:`BUILTIN_KINDS`. Prefixed
  tokens are redacted whole (``ghp_…`` becomes ``[REDACTED:github-token]``); key/value forms keep the
  key and redact only the value (``password=[REDACTED:secret-assignment]``,
  ``https://user:[REDACTED:url-credentials]@host``, ``Authorization: Bearer [REDACTED:…]``).
  They are heuristics: they cut the common leaks, they do not prove output free of secrets.

When matches overlap, the union is replaced once and named after the most specific kind involved
(literal > private key > custom pattern > vendor token > header/URL > generic assignment).

Time is linear in the input: every pattern starts with a literal (``re`` then skips ahead with its
prefix search; where the natural first byte is a common letter the literal starts one or more bytes
later and a look-behind checks the rest), every repetition is bounded, possessive, or delimited by a
character it cannot consume, and a pattern that could otherwise restart inside a long run of its own
characters is guarded by a look-behind. Case-insensitive patterns run on ``data.lower()`` (same offsets)
instead of ``re.IGNORECASE``, which would defeat the prefix search. Each pattern, and each literal form,
is one pass over the output: about 100-150 MB/s for the built-ins on source code and logs, minus about
3 ms per 30 MB per literal form. Tests cover pathological 1 MiB inputs.

Generic ``key = value`` values end at whitespace, a quote or ``, ; & < > ( ) { } [ ]``; comparisons
(``==``, ``!=``) and values that look like code (see :func:`_assigned_value`) are left alone, so
printing source code does not shred it.

Redact, then cap: a secret cut in two by a cap would no longer match, and its first part would be shown.
:meth:`Redactor.redact_capped` does both: capture :attr:`Redactor.margin` bytes more than the cap (the
longest literal form, and :data:`PATTERN_REACH`: every built-in pattern decides within it, and the ones
that could run on, a private-key block, a quoted value, a JWT, also match when cut at the end of what was
captured), redact, then cut at the cap, never inside a ``[REDACTED:...]`` marker.

Streaming (:mod:`orchestrator.results.stream_redact`) judges a stream window by window with
:meth:`Redactor.scan_window`: the secrets found, and where more bytes could still change them -- the end
of the text that begins a literal form, and an unfinished match of a pattern: every built-in pattern comes
with the regex of its unfinished matches (``_Rule.tail``, built with :mod:`orchestrator.results.unfinished`).
"""

from __future__ import annotations

import base64
import functools
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, quote_plus

from orchestrator.domain.errors import InputInvalid
from orchestrator.results import unfinished as un

MIN_LITERAL_LENGTH: Final = 4
"""Literals shorter than this many characters are not redacted (too many false positives)."""

LITERAL_KIND: Final = "literal"
CUSTOM_KIND: Final = "custom"

PATTERN_REACH: Final = 4096
"""Bytes past a cap the patterns need to judge a secret that starts before it. The built-ins decide within
about 100 bytes (a 70-byte PyPI token, an 80-byte private-key header); a custom pattern whose matches are
longer than this is only as good at the cap as what it matches in 4 KiB."""

_MIN_ENCODED_LENGTH: Final = 8
"""Encoded forms of a literal (percent, JSON, base64) shorter than this are not searched."""


@dataclass(frozen=True, slots=True)
class RedactionResult:
    """The redacted bytes, how many replacements were made, and their kinds (sorted, no duplicates)."""

    data: bytes
    count: int
    kinds: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CappedOutput:
    """What :meth:`Redactor.redact_capped` keeps of a stream: redacted, then capped."""

    data: bytes
    count: int
    """Redactions in ``data`` (a secret cut off by the cap is not shown, and not counted)."""
    kinds: tuple[str, ...]
    truncated: bool
    """``data`` is not the whole (redacted) stream."""


@dataclass(frozen=True, slots=True)
class WindowScan:
    """What :meth:`Redactor.scan_window` found in a window of a stream (offsets in the window)."""

    spans: tuple[tuple[int, int, str], ...]
    """The secrets found from where matching started: (start, end, kind), sorted, not overlapping."""
    matches: tuple[tuple[int, int], ...]
    """Every pattern match (a secret or not): matching may resume at a later window only outside them."""
    restart: int
    """Matching must resume at or before this offset: a match that more bytes could change may begin here."""
    hold: int
    """A secret that more bytes could still change (or complete) may begin here: nothing from here on is
    final. ``len(data)`` when nothing is pending."""


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    priority: int
    regex: re.Pattern[bytes]
    lower: bool = False
    """Match against ``data.lower()`` (ASCII only, same length, same offsets): case-insensitive and fast."""
    check: Callable[[bytes, int, int, int], bool] | None = None
    """Extra test ``check(haystack, match_start, secret_start, secret_end)``; False keeps the match out."""
    back: int = 0
    """Whole-match rules anchored after their first bytes (a rarer byte makes ``re``'s prefix search faster;
    a look-behind checks the bytes before): how many bytes before the match belong to the secret."""
    tail: re.Pattern[bytes] | None = None
    """An unfinished match at the end of the text (see :mod:`orchestrator.results.unfinished`), for
    streaming; every built-in has one. Without one (custom patterns), the last :attr:`Redactor.margin` bytes
    are held back."""


# priorities: the kind reported when matches overlap
_P_LITERAL = 100
_P_PRIVATE_KEY = 90
_P_CUSTOM = 60
_P_TOKEN = 50
_P_HEADER = 20
_P_URL = 15
_P_ASSIGNMENT = 10

_B64URL = rb"[A-Za-z0-9_\-]"
_PLACEHOLDERS: Final = frozenset(
    {b"none", b"null", b"nil", b"true", b"false", b"undefined", b"redacted", b"changeme", b"required"}
    # type annotations in source code: def login(password: str), token: bytes | None
    | {b"str", b"bytes", b"int", b"string", b"any", b"secretstr", b"bool", b"text", b"optional"}
    # documentation placeholders
    | {b"password", b"passwd", b"pass", b"pwd", b"secret", b"token", b"your-token", b"your_token", b"mysecret"}
)


def _mixed_case_with_digit(haystack: bytes, _match: int, start: int, end: int) -> bool:
    body = haystack[start + 3 : end]  # after "sk-"
    return any(48 <= c <= 57 for c in body) and any(65 <= c <= 90 for c in body) and any(97 <= c <= 122 for c in body)


def _mixed_case(haystack: bytes, _match: int, start: int, end: int) -> bool:
    body = haystack[start + 3 : end]  # after "hf_"
    return any(65 <= c <= 90 for c in body) and any(97 <= c <= 122 for c in body)


def _not_redacted(haystack: bytes, _match: int, start: int, end: int) -> bool:
    value = haystack[start:end]
    return not value[:9].lower().startswith(b"[redacted") and value.strip(b"*x.") != b""


def _bearer_token(haystack: bytes, _match: int, start: int, end: int) -> bool:
    # prose says "a bearer token is ...": real tokens are long or contain digits
    return end - start >= 20 or any(48 <= c <= 57 for c in haystack[start:end])


def _not_placeholder(haystack: bytes, _match: int, start: int, end: int) -> bool:
    """Values of key=value forms that are references or placeholders, not secrets."""
    value = haystack[start:end].strip().lower()
    if not value or value[:1] in (b"$", b"%", b"<", b"{") or value.startswith(b"[redacted"):
        return False
    if value.strip(b"*x.") == b"" or value.strip(b"\xe2\x80\xa2") == b"":  # ****, xxx, ..., •••• (masked)
        return False
    return value not in _PLACEHOLDERS


_CODE_NAME: Final = re.compile(rb"[a-z_][a-z_.]*")
_SHORT_NUMBER: Final = re.compile(rb"-?[0-9]{1,5}")
_COLOR: Final = re.compile(rb"#[0-9a-f]{3,8}")
_SCHEME_LOOK_BACK: Final = 256

LOOK_BEHIND: Final = _SCHEME_LOOK_BACK + 16
"""How far before a match the built-in patterns and their checks look (the longest look-behind reaches 9
bytes back): matching resumed this far into a window judges as on the whole text."""


def _assigned_value(haystack: bytes, match: int, start: int, end: int) -> bool:
    """The value of a key=value form, unless it looks like code or a placeholder.

    Source code is ordinary output (``cat app.py``, ``git diff``): an unquoted value that is a short
    name without digits (``password = user_password``, ``token: Token``, ``"token": i``) or a small
    number (``token = 0``) is taken for code, not a secret. The price: an unquoted all-letter password of
    24 characters or fewer (``PASSWORD=letmein``) is not caught by this pattern (literals still are).
    A key that is the user of a URL (``https://x-access-token:ghp_…@host``) is left to url-credentials,
    which takes the password and keeps the host."""
    before = haystack[max(0, match - _SCHEME_LOOK_BACK) : match]
    scheme = before.rfind(b"://")
    if scheme != -1 and not any(c in b" \t\r\n/@\"'" for c in before[scheme + 3 :]):
        return False
    value = haystack[start:end]
    if _COLOR.fullmatch(value):  # style sheets: Token: "#f8f8f2"
        return False
    if haystack[start - 1 : start] not in (b'"', b"'"):
        if _SHORT_NUMBER.fullmatch(value):
            return False
        if _CODE_NAME.fullmatch(value) and (len(value) <= 24 or b"_" in value or b"." in value):
            return False
    return _not_placeholder(haystack, match, start, end)


# key = value: the value, quoted (the closing quote may be missing only at the very end: output may be
# cut) or bare. A bare value followed by "(" or "[" is code (password = get_password()), not a secret.
# Comparisons (==, !=, <=) are code too. Runs on lowered data.
_ASSIGN_TAIL = (
    rb"[\"']?[ \t]*+(?>:=|=>|=(?!=)|:(?!:))[ \t]*+"
    rb"(?:\"((?:[^\"\\\r\n]|\\.)++)(?:\"|\Z)"
    rb"|'([^'\r\n]++)(?:'|\Z)"
    rb"|([^\s\"'`,;&<>(){}\[\]]++)(?![(\[]))"
)


# the same, unfinished: the value from its opening quote (one byte before the secret itself)
_ASSIGN_TAIL_PARTS: Final[tuple[un.Part, ...]] = (
    un.free(rb"[\"']?[ \t]*"),
    un.free(rb"(?::=|=>|=(?!=)|:(?!:))"),
    un.free(rb"[ \t]*"),
    un.free(rb"(?:\"(?:[^\"\\\r\n]|\\.)*\\?|'[^'\r\n]*|[^\s\"'`,;&<>(){}\[\]]+)?"),
)


def _assignment(stem: bytes, *stem_parts: un.Part) -> _Rule:
    parts = (*stem_parts, *_ASSIGN_TAIL_PARTS)
    return _Rule(
        "secret-assignment",
        _P_ASSIGNMENT,
        re.compile(stem + _ASSIGN_TAIL),
        lower=True,
        check=_assigned_value,
        tail=un.unfinished(parts, secret=len(parts) - 1),
    )


_PRIVATE_KEY_END: Final = rb"-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
_API_KEY_WORDS: Final = rb"|".join(
    rb"(?<=" + word + sep + rb"key)"
    for word in (rb"api", rb"access", rb"private", rb"secret")
    for sep in (rb"_", rb"-", rb"")
)


@functools.cache
def _builtin_rules() -> tuple[_Rule, ...]:
    """Compiled on first use: a run whose output is empty never pays for ~20 regex compilations."""
    return (
        # PEM/OpenSSH/PGP private keys; an unterminated block (output cut) runs to the end
        _Rule(
            "private-key",
            _P_PRIVATE_KEY,
            re.compile(
                rb"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
                rb"(?>.*?(?:" + _PRIVATE_KEY_END + rb"|\Z))",
                re.DOTALL,
            ),
            # a header begun, or a block not yet ended
            tail=un.unfinished(
                (
                    un.first(b"-----BEGIN"),
                    un.run(rb"[ A-Z0-9]", 0, 40),
                    un.literal(b"PRIVATE KEY"),
                    un.optional(b" BLOCK"),
                    un.literal(b"-----"),
                    un.free(rb"(?:(?!" + _PRIVATE_KEY_END + rb").)*"),
                ),
                secret=0,
                flags=re.DOTALL,
            ),
        ),
        _Rule(
            "aws-access-key-id",
            _P_TOKEN,
            re.compile(
                rb"A(?:KIA|SIA|GPA|IDA|ROA|IPA|NPA|NVA|PKA|BIA|CCA)(?<![A-Z0-9]....)[A-Z0-9]{16}(?![A-Z0-9])",
                re.DOTALL,
            ),
            tail=un.unfinished(
                (
                    (rb"A(?<![A-Z0-9]A)", un.NEVER),
                    un.alternatives(
                        b"KIA", b"SIA", b"GPA", b"IDA", b"ROA", b"IPA", b"NPA", b"NVA", b"PKA", b"BIA", b"CCA"
                    ),
                    un.run(rb"[A-Z0-9]", 16, 16),
                ),
                secret=0,
            ),
        ),
        _Rule(
            "aws-secret-access-key",
            _P_TOKEN,
            re.compile(
                rb"cess(?:(?<=secret_access)|(?<=secretaccess))_?key[\"']?[ \t]*+(?::|=|=>)[ \t]*+[\"']?"
                rb"([a-z0-9/+]{40})(?![a-z0-9/+=])",
            ),
            lower=True,
            tail=un.unfinished(
                (
                    un.first(b"cess"),
                    un.free(rb"(?:(?<=secret_access)|(?<=secretaccess))_?"),
                    un.literal(b"key"),
                    un.free(rb"[\"']?[ \t]*"),
                    un.free(rb"(?::|=>|=)"),
                    un.free(rb"[ \t]*[\"']?"),
                    un.run(rb"[a-z0-9/+]", 40, 40),
                ),
                secret=6,
            ),
        ),
        _Rule(
            "authorization-header",
            _P_HEADER,
            re.compile(
                rb"zation(?<=authorization)[\"']?[ \t]*+[:=][ \t]*+[\"']?"
                rb"(?:(?:bearer|basic|token|digest|negotiate|ntlm|apikey|aws4-hmac-sha256)[ \t]++)?+"
                rb"([^\s\"'][^\r\n\"']*+)"
            ),
            lower=True,
            check=_not_redacted,
            # the value from its first byte: a scheme word still being written may turn out to be the value
            tail=un.unfinished(
                (
                    un.first(b"zation"),
                    un.free(rb"(?<=authorization)[\"']?[ \t]*"),
                    un.free(rb"[:=]"),
                    un.free(rb"[ \t]*[\"']?"),
                    un.free(rb"(?:[^\s\"'][^\r\n\"']*)?"),
                ),
                secret=4,
            ),
        ),
        _Rule(
            "bearer-token",
            _P_HEADER,
            re.compile(rb"bearer[ \t]++([a-z0-9\-._~+/]{8,}+=*+)"),
            lower=True,
            check=_bearer_token,
            tail=un.unfinished(
                (un.first(b"bearer"), un.free(rb"[ \t]+"), un.free(rb"[a-z0-9\-._~+/]*=*")),
                secret=2,
            ),
        ),
        _Rule(
            "github-token",
            _P_TOKEN,
            re.compile(rb"gh[pousr]_(?<![A-Za-z0-9_]gh._)[A-Za-z0-9]{36,}+", re.DOTALL),
            tail=un.unfinished(
                (
                    (rb"g(?<![A-Za-z0-9_]g)h", rb"g(?<![A-Za-z0-9_]g)"),
                    (rb"[pousr]_", rb"[pousr]?"),
                    un.free(rb"[A-Za-z0-9]*"),
                ),
                secret=0,
            ),
        ),
        _Rule(
            "github-token",
            _P_TOKEN,
            re.compile(rb"github_pat_[A-Za-z0-9_]{22,}+"),
            tail=un.unfinished((un.first(b"github_pat_"), un.free(rb"[A-Za-z0-9_]*")), secret=0),
        ),
        _Rule(
            "gitlab-token",
            _P_TOKEN,
            re.compile(rb"gl(?:pat|ptt|dt|rt|ft|soat|oas|cbt|imt|agent)-[A-Za-z0-9_\-]{20,}+"),
            tail=un.unfinished(
                (
                    un.first(b"gl"),
                    un.alternatives(b"pat", b"ptt", b"dt", b"rt", b"ft", b"soat", b"oas", b"cbt", b"imt", b"agent"),
                    un.literal(b"-"),
                    un.free(rb"[A-Za-z0-9_\-]*"),
                ),
                secret=0,
            ),
        ),
        _Rule(
            "slack-token",
            _P_TOKEN,
            re.compile(rb"xox[abposr]-[A-Za-z0-9\-]{10,}+"),
            tail=un.unfinished(
                (un.first(b"xox"), un.free(rb"[abposr]"), un.literal(b"-"), un.free(rb"[A-Za-z0-9\-]*")),
                secret=0,
            ),
        ),
        _Rule(
            "stripe-key",
            _P_TOKEN,
            re.compile(rb"k_(?:live|test)_(?<=[rs]k_...._)(?<![A-Za-z0-9][rs]k_...._)[A-Za-z0-9]{16,}+", re.DOTALL),
            back=1,
            tail=un.unfinished(
                (
                    (rb"[rs](?<![A-Za-z0-9][rs])k", rb"[rs](?<![A-Za-z0-9][rs])"),
                    un.literal(b"_"),
                    un.alternatives(b"live", b"test"),
                    un.literal(b"_"),
                    un.free(rb"[A-Za-z0-9]*"),
                ),
                secret=0,
            ),
        ),
        _Rule(
            "openai-style-key",
            _P_TOKEN,
            re.compile(rb"k-(?<=sk-)(?<![A-Za-z0-9_\-]sk-)[A-Za-z0-9_\-]{20,}+"),
            check=_mixed_case_with_digit,
            back=1,
            tail=un.unfinished(
                (
                    (rb"s(?<![A-Za-z0-9_\-]s)k", rb"s(?<![A-Za-z0-9_\-]s)"),
                    un.literal(b"-"),
                    un.free(rb"[A-Za-z0-9_\-]*"),
                ),
                secret=0,
            ),
        ),
        _Rule(
            "google-api-key",
            _P_TOKEN,
            re.compile(rb"AIza(?<![A-Za-z0-9_\-]AIza)[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-])"),
            tail=un.unfinished(
                ((rb"A(?<![A-Za-z0-9_\-]A)", un.NEVER), un.literal(b"Iza"), un.run(_B64URL, 35, 35)), secret=0
            ),
        ),
        _Rule(
            "npm-token",
            _P_TOKEN,
            re.compile(rb"pm_(?<=npm_)(?<![A-Za-z0-9_]npm_)[A-Za-z0-9]{36}(?![A-Za-z0-9])"),
            back=1,
            tail=un.unfinished(
                (
                    (rb"n(?<![A-Za-z0-9_]n)p", rb"n(?<![A-Za-z0-9_]n)"),
                    un.literal(b"m_"),
                    un.run(rb"[A-Za-z0-9]", 36, 36),
                ),
                secret=0,
            ),
        ),
        _Rule(
            "pypi-token",
            _P_TOKEN,
            re.compile(rb"AgEIcHlwaS5vcmc(?<=pypi-AgEIcHlwaS5vcmc)[A-Za-z0-9_\-]{50,}+"),
            back=5,
            tail=un.unfinished((un.first(b"pypi-AgEIcHlwaS5vcmc"), un.free(_B64URL + b"*")), secret=0),
        ),
        _Rule(
            "huggingface-token",
            _P_TOKEN,
            re.compile(rb"hf_(?<![A-Za-z0-9_]hf_)[A-Za-z0-9]{30,}+(?![A-Za-z0-9_])"),
            check=_mixed_case,
            tail=un.unfinished(
                (
                    (rb"h(?<![A-Za-z0-9_]h)f", rb"h(?<![A-Za-z0-9_]h)"),
                    un.literal(b"_"),
                    un.free(rb"[A-Za-z0-9]*"),
                ),
                secret=0,
            ),
        ),
        # header.payload.signature; one cut off at the end of the output (a cap) is redacted as far as it goes
        _Rule(
            "jwt",
            _P_TOKEN,
            re.compile(
                rb"yJ(?<=eyJ)(?<!" + _B64URL + rb"eyJ)" + _B64URL + rb"{7,}+"
                rb"(?:\." + _B64URL + rb"{4,}+(?:(?:\." + _B64URL + rb"*+){1,3}+|\Z)|\Z)"
            ),
            back=1,
            tail=un.unfinished(
                (
                    (rb"e(?<!" + _B64URL + rb"e)y", rb"e(?<!" + _B64URL + rb"e)"),
                    un.literal(b"J"),
                    un.free(_B64URL + rb"*(?:\." + _B64URL + rb"*){0,4}"),
                ),
                secret=0,
            ),
        ),
        # user:password@ in URLs (any scheme): the password only; it may contain '@' (the last one ends it)
        _Rule(
            "url-credentials",
            _P_URL,
            re.compile(rb"://[^\s/?#@:\"'<>]*+:([^\s/?#\"'<>]+)@"),
            check=_not_placeholder,
            tail=un.unfinished(
                (
                    un.first(b"://"),
                    un.free(rb"[^\s/?#@:\"'<>]*"),
                    un.literal(b":"),
                    un.free(rb"[^\s/?#\"'<>]*"),
                ),
                secret=3,
            ),
        ),
        # key = value where the key ends with a secret-ish word (DB_PASSWORD, api-key, "client_secret", x-api-key)
        _assignment(
            rb"pass(?:word|phrase|wd(?<!/passwd))",  # not /etc/passwd: ...
            un.first(b"pass"),
            (rb"(?:word|phrase|wd(?<!/passwd))", un.alternatives(b"word", b"phrase", b"wd")[1]),
        ),
        _assignment(rb"cret(?<=secret)", un.first(b"cret"), un.free(rb"(?<=secret)")),
        _assignment(rb"ken(?<=token)", un.first(b"ken"), un.free(rb"(?<=token)")),
        _assignment(rb"key(?:" + _API_KEY_WORDS + rb")", un.first(b"key"), un.free(rb"(?:" + _API_KEY_WORDS + rb")")),
    )


BUILTIN_KINDS: Final[tuple[str, ...]] = (
    "authorization-header",
    "aws-access-key-id",
    "aws-secret-access-key",
    "bearer-token",
    "github-token",
    "gitlab-token",
    "google-api-key",
    "huggingface-token",
    "jwt",
    "npm-token",
    "openai-style-key",
    "private-key",
    "pypi-token",
    "secret-assignment",
    "slack-token",
    "stripe-key",
    "url-credentials",
)
"""The kinds the built-in patterns report (plus ``literal`` and ``custom``)."""


def _encode_literal(value: str | bytes) -> bytes:
    if isinstance(value, bytes):
        return value
    try:
        return value.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")


def _literal_forms(value: str | bytes) -> set[bytes]:
    """The value and its common encodings (see the module docstring)."""
    raw = _encode_literal(value)
    text = raw.decode("utf-8", "surrogateescape")
    if len(text) < MIN_LITERAL_LENGTH or not raw.strip():
        return set()
    forms = {raw}
    encoded = {
        quote(raw, safe="").encode("ascii"),
        quote_plus(raw, safe="").encode("ascii"),
    }
    try:
        encoded.add(json.dumps(text, ensure_ascii=False)[1:-1].encode("utf-8"))
        encoded.add(json.dumps(text)[1:-1].encode("ascii"))
    except UnicodeEncodeError:  # lone surrogates from undecodable bytes: no JSON form
        pass
    aligned = raw[: len(raw) // 3 * 3]
    if aligned:
        encoded.add(base64.b64encode(aligned))
        encoded.add(base64.urlsafe_b64encode(aligned))
    forms.update(form for form in encoded if len(form) >= _MIN_ENCODED_LENGTH)
    return forms


class Redactor:
    """Replaces secrets in output with ``[REDACTED:<kind>]``. Immutable and thread-safe once built.

    ``extra_patterns`` are regular expressions (Python syntax, compiled on bytes, so ``\\w`` is ASCII)
    reported as kind ``custom``: if a pattern has capturing groups, the first group that took part in the
    match is redacted, else the whole match. Their running time is the caller's responsibility.
    ``literals`` are exact secret values (see the module docstring). ``builtin=False`` turns the built-in
    patterns off (literals and extra patterns still apply).
    """

    __slots__ = ("_builtin", "_extra", "_literals")

    def __init__(
        self,
        *,
        extra_patterns: Sequence[str] = (),
        literals: Iterable[str | bytes] = (),
        builtin: bool = True,
    ) -> None:
        self._builtin = builtin
        rules: list[_Rule] = []
        for index, pattern in enumerate(extra_patterns):
            try:
                compiled = re.compile(pattern.encode("utf-8"))
            except re.error as e:
                raise InputInvalid(
                    f"extra_patterns[{index}] is not a valid regular expression: {e}",
                    details={"field": f"extra_patterns[{index}]"},
                ) from e
            rules.append(_Rule(CUSTOM_KIND, _P_CUSTOM, compiled))
        self._extra: tuple[_Rule, ...] = tuple(rules)
        forms: set[bytes] = set()
        for literal in literals:
            forms |= _literal_forms(literal)
        # searched with bytes.find (faster than re for plain strings); overlapping matches are merged
        self._literals: tuple[bytes, ...] = tuple(sorted(forms, key=lambda f: (-len(f), f)))

    @property
    def literal_forms(self) -> int:
        """How many byte strings the literals expanded to (values and their encodings): each costs one
        pass over the output."""
        return len(self._literals)

    @property
    def margin(self) -> int:
        """How many bytes past an output cap must be seen so that whatever starts before the cap is judged
        as on the whole stream: the longest literal form, and :data:`PATTERN_REACH` for the patterns."""
        longest = max((len(form) for form in self._literals), default=0)
        return max(longest, PATTERN_REACH if self._builtin or self._extra else 0)

    def redact(self, data: bytes) -> RedactionResult:
        """Redact ``data``; returns the same bytes object when nothing matched."""
        spans = self._spans(data)
        if not spans:
            return RedactionResult(data=data, count=0, kinds=())
        out: list[bytes] = []
        position = 0
        for start, end, kind in spans:
            out += (data[position:start], marker(kind))
            position = end
        out.append(data[position:])
        return RedactionResult(data=b"".join(out), count=len(spans), kinds=tuple(sorted({k for _, _, k in spans})))

    def redact_capped(self, head: bytes, limit: int, *, complete: bool) -> CappedOutput:
        """Redact, then cap: the output of a stream of which ``head`` is the beginning, at most ``limit``
        bytes, with no part of a secret that the whole stream would have had redacted.

        ``complete`` says ``head`` is the whole stream. Otherwise the stream went on, so the last
        :attr:`margin` bytes of ``head`` are only look-ahead: a secret starting before them is judged on
        at least ``margin`` bytes of what follows, as on the whole stream, and nothing after them is shown
        in the clear. Capture ``limit + margin`` bytes. The cut is never inside a ``[REDACTED:...]``
        marker (a marker that does not fit is left out whole) and moves back rather than split a UTF-8
        character (see :func:`cap`); ``truncated`` says the output is not the whole (redacted) stream.
        """
        if limit < 0:
            raise ValueError("limit must be >= 0")
        safe = len(head) if complete else max(0, len(head) - self.margin)
        out: list[bytes] = []
        room = limit
        kinds: set[str] = set()
        count = 0
        position = 0
        cut = False
        for start, end, kind in self._spans(head):
            if start >= safe:
                break
            clear, cut = cap(head[position:start], room)
            out.append(clear)
            room -= len(clear)
            replacement = marker(kind)
            if cut or len(replacement) > room:
                cut = True
                break
            out.append(replacement)
            room -= len(replacement)
            kinds.add(kind)
            count += 1
            position = end
        if not cut:
            clear, cut = cap(head[position:safe] if position < safe else b"", room)
            out.append(clear)
            position = max(position, safe)
            cut = cut or position < len(head) or not complete
        return CappedOutput(data=b"".join(out), count=count, kinds=tuple(sorted(kinds)), truncated=cut)

    def scan_window(self, data: bytes, start: int, *, final: bool) -> WindowScan:
        """The secrets of a window of a stream, matched from ``start`` (the bytes before it are context:
        :data:`LOOK_BEHIND` bytes make them judge as on the whole stream), and, unless ``final`` (the stream
        ends with ``data``), where more bytes could still change them: see :class:`WindowScan`."""
        matches: list[tuple[int, int]] = []
        spans = self._spans(data, start, matches)
        end = len(data)
        if final:
            return WindowScan(tuple(spans), tuple(matches), end, end)
        hold = end
        for form in self._literals:  # the longest end of data that begins a literal
            hold = min(hold, _literal_opening(data, form, max(start, end - len(form) + 1)))
        restart = hold
        lowered: bytes | None = None
        for rule in self._rules():
            if rule.tail is None:  # a custom pattern: only its reach bounds it
                hold = min(hold, max(start, end - self.margin))
                restart = min(restart, hold)
                continue
            if rule.lower:
                if lowered is None:
                    lowered = data.lower()
                haystack = lowered
            else:
                haystack = data
            position = start
            # a later unfinished match may have its secret start sooner (after a shorter key)
            while position < hold and (m := rule.tail.search(haystack, position)) is not None:
                restart = min(restart, m.start())
                if m.start("s") != -1:
                    hold = min(hold, m.start("s"))
                position = m.start() + 1
        return WindowScan(tuple(spans), tuple(matches), min(restart, hold), hold)

    def _rules(self) -> tuple[_Rule, ...]:
        return (_builtin_rules() if self._builtin else ()) + self._extra

    def _spans(
        self, data: bytes, start: int = 0, matches: list[tuple[int, int]] | None = None
    ) -> list[tuple[int, int, str]]:
        """The secrets in ``data`` from ``start`` on: sorted, non-overlapping (start, end, kind); overlaps
        merged under the most specific kind. ``matches`` collects every pattern match, secret or not."""
        if len(data) <= start:
            return []
        spans: list[tuple[int, int, int, str]] = []
        for form in self._literals:
            _find_literal(data, form, spans, start)
        lowered: bytes | None = None
        for rule in self._rules():
            if rule.lower:
                if lowered is None:
                    lowered = data.lower()
                haystack = lowered
            else:
                haystack = data
            groups = rule.regex.groups
            for m in rule.regex.finditer(haystack, start):
                if matches is not None:
                    matches.append(m.span())
                begin, end = m.span()
                begin -= rule.back
                for index in range(1, groups + 1):
                    if m.start(index) >= 0:
                        begin, end = m.span(index)
                        break
                # trailing blanks are not part of a secret (bare header values run to the end of the line)
                while end > begin and haystack[end - 1] in b" \t":
                    end -= 1
                if end <= begin:
                    continue
                if rule.check is not None and not rule.check(haystack, m.start(), begin, end):
                    continue
                spans.append((begin, end, rule.priority, rule.kind))
        if not spans:
            return []
        spans.sort()
        merged: list[tuple[int, int, str]] = []
        cur_start, cur_end, cur_priority, cur_kind = spans[0]
        for begin, end, priority, kind in spans[1:]:
            if begin < cur_end:  # overlap: merge, keep the most specific kind
                cur_end = max(cur_end, end)
                if priority > cur_priority:
                    cur_priority, cur_kind = priority, kind
                continue
            merged.append((cur_start, cur_end, cur_kind))
            cur_start, cur_end, cur_priority, cur_kind = begin, end, priority, kind
        merged.append((cur_start, cur_end, cur_kind))
        return merged


MARKER_PREFIX = b"[REDACTED:"  # how every marker starts


def marker(kind: str) -> bytes:
    """What replaces a secret of this kind."""
    return MARKER_PREFIX + kind.encode("ascii") + b"]"


def _find_literal(data: bytes, form: bytes, spans: list[tuple[int, int, int, str]], since: int = 0) -> None:
    """Every occurrence of ``form`` from ``since`` on; overlapping occurrences (``aaaa`` in ``aaaaaa``) become
    one span."""
    width = len(form)
    start = end = -1
    index = data.find(form, since)
    while index != -1:
        if index < end:
            end = index + width
        else:
            if end != -1:
                spans.append((start, end, _P_LITERAL, LITERAL_KIND))
            start, end = index, index + width
        index = data.find(form, index + 1)
    if end != -1:
        spans.append((start, end, _P_LITERAL, LITERAL_KIND))


def _literal_opening(data: bytes, form: bytes, since: int) -> int:
    """Where the longest end of ``data`` starting at ``since`` or later that begins ``form`` starts, or
    ``len(data)`` (``since`` keeps it a proper beginning)."""
    index = data.find(form[:1], since)
    while index != -1:
        if form.startswith(data[index:]):
            return index
        index = data.find(form[:1], index + 1)
    return len(data)


def cap(data: bytes, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of ``data`` at most, and whether anything was cut.

    The cut moves back (by at most 3 bytes) so that it does not split a UTF-8 encoded character; when the
    bytes around the cut are not UTF-8, it is made at ``limit`` exactly.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    if len(data) <= limit:
        return data, False
    cut = limit
    lead = limit - 1
    while lead >= 0 and limit - lead <= 3 and data[lead] & 0xC0 == 0x80:
        lead -= 1
    if lead >= 0 and data[lead] >= 0xC0:
        first = data[lead]
        width = 2 if first < 0xE0 else 3 if first < 0xF0 else 4 if first < 0xF8 else 0
        continuation = data[lead + 1 : lead + width]
        complete = all(c & 0xC0 == 0x80 for c in continuation) and len(continuation) == width - 1
        if width and lead + width > limit and complete:
            cut = lead
    return data[:cut], True
