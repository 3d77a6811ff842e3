"""Redaction of secrets in command output, and the output cap."""

from __future__ import annotations

import base64
import json
import os
import time
from urllib.parse import quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.domain.errors import InputInvalid
from orchestrator.results import BUILTIN_KINDS, MIN_LITERAL_LENGTH, RedactionResult, Redactor, cap
from tests.support.secrets import GH, JWT, POSITIVES

R = Redactor()


def test_builtin_kinds_are_listed() -> None:
    assert tuple(sorted(BUILTIN_KINDS)) == BUILTIN_KINDS
    assert {
        "private-key",
        "aws-access-key-id",
        "aws-secret-access-key",
        "authorization-header",
        "bearer-token",
        "github-token",
        "gitlab-token",
        "slack-token",
        "stripe-key",
        "openai-style-key",
        "google-api-key",
        "jwt",
        "secret-assignment",
        "url-credentials",
    } <= set(BUILTIN_KINDS)


# (input, expected output, kind); the secret part never survives


@pytest.mark.parametrize(("data", "expected", "kind"), POSITIVES)
def test_builtin_patterns(data: bytes, expected: bytes, kind: str) -> None:
    result = R.redact(data)
    assert result.data == expected
    assert result.kinds == ((kind,) if kind else ())
    assert result.count == (expected.count(b"[REDACTED:") if kind else 0)


NEGATIVES: list[bytes] = [
    b"commit 3f786850e387550fdab836ed7e6dc881de23001b\nAuthor: A <a@example.com>\n",
    b"Merge: 1a2b3c4 5d6e7f8\n",
    b"run 123e4567-e89b-12d3-a456-426614174000 finished\n",
    b"image sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n",
    base64.b64encode(b"hello world, this is ordinary text that was base64 encoded") + b"\n",
    b"pip install scikit-learn sk-learn\n",
    b"disk-0123456789abcdefABCDEF mounted\n",  # 'sk-' inside a word
    b"task-AbCdEf0123456789xyzXYZ done\n",
    b"sk-abcdefghijklmnopqrstuvwxyz-long-kebab-name\n",  # no digits, no capitals: a name
    b"token_count = 5\nmax_tokens: 4096\ntokens: 17\ntokenizer = AutoTokenizer()\n",
    b"password = getpass.getpass()\ntoken = os.environ['TOKEN']\nsecret = load_secret(path)\n",
    b"password: ${DB_PASSWORD}\npassword=********\ntoken: <your token>\npassword: null\n",
    b"def login(user: str, password: str, token: bytes | None = None) -> Session:\n",
    b"cat: /etc/passwd: No such file or directory\n",
    # source code: names, small numbers, comparisons, calls, colours, doc placeholders
    b"'password': password,\nself.token = inline_token\nusername, password = un, pw\ntoken = -1\n",
    b'if token == "integer":\nelif token != "(":\npassword = getpass.getpass("Password: ")\n',
    b"def accept(self, type: TokenType) -> Token: ...\n",
    b'Token: "#f8f8f2",\n{"PASSWORD": "xxx"}\nhttps://user:password@host/\n',
    b"prepared for an 'authorization: basic ...' header\n",
    b"Enter password:\nPassword for 'https://github.com':\n",
    b"a bearer token is required\nthe Bearer authentication scheme\n",
    b"Authorization:\n",
    b"https://example.com:8443/path?q=1\nhttp://user@host/x\nmailto:someone@example.com\n",
    b"drwxr-xr-x  2 root root 4096 Jan  1 00:00 secrets\n-rw-r--r--  1 root root  220 Jan  1 00:00 .token\n",
    b"AKIA-not-a-key AKIAshort\n",
    b"def test_password_reset(client):\n    assert resp.status_code == 200\n",
    b"[REDACTED:github-token] password=[REDACTED:secret-assignment]\n",  # already redacted output
    bytes(range(256)) * 4,
]


@pytest.mark.parametrize("data", NEGATIVES)
def test_true_negatives_untouched(data: bytes) -> None:
    result = R.redact(data)
    assert result == RedactionResult(data=data, count=0, kinds=())
    assert result.data is data


def test_unquoted_all_letter_values_are_taken_for_code() -> None:
    """The documented price of not redacting source code: a short unquoted all-letter password."""
    assert R.redact(b"PASSWORD=letmein\n").count == 0
    assert R.redact(b"PASSWORD=letmein1\n").count == 1


def test_count_and_kinds() -> None:
    data = b"a=" + GH + b"\nb=" + GH + b"\nAKIAIOSFODNN7EXAMPLE\npassword=x1\n"
    result = R.redact(data)
    assert result.count == 4
    assert result.kinds == ("aws-access-key-id", "github-token", "secret-assignment")
    assert GH not in result.data


def test_overlaps_merge_into_the_most_specific_kind() -> None:
    result = R.redact(b"password=" + GH + b"\n")
    assert result == RedactionResult(b"password=[REDACTED:github-token]\n", 1, ("github-token",))
    result = R.redact(b"Authorization: Bearer " + JWT + b"\n")
    assert result == RedactionResult(b"Authorization: Bearer [REDACTED:jwt]\n", 1, ("jwt",))
    result = R.redact(b"https://x-access-token:" + GH + b"@github.com/o/r")
    assert result.data == b"https://x-access-token:[REDACTED:github-token]@github.com/o/r"


