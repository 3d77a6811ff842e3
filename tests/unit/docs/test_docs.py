"""The documentation holds together: a short README, links that lead somewhere, an index of every document."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.support.paths import DOCS, ROOT

CHART_README = ROOT / "charts" / "sandbox-orchestrator" / "README.md"
DOCUMENTS = [ROOT / "README.md", *sorted(DOCS.glob("*.md")), CHART_README]

FENCE = re.compile(r"^(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the text may hold `code` and span a line break, never a ']'
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The text outside fenced code blocks (a `# comment` in a code block is no heading, a link there none)."""
    kept, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            kept.append("")
            continue
        kept.append("" if fenced else line)
    return "\n".join(kept)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation but '-' and '_' removed,
    each space a '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in prose(path.read_text(encoding="utf-8")).split("\n"):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")  # GitHub numbers repeated headings
    return found


def links(path: Path) -> list[str]:
    text = INLINE_CODE.sub("", prose(path.read_text(encoding="utf-8")))
    return LINK.findall(text)


def test_slug_follows_githubs_rule() -> None:
    assert slug("`sandboxctl run`") == "sandboxctl-run"
    assert slug("The workspace: what a run may write, and what it changed") == (
        "the-workspace-what-a-run-may-write-and-what-it-changed"
    )
    assert slug("`make image`: the controller image") == "make-image-the-controller-image"
    assert slug("Pre-started sandboxes (pool)") == "pre-started-sandboxes-pool"
    assert slug("backend_choice and more") == "backend_choice-and-more"


def test_the_readme_is_short() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 250, f"README.md has {lines} lines; the reference belongs in docs/"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_anchor_that_exist(document: Path) -> None:
    broken = []
    for target in links(document):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        path_part, _, fragment = target.partition("#")
        destination = (document.parent / unquote(path_part)).resolve() if path_part else document
        if not destination.exists():
            broken.append(f"{target}: no such file")
            continue
        if fragment and destination.suffix == ".md" and fragment not in anchors(destination):
            broken.append(f"{target}: no heading with the anchor #{fragment}")
    assert not broken, f"{document.relative_to(ROOT)}: {broken}"


def test_the_documents_link_to_each_other() -> None:
    """A sanity check of the link finder itself: the README links into docs/ and to the chart's README."""
    targets = links(ROOT / "README.md")
    assert "docs/README.md" in targets
    assert "charts/sandbox-orchestrator/README.md" in targets


def test_the_docs_index_lists_every_document() -> None:
    index = DOCS / "README.md"
    listed = {target.partition("#")[0] for target in links(index)}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p != index and p.name not in listed]
    assert not missing, f"docs/README.md does not list: {missing}"
    assert "../charts/sandbox-orchestrator/README.md" in listed
