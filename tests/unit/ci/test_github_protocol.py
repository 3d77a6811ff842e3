"""The GitHub hook's pure parts: what hook.js forwards is what the controller accepts, and the runner's paths
map onto the job's workspace (what is not on it refused, the engine socket never given)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from orchestrator.ci.github import hook
from orchestrator.ci.github.protocol import HOOK_ENV, Mount
from orchestrator.domain.errors import CiUnsupported, InputInvalid

HOOK_JS = Path(hook.__file__).with_name("hook.js").read_text(encoding="utf-8")


def test_hook_js_forwards_exactly_the_variables_the_controller_accepts() -> None:
    listed = re.search(r"const FORWARDED = \[(.*?)\]", HOOK_JS, re.S)
    assert listed is not None
    assert tuple(json.loads("[" + listed.group(1).replace("'", '"') + "]")) == HOOK_ENV


def _mounts(work: str) -> list[Mount]:
    pairs = [
        (work, "/__w"),
        ("/home/runner/externals", "/__e"),
        (f"{work}/_temp", "/__w/_temp"),
        (f"/{work}/_temp/_github_home", "/github/home"),  # the runner may double the leading slash
        (f"{work}/_temp/_github_workflow", "/github/workflow"),
        ("/var/run/docker.sock", "/var/run/docker.sock"),
    ]
    return [Mount(sourceVolumePath=s, targetVolumePath=t) for s, t in pairs]


def test_the_runners_paths_land_in_the_workspace() -> None:
    notices: list[str] = []
    paths = hook.path_map(_mounts("/home/runner/_work"), root="/__w", externals=False, notices=notices)
    assert paths("/github/home/.npmrc", "x") == "/__w/_temp/_github_home/.npmrc"
    assert paths("/github/workflow/event.json", "x") == "/__w/_temp/_github_workflow/event.json"
    assert paths("/__w/app/app", "x") == "/__w/app/app"
    assert paths("/github/homework", "x") == "/github/homework"  # a prefix of a name is not the directory
    assert any("engine's socket" in n for n in notices)
    with pytest.raises(CiUnsupported, match="externals"):
        paths("/__e/node20/bin/node", "args.entryPoint")


def test_the_runners_externals_are_at_their_own_place() -> None:
    """Mounted read-only at /__e (pipeline.externals), never reached through the writable workspace."""
    paths = hook.path_map(_mounts("/w"), root="/__w", externals=True, notices=[])
    assert paths("/__e/node20/bin/node", "args.entryPoint") == "/__e/node20/bin/node"


@pytest.mark.parametrize(("value", "on"), [(None, False), ("", False), ("0", False), ("1", True), ("true", True)])
def test_sandbox_externals_is_a_flag(value: str | None, on: bool) -> None:
    assert hook._externals_flag(value) is on


@pytest.mark.parametrize("value", ["externals", "_work/externals", "../externals"])
def test_the_old_sandbox_externals_a_directory_of_the_work_directory_is_refused(value: str) -> None:
    """Every step of every job on the runner can write its work directory: a node planted there would be run as the
    trusted one by a later job. Refused with the new layout named."""
    with pytest.raises(CiUnsupported, match=r"never taken from the work directory.*\.ci-externals/<workspace>"):
        hook._externals_flag(value)


@pytest.mark.parametrize(
    ("entry", "words", "argv"),
    [
        # a JavaScript action as the runner gives it: its path quoted (NodeScriptActionHandler.cs), split at spaces
        (
            "/__e/node20/bin/node",
            ['"/__w/_actions/o/r/v1/index.js"'],
            ["/__e/node20/bin/node", "/__w/_actions/o/r/v1/index.js"],
        ),
        (
            "/__e/node20/bin/node",
            ['"/__w/_actions/o/r/v1/my', 'dir/index.js"'],
            ["/__e/node20/bin/node", "/__w/_actions/o/r/v1/my dir/index.js"],
        ),
        # the hooks repository's own case (packages/docker/tests/run-script-step-test.ts)
        ("echo", ['"Mona', "the", 'Octocat"'], ["echo", "Mona the Octocat"]),
        (
            "bash",
            ["--noprofile", "--norc", "-e", "/__w/_temp/x.sh"],
            ["bash", "--noprofile", "--norc", "-e", "/__w/_temp/x.sh"],
        ),
    ],
)
def test_the_runners_argument_string_is_split_as_the_hooks_do(entry: str, words: list[str], argv: list[str]) -> None:
    assert hook._command_line(entry, words) == argv


def test_an_argument_string_that_is_no_command_line_is_refused() -> None:
    with pytest.raises(InputInvalid, match=r"args\.entryPointArgs"):
        hook._command_line("node", ['"/__w/_actions/unclosed'])


def test_a_prelude_exports_what_the_gate_must_read() -> None:
    text = hook._prelude({"HOME": "/__w/h o"}, ["/__w/_tool/node/bin"])
    assert text == "export HOME='/__w/h o'\nexport PATH=/__w/_tool/node/bin\"${PATH:+:$PATH}\"\n"


def test_the_response_file_is_found_below_the_runners_work_directory() -> None:
    """prepare_job proves the runner's work directory is the job's workspace by the response file the runner made
    in it (``ContainerHookManager.cs``: <work>/_temp/_runner_hook_responses/<guid>.json, made empty before the
    hook runs); a file elsewhere, or no mount at /__w, cannot prove it."""
    mounts = _mounts("/home/runner/_work")
    response = "/home/runner/_work/_temp/_runner_hook_responses/0b1c.json"
    assert hook.work_file(mounts, response) == ["_temp", "_runner_hook_responses", "0b1c.json"]
    assert hook.work_file(mounts, "/home/runner//_work/_temp/r.json") == ["_temp", "r.json"]
    assert hook.work_file(mounts, "/home/runner/_work/../elsewhere/r.json") is None
    assert hook.work_file(mounts, "/home/runner/_workspace/r.json") is None  # a prefix of a name
    assert hook.work_file(mounts, "/home/runner/_work") is None
    assert hook.work_file(mounts, None) is None
    assert hook.work_file([m for m in mounts if m.target != "/__w"], response) is None