def test_non_utf8_output() -> None:
    data = b"\xff\xfe\x00junk " + GH + b" \xc3\x28 password=\xe9t\xe9\n\x80"
    result = R.redact(data)
    expected = b"\xff\xfe\x00junk [REDACTED:github-token] \xc3\x28 password=[REDACTED:secret-assignment]\n\x80"
    assert result.data == expected
    assert result.count == 2


def test_idempotent() -> None:
    data = b"\n".join(p for p, _, k in POSITIVES if k)
    once = R.redact(data)
    twice = R.redact(once.data)
    assert twice.count == 0
    assert twice.data == once.data


# ---------------------------------------------------------------------------------------------- literals


def test_literals_raw_and_encoded() -> None:
    secret = "s3cr3t/value+with spaces&more"
    r = Redactor(literals=[secret], builtin=False)
    raw = secret.encode()
    for form in (
        raw,
        quote(secret, safe="").encode(),
        json.dumps(secret + '"')[1:-2].encode(),
        base64.b64encode(raw),  # echo -n "$S" | base64
        base64.b64encode(raw + b"\n")[:40],  # echo "$S" | base64: the aligned prefix
    ):
        result = r.redact(b"<" + form + b">")
        assert result.kinds == ("literal",), form
        assert raw not in result.data
        assert result.data.startswith(b"<[REDACTED:literal]")


def test_literals_json_escape() -> None:
    secret = 'quote"and\\backslash'
    r = Redactor(literals=[secret], builtin=False)
    printed = json.dumps({"v": secret}).encode()
    assert r.redact(printed).data == b'{"v": "[REDACTED:literal]"}'


def test_literals_short_and_blank_ignored() -> None:
    assert MIN_LITERAL_LENGTH == 4
    r = Redactor(literals=["abc", "", "    ", "1", "abcd"], builtin=False)
    assert r.literal_forms == 1
    result = r.redact(b"abc 1 abcd    x")
    assert result.data == b"abc 1 [REDACTED:literal]    x"
    # four characters, even if encoded longer
    assert Redactor(literals=["pä"], builtin=False).literal_forms == 0


def test_literals_overlapping_and_longest() -> None:
    r = Redactor(literals=["token", "mytokenvalue", "aaaa"], builtin=False)
    assert r.redact(b"x mytokenvalue y token z").data == b"x [REDACTED:literal] y [REDACTED:literal] z"
    result = r.redact(b"aaaaaaa|aaaa")
    assert result.data == b"[REDACTED:literal]|[REDACTED:literal]"
    assert result.count == 2


def test_literals_bytes_and_non_utf8() -> None:
    r = Redactor(literals=[b"\xff\xfesecret", "caf\udce9-key"], builtin=False)
    assert r.redact(b"a\xff\xfesecretb").data == b"a[REDACTED:literal]b"
    assert r.redact(b"[caf\xe9-key]").data == b"[[REDACTED:literal]]"


def test_literal_wins_over_patterns() -> None:
    r = Redactor(literals=[GH.decode()])
    result = r.redact(b"x " + GH)
    assert result == RedactionResult(b"x [REDACTED:literal]", 1, ("literal",))


def test_extra_patterns() -> None:
    r = Redactor(extra_patterns=[r"ACME-[0-9]{6}", r"pin=(\d+)"], builtin=False)
    result = r.redact(b"id ACME-123456 pin=9876 " + GH)
    assert result == RedactionResult(b"id [REDACTED:custom] pin=[REDACTED:custom] " + GH, 2, ("custom",))
    assert Redactor(extra_patterns=["x*"]).redact(b"abc").count == 0  # empty matches are ignored


def test_invalid_extra_pattern_names_the_field() -> None:
    with pytest.raises(InputInvalid) as info:
        Redactor(extra_patterns=["ok", "(unclosed"])
    assert info.value.details["field"] == "extra_patterns[1]"


@settings(max_examples=200, deadline=None)
@given(
    prefix=st.binary(max_size=200),
    suffix=st.binary(max_size=200),
    secret=st.text(alphabet=st.characters(codec="utf-8"), min_size=4, max_size=40).filter(lambda s: s.strip()),
)
def test_literal_never_survives(prefix: bytes, suffix: bytes, secret: str) -> None:
    raw = secret.encode()
    result = Redactor(literals=[secret]).redact(prefix + raw + suffix)
    assert raw not in result.data
    assert result.count >= 1


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=2000))
def test_arbitrary_bytes_never_fail(data: bytes) -> None:
    result = R.redact(data)
    assert (result.count == 0) == (result.data == data)
    assert list(result.kinds) == sorted(set(result.kinds))


# ---------------------------------------------------------------------------------------------- linear time

MIB = 1 << 20


