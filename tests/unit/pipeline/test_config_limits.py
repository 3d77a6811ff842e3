"""Config and profile files are input too: bounded in size, nesting and alias expansion, and every
refusal is CONFIG.INVALID naming file, line and field — never a RecursionError, a MemoryError or a
process that grows until it dies."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml

from orchestrator import yamlfile
from orchestrator.domain.errors import ConfigInvalid
from orchestrator.pipeline.config import load_config
from orchestrator.profiles import ProfileRegistry, parse_seccomp
from orchestrator.profiles.seccomp import load_seccomp_file
from orchestrator.yamlfile import DEFAULT_LIMITS, YamlLimits, load_yaml_mapping, parse_yaml

# the classic "billion laughs": 9 levels of 9 aliases each, 9**9 values once expanded
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join(['*' + p] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def refused(text: str, limits: YamlLimits = DEFAULT_LIMITS, source: str = "c.yaml") -> ConfigInvalid:
    with pytest.raises(ConfigInvalid) as err:
        parse_yaml(text, source, limits)
    assert err.value.code == "CONFIG.INVALID"
    return err.value


def test_an_alias_bomb_is_refused_in_bounded_time_and_memory() -> None:
    tracemalloc.start()
    started = time.process_time()  # the parser's work, not how busy the machine is
    err = refused(BOMB)
    elapsed = time.process_time() - started
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert elapsed < 2.0 and peak < 16 * 1024 * 1024, (elapsed, peak)
    # the alias that crossed the limit, by line and field: f's first *e (9**5 values each)
    assert err.message == (
        f"c.yaml:6: f.0: the document holds more than {DEFAULT_LIMITS.max_values} values once its aliases are expanded"
    )
    assert err.details["line"] == 6 and err.details["fields"] == ["f.0"]


def test_aliases_that_stay_small_are_fine() -> None:
    data, _ = parse_yaml("base: &b {cpus: 1}\nx: *b\ny: [*b, *b]\n", "c.yaml")
    assert data == {"base": {"cpus": 1}, "x": {"cpus": 1}, "y": [{"cpus": 1}, {"cpus": 1}]}


def test_the_value_limit_counts_exactly() -> None:
    # the mapping, its 2 keys, 1, the list and its 2 items: 7 nodes
    text = "a: 1\nb: [1, 2]\n"
    assert parse_yaml(text, "c.yaml", YamlLimits(max_values=7))[0] == {"a": 1, "b": [1, 2]}
    assert refused(text, YamlLimits(max_values=6)).message == "c.yaml:2: b.1: the document holds more than 6 values"


def test_an_alias_to_its_own_container_is_refused() -> None:
    err = refused("a: &a [1, *a]\n")
    assert err.message == "c.yaml:1: a.1: an alias refers to a node that contains it"


@pytest.mark.parametrize(
    "text",
    [
        "safety:\n  allowlist: " + "[" * 10_000 + "]" * 10_000 + "\n",
        "safety:\n  x: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n",
        "safety:\n" + "".join("  " * (i + 1) + "- \n" for i in range(200)),  # block style
        "a: " + "[" * 500_000 + "]" * 500_000,  # as deep as a 1 MiB file can be
        "a: " + "[" * 1_000_000 + "@",  # ... and broken at its end, where libyaml stops first
    ],
    ids=["flow-lists", "flow-maps", "block", "1MiB", "1MiB-broken"],
)
def test_deep_nesting_is_refused_without_recursion(text: str) -> None:
    started = time.process_time()
    err = refused(text)
    assert time.process_time() - started < 5.0
    assert f"nested deeper than {DEFAULT_LIMITS.max_depth} levels" in err.message
    assert err.details["line"] is not None and err.details["fields"]


def test_nesting_through_aliases_counts_too() -> None:
    deep = "[" * 40 + "]" * 40
    err = refused(f"a: &a {deep}\nb: [[[[[[[[[[[[[[[[[[[[[[[[[*a]]]]]]]]]]]]]]]]]]]]]]]]]\n")
    assert err.message.startswith("c.yaml:2: b.0.0.") and "nested deeper than 64 levels" in err.message


def test_nesting_limit_is_exact() -> None:
    ok = "[" * 64 + "]" * 64
    parse_yaml(ok, "c.yaml")
    refused("[" + ok + "]")


@pytest.mark.parametrize(
    ("text", "line", "field", "problem"),
    [
        ("safety:\n  mode: ask\n  reason: a\x00b\n", 3, "safety.reason", "U+0000 is not allowed in YAML"),
        ("safety:\n  rules:\n    - name: x\x01\n", 3, "safety.rules.0.name", "U+0001 is not allowed in YAML"),
        ("a: 1\nb:\n  c: '\x00'\n", 3, "b.c", "U+0000"),
        ('safety:\n  mode: "a\\0b"\n', 2, "safety.mode", "NUL characters are not allowed"),
    ],
)
def test_a_nul_or_control_character_names_its_line_and_field(text: str, line: int, field: str, problem: str) -> None:
    err = refused(text)
    assert err.message == f"c.yaml:{line}: {field}: {problem}" or (
        err.message.startswith(f"c.yaml:{line}: {field}: ") and problem in err.message
    )
    assert err.details["line"] == line


def test_a_surrogate_escape_names_its_line_and_field() -> None:
    """libyaml refuses "\\ud800" itself; the explanation is the event pass's, as with PyYAML's parser."""
    err = refused('safety:\n  allowlist: ["ls\\ud800"]\n')
    assert err.message == "c.yaml:2: safety.allowlist.0: must be valid UTF-8 text (a \\ud800-\\udfff escape is not)"


def test_a_surrogate_escape_is_refused_by_the_pure_python_parser_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyYAML's own parser accepts "\\ud800" (libyaml does not): the event pass refuses it either way."""
    monkeypatch.setattr(yamlfile, "_FAST_LOADER", yaml.SafeLoader)
    err = refused('safety:\n  allowlist: ["ls\\ud800"]\n')
    assert err.message == "c.yaml:2: safety.allowlist.0: must be valid UTF-8 text (a \\ud800-\\udfff escape is not)"


