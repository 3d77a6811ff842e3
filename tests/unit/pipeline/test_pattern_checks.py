"""Every pattern a config gives (command patterns, fnmatch globs) is checked when the file is loaded:
a rule that could never work is CONFIG.INVALID naming file, line and field — not an INTERNAL error
when the first request comes, nor a deny rule that silently never matches."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import pytest

from orchestrator.approvals.rules import RuleApprover
from orchestrator.domain.errors import ConfigInvalid
from orchestrator.domain.globs import compile_glob, glob_problem
from orchestrator.gate.config import load_safety_config
from orchestrator.gate.matching import MatchConditions, Matcher
from orchestrator.gate.policy import PolicySource
from orchestrator.pipeline.config import load_config
from orchestrator.pipeline.factory import build_orchestrator

GOOD = ["*", "*.env", "*/.ssh/*", "pytest *", "[!a]*", "[]]x", "[[]", "a-b", "[a-]", "[!]]", "ci-?", "x[0-9]"]
BAD = {
    "": "must not be empty",
    "rm [-rf": "unclosed '['",
    "[!]": "unclosed '['",
    "*[z-a]*": "reversed",
    "[!9-0]": "reversed",
    "a\x00": "NUL",
    "a\udcff": "valid text",
}


@pytest.mark.parametrize("glob", GOOD)
def test_usable_globs_pass_and_compile_as_fnmatch_does(glob: str) -> None:
    assert glob_problem(glob) is None
    regex = compile_glob(glob)
    for name in ["", "a", "x.env", "a/.ssh/k", "pytest -q", "b", "]x", "[", "a-b", "-", "ci-1", "x5", "*"]:
        assert (regex.match(name) is not None) == fnmatch.fnmatchcase(name, glob), (glob, name)


@pytest.mark.parametrize(("glob", "why"), BAD.items())
def test_unusable_globs_are_explained(glob: str, why: str) -> None:
    problem = glob_problem(glob)
    assert problem is not None and why in problem
    assert glob.strip("[]!*") not in problem or not glob.strip("[]!*")  # the value itself is not echoed
    with pytest.raises(ValueError):
        compile_glob(glob)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


# (config text, the line and field CONFIG.INVALID must name)
CASES = [
    (
        "safety:\n  rules:\n    - name: r\n      argv_glob: 'rm [-rf*'\n      action: deny\n",
        4,
        "safety.rules.0.argv_glob",
    ),
    (
        "safety:\n  rules:\n    - name: r\n      action: deny\n      paths:\n        - '*.env'\n        - '[z-a]*'\n",
        7,
        "safety.rules.0.paths.1",
    ),
    ("safety:\n  rules:\n    - name: r\n      action: ask\n      subject: ['ci-[']\n", 5, "safety.rules.0.subject.0"),
    ("safety:\n  rules:\n    - name: r\n      argv_prefix: /\n      action: deny\n", 4, "safety.rules.0.argv_prefix"),
    (
        "safety:\n  rules:\n    - name: r\n      argv_prefix: 'mkfs[ -f'\n      action: deny\n",
        4,
        "safety.rules.0.argv_prefix",
    ),
    ("safety:\n  denylist: [sudo, /]\n", 2, "safety.denylist.1"),
    ("safety:\n  allowlist: ['python3[']\n", 2, "safety.allowlist.0"),
    ('safety:\n  denylist: ["\'unclosed"]\n', 2, "safety.denylist.0"),
]
APPROVAL_CASES = [
    (
        "approvals:\n  provider: rules\n  rules:\n    - name: a\n      argv_glob: '[b-a]'\n      outcome: approved\n",
        5,
        "approvals.rules.0.argv_glob",
    ),
    (
        "approvals:\n  provider: rules\n  rules:\n    - name: a\n      subject: ['ci-[!]']\n      outcome: approved\n",
        5,
        "approvals.rules.0.subject.0",
    ),
    (
        "approvals:\n  provider: rules\n  rules:\n    - name: a\n      argv_prefix: '/'\n      outcome: approved\n",
        5,
        "approvals.rules.0.argv_prefix",
    ),
    ("caps:\n  allowed_images:\n    - 'sandbox-orchestrator/*'\n    - 'registry/[x'\n", 4, "caps.allowed_images.1"),
]


@pytest.mark.parametrize(("text", "line", "field"), CASES)
def test_policy_patterns_are_checked_when_the_file_is_loaded(tmp_path: Path, text: str, line: int, field: str) -> None:
    path = write(tmp_path, text)
    for load in (load_safety_config, load_config, PolicySource):
        with pytest.raises(ConfigInvalid) as err:
            load(path)  # type: ignore[operator]
        assert err.value.message.startswith(f"{path}:{line}: {field}: "), err.value.message
        assert err.value.details["line"] == line and err.value.details["fields"] == [field]


@pytest.mark.parametrize(("text", "line", "field"), APPROVAL_CASES)
def test_approval_and_cap_patterns_are_checked_when_the_file_is_loaded(
    tmp_path: Path, text: str, line: int, field: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigInvalid) as err:
        load_config(path)
    assert err.value.message.startswith(f"{path}:{line}: {field}: "), err.value.message
    with pytest.raises(ConfigInvalid):
        build_orchestrator(path)  # what `run` builds: refused before anything is decided
    if field.startswith("approvals."):
        with pytest.raises(ConfigInvalid, match=rf"{path}:{line}: {field}: "):
            RuleApprover.from_file(path)


def test_a_reload_with_a_bad_pattern_keeps_the_last_good_policy(tmp_path: Path) -> None:
    path = write(tmp_path, "safety:\n  denylist: [sudo]\n")
    source = PolicySource(path)
    good = source.current()
    path.write_text("safety:\n  denylist: [sudo, 'x[']\n  mode: deny\n")
    assert source.current() is good
    assert source.last_error is not None and f"{path}:2: safety.denylist.1: " in source.last_error.message


def test_matchers_compile_every_glob_once_up_front() -> None:
    matcher = Matcher.compile(MatchConditions(argv_glob="pytest *", paths=["*.env", "src/*"], subject=["ci-*"]))
    assert matcher.glob is not None and matcher.glob.match("pytest -q")
    assert matcher.path_globs is not None and [g.match("a.env") is not None for g in matcher.path_globs] == [
        True,
        False,
    ]
    assert matcher.subject_globs is not None and matcher.subject_globs[0].match("ci-7")