def _fill(unit: bytes, size: int = MIB) -> bytes:
    return (unit * (size // len(unit) + 1))[:size]


PATHOLOGICAL: dict[str, bytes] = {
    "eyJ repeated": _fill(b"eyJ"),
    "eyJ then a long segment": b"eyJ" + _fill(b"a"),
    "jwt-ish dotted": _fill(b"eyJaaaaaaaa.bbbbb."),
    "BEGIN repeated": _fill(b"-----BEGIN PRIVATE KEY-----\n"),
    "BEGIN header prefix": b"-----BEGIN " + _fill(b"A"),
    "authorization then blanks": b"authorization:" + _fill(b" "),
    "authorization repeated": _fill(b"Authorization: "),
    "password repeated": _fill(b"password="),
    "password then blanks": b"password" + _fill(b" "),
    "unterminated quote": b'password="' + _fill(b"a"),
    "backslashes in quote": b'password="' + _fill(b"\\"),
    "token chains": _fill(b"token=token:"),
    "key lookbehinds": _fill(b"api_key"),
    "scheme repeated": _fill(b"://"),
    "url without @": b"://a:" + _fill(b"b"),
    "url colons": _fill(b"://a:b:"),
    "at signs": b"://u:" + _fill(b"@"),
    "ghp repeated": _fill(b"ghp_"),
    "letters": _fill(b"a"),
    "capitals": _fill(b"A"),
    "AKIA repeated": _fill(b"AKIA"),
    "sk- repeated": _fill(b"sk-"),
    "sk- then alnum": b"sk-" + _fill(b"a"),
    "bearer repeated": _fill(b"bearer "),
    "bearer then token": b"bearer " + _fill(b"a"),
    "xoxb repeated": _fill(b"xoxb-"),
    "many assignments": _fill(b"token=a1 "),
    "many key ids": _fill(b"AKIAIOSFODNN7EXAMPLE "),
    "many jwts": _fill(b"eyJhbGciOi.eyJzdWIi.sig "),
    "many urls": _fill(b"https://u:p1@h "),
    "zeros": bytes(MIB),
    "random": os.urandom(MIB),
}


# CPU time, not wall time: the bound is about the work (linear, not quadratic), not how busy the machine is
@pytest.mark.parametrize("name", sorted(PATHOLOGICAL))
def test_pathological_input_is_linear(name: str) -> None:
    data = PATHOLOGICAL[name]
    start = time.process_time()
    result = R.redact(data)
    elapsed = time.process_time() - start
    assert elapsed < 1.0, f"{name}: {elapsed:.2f}s"
    assert isinstance(result.data, bytes)


def test_pathological_literal_is_linear() -> None:
    r = Redactor(literals=["aaaa", "abab"])
    start = time.process_time()
    result = r.redact(_fill(b"a") + b"|" + _fill(b"ab"))
    assert time.process_time() - start < 1.0
    assert result.data == b"[REDACTED:literal]|[REDACTED:literal]"


def test_ordinary_text_throughput_sanity() -> None:
    """A loose floor (the benchmark measures the real figure): 8 MiB of log lines in well under 2 s."""
    line = b"2024-05-01T12:00:00.000001Z INFO worker-3 GET /api/v1/items/42 status=200 bytes=5120 id=9f8e7d\n"
    data = _fill(line, 8 * MIB)
    r = Redactor(literals=[f"secret-value-{i:02d}-abcdefgh" for i in range(10)])
    start = time.process_time()
    assert r.redact(data).count == 0
    assert time.process_time() - start < 2.0


# ---------------------------------------------------------------------------------------------- cap


def test_cap_not_needed() -> None:
    assert cap(b"abc", 3) == (b"abc", False)
    assert cap(b"", 0) == (b"", False)


def test_cap_plain() -> None:
    assert cap(b"abcdef", 4) == (b"abcd", True)
    assert cap(b"abc", 0) == (b"", True)


@pytest.mark.parametrize("char", ["é", "€", "😀"])
def test_cap_on_utf8_boundary(char: str) -> None:
    encoded = char.encode()
    data = b"ab" + encoded + b"cd"
    for limit in range(2, 2 + len(encoded)):
        assert cap(data, limit) == (b"ab", True)
    assert cap(data, 2 + len(encoded)) == (b"ab" + encoded, True)
    assert cap(data, 3 + len(encoded)) == (b"ab" + encoded + b"c", True)


def test_cap_non_utf8_cuts_at_limit() -> None:
    assert cap(b"ab\x80\x80\x80\x80cd", 4) == (b"ab\x80\x80", True)
    assert cap(b"ab\xe2\x28\xa1cd", 3) == (b"ab\xe2", True)  # invalid sequence: no move
    assert cap(b"\xff\xfe\xfd", 2) == (b"\xff\xfe", True)


def test_cap_rejects_negative() -> None:
    with pytest.raises(ValueError, match="limit"):
        cap(b"x", -1)


def test_builtin_kinds_list_every_builtin_rule() -> None:
    from orchestrator.results.redact import BUILTIN_KINDS, _builtin_rules

    assert tuple(sorted({rule.kind for rule in _builtin_rules()})) == BUILTIN_KINDS
