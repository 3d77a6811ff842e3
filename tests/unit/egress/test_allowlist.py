"""Egress allowlist patterns: what parses (normalised), what is refused (and the message says why), matching, and
``covers`` (whether a profile asks for more than a policy allows)."""

from __future__ import annotations

import pytest

from orchestrator.egress import Allowlist, HostPattern, normalise_host, parse_authority, parse_pattern


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("example.com:443", "example.com", 443),
        ("Example.COM.:443", "example.com", 443),
        ("api.example.com:*", "api.example.com", None),
        ("*.example.com:443", "*.example.com", 443),
        ("*.Example.com.:8080", "*.example.com", 8080),
        ("10.0.0.5:8080", "10.0.0.5", 8080),
        ("[2001:db8::1]:443", "2001:db8::1", 443),
        ("[2001:DB8:0:0::1]:443", "2001:db8::1", 443),
        ("[::1]:*", "::1", None),
        ("xn--bcher-kva.example:443", "xn--bcher-kva.example", 443),
        ("_service.example.com:53", "_service.example.com", 53),
        ("localhost:65535", "localhost", 65535),
        ("a.b:1", "a.b", 1),
    ],
)
def test_good_patterns_are_normalised(text: str, host: str, port: int | None) -> None:
    pattern = parse_pattern(text)
    assert (pattern.host, pattern.port, pattern.text) == (host, port, text)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty pattern"),
        ("example.com", "no port"),
        ("example.com:", "empty port"),
        ("example.com:0", "out of range"),
        ("example.com:65536", "out of range"),
        ("example.com:https", "bad port"),
        ("example.com:-1", "bad port"),
        ("example.com:4 43", "whitespace"),
        (" example.com:443", "whitespace"),
        ("*:443", "bare '*'"),
        ("*:*", "bare '*'"),
        ("*.com:443", "top-level domain"),
        ("a.*.example.com:443", "whole first label"),
        ("*example.com:443", "whole first label"),
        ("**.example.com:443", "whole first label"),
        ("*.:443", "nothing after"),
        ("*.10.0.0.1:443", "precede an IP"),
        ("a..example.com:443", "empty label"),
        (".example.com:443", "empty label"),
        ("-a.example.com:443", "invalid label"),
        ("a_b!.example.com:443", "invalid label"),
        (("a" * 64) + ".example.com:443", "invalid label"),
        (".".join(["abcdefghi"] * 26) + ":443", "longer than 253"),
        ("bücher.example:443", "ASCII form (xn--"),
        ("2001:db8::1:443", "in brackets"),
        ("[2001:db8::1]443", "expected ':port'"),
        ("[2001:db8::1:443", "unclosed"),
        ("[example.com]:443", "only an IPv6 address"),
        ("[fe80::1%eth0]:443", "zone index"),
        ("[2001:db8::zz]:443", "invalid IPv6"),
        ("1.2.3:443", "all-digit label"),
        ("010.0.0.1:443", "all-digit label"),
        ("2130706433:80", "all-digit label"),
    ],
)
def test_bad_patterns_name_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match="egress pattern") as caught:
        parse_pattern(text)
    assert problem in str(caught.value)
    assert repr(text[:300]) in str(caught.value)


def test_exact_names_match_themselves_only() -> None:
    allow = Allowlist(["example.com:443", "pypi.org:*"])
    assert allow.match("example.com", 443) is allow.patterns[0]
    assert allow.match("EXAMPLE.com.", 443) is allow.patterns[0]
    assert allow.match("example.com", 80) is None
    assert allow.match("www.example.com", 443) is None
    assert allow.match("example.com.evil.test", 443) is None
    assert allow.match("evilexample.com", 443) is None
    assert allow.match("pypi.org", 8443) is allow.patterns[1]


