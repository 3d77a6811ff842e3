"""The first hour: every command the README and the getting-started guide show, run as written, from a fresh
clone, as a new user (a home of their own, none of the test run's environment), checking what the docs say
it prints.

The transcripts are the docs' ```` ```console ```` blocks (tests/support/doc_sessions.py says how they read),
taken from the files, so a changed example is a changed test; ```` ```console terminal ```` blocks run under a
pseudo-terminal and answer the prompts the doc shows answered. What the docs show in ```` ```sh ```` blocks is
`make test` and its tiers only (checked below): `make test` is what runs this test.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.doc_sessions import Shell, blocks, check
from tests.support.engine import engine_or_skip
from tests.support.fresh_clone import fresh_clone
from tests.support.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.firsthour]

GUIDES = ("README.md", "docs/getting-started.md")
# what a new user's shell does not have: the test run's own state, engine and cluster settings
TEST_ONLY = re.compile(r"^(SANDBOX_|SO_TESTS_|DOCKER_|KUBECONFIG$|PYTEST_|XDG_|VIRTUAL_ENV$)")


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    engine_or_skip()
    return fresh_clone(tmp_path_factory.mktemp("first-hour") / "sandbox-orchestrator")


@pytest.fixture
def shell(clone: Path, tmp_path: Path) -> Iterator[Shell]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not TEST_ONLY.match(k)}
    env |= {"HOME": str(home), "PWD": str(clone), "TERM": "xterm", "COLUMNS": "120", "LINES": "40"}
    state = tmp_path / "shell"
    state.mkdir()
    session = Shell(cwd=clone, env=env, state=state)
    try:
        yield session
    finally:
        session.close()


@pytest.mark.parametrize("guide", GUIDES)
def test_every_command_of_the_guide_runs_as_written(guide: str, shell: Shell) -> None:
    found = blocks(ROOT / guide, ROOT)
    assert any(block.steps for block in found), f"{guide}: no console transcript"
    for block in found:
        if block.name is not None:
            shell.write(block)
        elif block.lang == "console":
            assert block.steps and not block.stray, f"{block.where}: a transcript's commands start with '$ '"
            check(block, shell.run(block))


@pytest.mark.parametrize("guide", GUIDES)
def test_every_program_and_config_of_the_guide_is_a_named_file(guide: str) -> None:
    """A program or a config the guide shows is written where its name says and used by a transcript: none is
    shown without being run."""
    for block in blocks(ROOT / guide, ROOT):
        if block.lang in ("python", "yaml", "yml", "json"):
            assert block.name is not None, f"{block.where}: name the file (```{block.lang} NAME)"


@pytest.mark.parametrize("guide", GUIDES)
def test_the_guides_other_shell_blocks_are_make_test_targets(guide: str) -> None:
    """A ```sh block is not run here: only `make test` and its tiers may be shown in one."""
    text = (ROOT / guide).read_text(encoding="utf-8")
    for body in re.findall(r"^```(?:sh|bash|shell)\n(.*?)^```", text, flags=re.S | re.M):
        for line in body.splitlines():
            command = line.split("#", 1)[0].strip()
            assert not command or re.fullmatch(r"make test(-[a-z0-9-]+)?", command), (guide, line)