def test_an_unknown_tag_names_its_field() -> None:
    err = refused("safety:\n  rules:\n    - argv_glob: !!python/object:os.system ls\n")
    assert err.message.startswith("c.yaml:3: safety.rules.0.argv_glob: invalid YAML: could not determine a constructor")


def test_bytes_that_are_not_utf8_name_their_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_bytes(b"safety:\n  mode: ask\n  rules:\n    - name: caf\xe9\n      action: deny\n")
    with pytest.raises(ConfigInvalid) as err:
        load_yaml_mapping(path)
    assert err.value.message == f"{path}:4: safety.rules.0.name: not UTF-8 (byte 45 of the file)"


def test_a_file_larger_than_the_limit_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * DEFAULT_LIMITS.max_bytes + "\n")
    with pytest.raises(ConfigInvalid, match=r"big.yaml: larger than 1048576 bytes"):
        load_yaml_mapping(path)
    with pytest.raises(ConfigInvalid, match=r"/dev/zero: larger than 1048576 bytes"):
        load_yaml_mapping(Path("/dev/zero"))  # endless: read up to the limit, no further
    small = YamlLimits(max_bytes=64)
    (tmp_path / "ok.yaml").write_text("a: 1\n")
    assert load_yaml_mapping(tmp_path / "ok.yaml", limits=small)[0] == {"a": 1}
    with pytest.raises(ConfigInvalid, match="larger than 64 bytes"):
        load_yaml_mapping(path, limits=small)


def test_a_large_real_config_is_well_within_the_limits(tmp_path: Path) -> None:
    rules = "".join(
        f"    - name: r{i}\n      argv_prefix: prog{i} sub\n      tool: [exec]\n      paths: ['*.env']\n"
        "      action: deny\n"
        for i in range(2000)
    )
    path = tmp_path / "policy.yaml"
    path.write_text("safety:\n  rules:\n" + rules)
    assert len(load_config(path).safety.rules) == 2000


@pytest.mark.parametrize(
    "text",
    ["safety:\n  allowlist: " + "[" * 10_000 + "]" * 10_000 + "\n", BOMB, "safety:\n  mode: ask\x00\n"],
    ids=["deep", "bomb", "nul"],
)
def test_the_whole_config_and_a_profile_refuse_alike(tmp_path: Path, text: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(text)
    with pytest.raises(ConfigInvalid, match=rf"^CONFIG.INVALID: {config}:\d+: "):
        load_config(config)
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "odd.yaml").write_text("description: x\n" + text)
    with pytest.raises(ConfigInvalid, match=r"odd.yaml:\d+: "):
        ProfileRegistry([profiles]).get("odd")


def test_seccomp_json_nesting_is_bounded(tmp_path: Path) -> None:
    for depth, line_field in ((10_000, r"s.json:3: nested deeper than 64 levels"), (100, "s.json:3: ")):
        path = tmp_path / "s.json"
        path.write_text(
            '{"defaultAction": "SCMP_ACT_ERRNO",\n "syscalls": [],\n "x": ' + "[" * depth + "]" * depth + "}"
        )
        with pytest.raises(ConfigInvalid, match=line_field) as err:
            load_seccomp_file(path)
        assert "nested deeper than 64 levels" in err.value.message
    with pytest.raises(ConfigInvalid, match="nested deeper"):
        parse_seccomp('{"a": ' + "[" * 5000 + "]" * 5000 + "}", "s.json")


def test_the_cli_refuses_a_bomb_quickly_with_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "bomb.yaml"
    config.write_text(BOMB)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli.main", "check", "--config", str(config), "--", "ls"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.perf_counter() - started < 30
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"sandboxctl: CONFIG.INVALID: {config}:6: f.0: the document holds more than")
