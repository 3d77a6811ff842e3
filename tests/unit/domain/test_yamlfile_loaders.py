"""libyaml parses the good documents (fast); PyYAML's own parser explains the bad ones. Both must
read every shipped document to the same data with the same lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import orchestrator
from orchestrator import yamlfile

PACKAGE = Path(orchestrator.__file__).resolve().parent
ROOT = PACKAGE.parent
SHIPPED = sorted(
    {
        *PACKAGE.rglob("*.yaml"),
        *(ROOT / "profiles").glob("*.yaml"),
        *(ROOT / "charts").rglob("values*.yaml"),
    }
)


def _read(text: str, loader: object) -> tuple[object, dict[tuple[str | int, ...], int]]:
    located = yamlfile._Located()
    node = yaml.compose(text, Loader=loader)  # type: ignore[arg-type]
    data = None if node is None else located.build(node, ())
    return data, located.lines


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_both_parsers_read_shipped_documents_alike(path: Path) -> None:
    text = path.read_text()
    assert _read(text, yaml.CSafeLoader) == _read(text, yaml.SafeLoader)


def test_the_fast_parser_is_the_one_used() -> None:
    assert yamlfile._FAST_LOADER is yaml.CSafeLoader


def test_a_bad_document_is_explained_by_pyyaml_s_parser() -> None:
    from orchestrator.domain.errors import ConfigInvalid

    with pytest.raises(ConfigInvalid, match=r"x.yaml:3: invalid YAML: expected ',' or '}'"):
        yamlfile.parse_yaml("a: 1\nb: {c: 1\n", "x.yaml")
