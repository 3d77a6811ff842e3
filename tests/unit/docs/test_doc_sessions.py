"""How the docs' transcripts read (tests/support/doc_sessions.py): the first-hour tier trusts this."""

from __future__ import annotations

from pathlib import Path

from tests.support.doc_sessions import Step, answers, blocks, matches

DOC = """\
Text.

```console
$ echo one \\
    two
one two
$ false
$ echo $?
1
```

```python client.py
print("hi")
```

```yaml ~/first-hour.yaml
a: 1
```

```console terminal
$ sandboxctl run -- python3 -c 'print(1)'
Approval needed (...)
Approve? [y]es / [s]ession / [n]o / [a]bort: y
1
```

```sh
make test
```
"""


def test_a_document_reads_as_transcripts_and_named_files(tmp_path: Path) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text(DOC)
    found = blocks(doc, tmp_path)
    assert [(b.lang, b.name, b.terminal) for b in found] == [
        ("console", None, False),
        ("python", "client.py", False),
        ("yaml", "~/first-hour.yaml", False),
        ("console", None, True),
        ("sh", None, False),  # shown, not run
    ]
    assert [b.stray for b in found if b.lang == "console"] == [(), ()]
    assert found[0].steps == (
        Step("echo one \\\n    two", ("one two",)),
        Step("false", ()),
        Step("echo $?", ("1",)),
    )
    assert found[0].where == "guide.md:3"  # the line of its opening fence
    assert found[1].text == 'print("hi")\n'
    assert answers(found[3].steps[0]) == ["y"]


def test_output_matches_literally_with_ellipses_for_lines_and_text() -> None:
    assert matches((), "")
    assert not matches((), "something\n")
    assert matches(("a", "b"), "a\nb\n")
    assert matches(("a", "b"), "a  \nb")  # trailing blanks and the last newline do not count
    assert not matches(("a",), "a\nb\n")
    assert matches(("a", "...", "z"), "a\nz\n")
    assert matches(("a", "...", "z"), "a\nb\nc\nz\n")
    assert matches(("...",), "anything\nat all\n")
    assert matches(("total ...",), "total 8\n")
    assert matches(("OK: ... record(s), chain intact, ...",), "OK: 5 record(s), chain intact, head ok\n")
    assert not matches(("OK: ... record(s)",), "FAIL: 5 record(s)\n")
    assert not matches(("a.c",), "abc\n")  # only ... is special
    assert not matches(("x ... y",), "x 1\n2 y\n")  # ... in a line stays in that line


def test_a_transcript_line_before_its_first_command_is_stray(tmp_path: Path) -> None:
    doc = tmp_path / "guide.md"
    doc.write_text("```console\n# make demo\n$ true\n```\n```console\n$make demo\n```\n")
    first, second = blocks(doc, tmp_path)
    assert first.stray == ("# make demo",) and [s.command for s in first.steps] == ["true"]
    assert second.steps == () and second.stray == ("$make demo",)