def test_wildcards_match_subdomains_not_the_domain() -> None:
    allow = Allowlist(["*.example.com:443"])
    assert allow.match("a.example.com", 443) is not None
    assert allow.match("a.b.example.com", 443) is not None
    assert allow.match("example.com", 443) is None
    assert allow.match("notexample.com", 443) is None
    assert allow.match(".example.com", 443) is None
    assert allow.match("a.example.com", 80) is None


def test_ip_patterns_match_the_same_address_in_any_spelling() -> None:
    allow = Allowlist(["10.0.0.5:8080", "[2001:db8::1]:443"])
    assert allow.match("10.0.0.5", 8080) is not None
    assert allow.match("2001:DB8:0::1", 443) is not None
    assert allow.match("10.0.0.6", 8080) is None
    assert allow.match("010.0.0.5", 8080) is None  # not an address, not a name either


def test_first_pattern_allowing_is_returned_and_garbage_hosts_match_nothing() -> None:
    allow = Allowlist(["a.example.com:443", "*.example.com:*", HostPattern("b.test", 80, "b.test:80")])
    assert allow.match("a.example.com", 443) is allow.patterns[0]
    assert allow.match("a.example.com", 22) is allow.patterns[1]
    assert allow.match("b.test", 80) is allow.patterns[2]
    for host in ("", "*", "*.example.com", "a example.com", "ä.example.com", "x" * 300):
        assert allow.match(host, 443) is None
    assert allow.match("a.example.com", 0) is None
    assert allow.match("a.example.com", 70000) is None


def test_duplicates_are_kept_once_and_bad_entries_refuse_the_list() -> None:
    assert len(Allowlist(["a.test:1", "A.test.:1"])) == 1
    with pytest.raises(ValueError, match="no port"):
        Allowlist(["a.test:1", "b.test"])


@pytest.mark.parametrize(
    ("ours", "theirs", "covered"),
    [
        ("*.a.com:443", "x.a.com:443", True),
        ("*.a.com:443", "x.y.a.com:443", True),
        ("*.a.com:443", "*.x.a.com:443", True),
        ("*.a.com:443", "*.a.com:443", True),
        ("*.a.com:443", "a.com:443", False),
        ("*.a.com:443", "x.a.com:80", False),
        ("*.a.com:443", "x.a.com:*", False),
        ("*.a.com:*", "x.a.com:80", True),
        ("*.x.a.com:443", "*.a.com:443", False),
        ("a.com:*", "a.com:443", True),
        ("a.com:443", "a.com:*", False),
        ("a.com:443", "a.com:443", True),
        ("a.com:443", "b.a.com:443", False),
        ("a.com:443", "*.a.com:443", False),
        ("10.0.0.5:*", "10.0.0.5:22", True),
        ("*.a.com:*", "10.0.0.5:22", False),
        ("*.b.com:443", "x.a.com:443", False),
    ],
)
def test_covers(ours: str, theirs: str, covered: bool) -> None:
    assert Allowlist([ours]).covers(parse_pattern(theirs)) is covered


def test_covers_with_several_patterns() -> None:
    policy = Allowlist(["pypi.org:443", "*.pythonhosted.org:443"])
    assert policy.covers(parse_pattern("files.pythonhosted.org:443"))
    assert not policy.covers(parse_pattern("github.com:443"))


def test_authority_and_host_helpers() -> None:
    assert parse_authority("Example.com:8080", None) == ("example.com", 8080)
    assert parse_authority("example.com", 80) == ("example.com", 80)
    assert parse_authority("[::1]:443", None) == ("::1", 443)
    for bad in ("example.com", "[::1]", "::1:443", "[a.b]:1", "a.b:0", "a.b:x", "a b:1"):
        with pytest.raises(ValueError):
            parse_authority(bad, None)
    assert normalise_host("127.0.0.1") == "127.0.0.1"
    assert normalise_host("::FFFF:127.0.0.1") == "::ffff:7f00:1"
    with pytest.raises(ValueError, match="xn--"):
        normalise_host("bücher.example")
