"""YAML documents validated by pydantic, with errors that name file, line and field.

Shared by policy, approval rules and profiles. Errors never echo values (a config may hold secrets).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.domain.errors import ConfigInvalid

M = TypeVar("M", bound=BaseModel)
# libyaml's parser when PyYAML was built with it (the wheels are): the same nodes and marks, ~10x faster
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Located:
    """Plain data plus, for each path of keys/indices, the line (1-based) where it starts."""

    def __init__(self) -> None:
        self.lines: dict[tuple[str | int, ...], int] = {}
        # PyYAML's safe constructor: the same types safe_load gives (an empty value is None)
        self._constructor = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: tuple[str | int, ...]) -> Any:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self._scalar(key_node)
                if isinstance(key, (str, int)) and key in out:
                    raise _DuplicateKey(str(key), key_node.start_mark.line + 1)
                child = (*path, key if isinstance(key, (str, int)) else str(key))
                out[key] = self.build(value_node, child)
                # a field's line is its key's line (a value may start on the next one)
                self.lines[child] = key_node.start_mark.line + 1
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalar(node)

    def _scalar(self, node: yaml.Node) -> Any:
        return self._constructor.construct_object(node, deep=True)

    def line_for(self, loc: tuple[str | int, ...]) -> int | None:
        # the deepest known ancestor of the failing field
        for cut in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:cut]))
            if line is not None:
                return line
        return None


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(key)
        self.key = key
        self.line = line


def _compose(text: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=_FAST_LOADER)
    except yaml.YAMLError:
        # say what is wrong as PyYAML's own parser does (its messages are the clearer ones)
        return yaml.compose(text, Loader=yaml.SafeLoader)


def parse_yaml(text: str, source: str) -> tuple[Any, _Located]:
    """Parse one YAML document safely, keeping line numbers. Raises CONFIG.INVALID."""
    located = _Located()
    try:
        node = _compose(text)
        data = None if node is None else located.build(node, ())
    except _DuplicateKey as dup:
        raise ConfigInvalid(
            f"{source}:{dup.line}: duplicate key {dup.key!r}",
            details={"file": source, "line": dup.line, "field": dup.key},
        ) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(err, "problem", None) or "invalid YAML"
        context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
        if context and context_mark is not None and context_mark.line + 1 != line:
            # an unclosed bracket or quote fails at the end: say where it was opened
            problem += f" ({context} at line {context_mark.line + 1})"
        where = f"{source}:{line}" if line else source
        raise ConfigInvalid(f"{where}: invalid YAML: {problem}", details={"file": source, "line": line}) from None
    return data, located


def validate(model: type[M], data: Any, located: _Located | None, source: str, root: tuple[str, ...] = ()) -> M:
    """Validate ``data`` (found at ``root`` in the document) into ``model``; CONFIG.INVALID names every field."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        problems = []
        first_line: int | None = None
        fields = []
        for item in err.errors(include_input=False, include_url=False):
            loc = (*root, *item["loc"])
            field = ".".join(str(p) for p in loc) or "(root)"
            line = located.line_for(loc) if located else None
            first_line = first_line or line
            fields.append(field)
            problems.append(f"{source}:{line if line else '?'}: {field}: {item['msg']}")
        raise ConfigInvalid(
            "; ".join(problems), details={"file": source, "line": first_line, "fields": fields}
        ) from None


def load_yaml_mapping(path: Path, what: str = "the document") -> tuple[dict[str, Any], _Located]:
    """Read ``path`` as one YAML mapping (an empty file is an empty mapping). Raises CONFIG.INVALID."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigInvalid(f"{source}: file not found", details={"file": source}) from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigInvalid(f"{source}: cannot read: {err.__class__.__name__}", details={"file": source}) from None
    data, located = parse_yaml(text, source)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigInvalid(f"{source}:1: {what} must be a mapping", details={"file": source, "line": 1})
    return data, located


def load_model_file(model: type[M], path: Path, key: str | None = None) -> M:
    """Read ``path``, take top-level ``key`` (or the whole document), validate into ``model``."""
    data, located = load_yaml_mapping(path)
    if key is not None:
        section = data.get(key, {})
        return validate(model, section if section is not None else {}, located, str(path), (key,))
    return validate(model, data, located, str(path))
