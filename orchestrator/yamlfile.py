"""YAML documents validated by pydantic, with errors that name file, line and field.

Shared by policy, approval rules and profiles. Errors never echo values (a config may hold secrets).

A config file is input like any other: before anything is built from it, one pass over the parser's
events (which never recurses) enforces :class:`YamlLimits` — the file's size, how deep it nests, and
how many values it holds once its aliases are expanded (so an alias bomb is refused in
milliseconds, not after it filled memory) — and refuses text that cannot be encoded (a ``\\ud800``
escape) or holds NUL. Every refusal is CONFIG.INVALID naming file, line and field.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from orchestrator.domain.errors import ConfigInvalid
from orchestrator.domain.text import has_surrogates

M = TypeVar("M", bound=BaseModel)
# libyaml's parser when PyYAML was built with it (the wheels are): the same nodes and marks, ~10x faster
_FAST_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class YamlLimits:
    """What a config or profile document may be. The defaults hold any real config many times over."""

    max_bytes: int = 1024 * 1024
    """The file's size in bytes."""
    max_depth: int = 64
    """How deep mappings and sequences nest (aliases expanded)."""
    max_values: int = 100_000
    """Nodes (mappings, sequences, scalars, keys included) in the document once every alias is expanded."""


DEFAULT_LIMITS = YamlLimits()


def _field(loc: Loc) -> str:
    return ".".join(str(p) for p in loc) or "(root)"


def _refuse(source: str, line: int | None, loc: Loc | None, problem: str) -> ConfigInvalid:
    where = f"{source}:{line}" if line else source
    details: dict[str, Any] = {"file": source, "line": line}
    if loc is None:
        return ConfigInvalid(f"{where}: {problem}", details=details)
    field = _field(loc)
    return ConfigInvalid(f"{where}: {field}: {problem}", details={**details, "fields": [field]})


class _Located:
    """Plain data plus, for each path of keys/indices, the line (1-based) where it starts."""

    def __init__(self) -> None:
        self.lines: dict[Loc, int] = {}
        # PyYAML's safe constructor: the same types safe_load gives (an empty value is None)
        self._constructor = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: Loc) -> Any:
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            out: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                key = self._scalar(key_node, path)
                if isinstance(key, (str, int)) and key in out:
                    raise _DuplicateKey(str(key), key_node.start_mark.line + 1)
                child = (*path, key if isinstance(key, (str, int)) else str(key))
                out[key] = self.build(value_node, child)
                # a field's line is its key's line (a value may start on the next one)
                self.lines[child] = key_node.start_mark.line + 1
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        return self._scalar(node, path)

    def _scalar(self, node: yaml.Node, path: Loc) -> Any:
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as err:  # an unknown tag, a bad !!binary...
            raise _BadValue(path, node.start_mark.line + 1, err.problem or "cannot be read") from None

    def line_for(self, loc: Loc) -> int | None:
        # the deepest known ancestor of the failing field
        for cut in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:cut]))
            if line is not None:
                return line
        return None

    def field_at(self, line: int) -> Loc | None:
        """The field that starts last at or before ``line`` (the deepest one on that line)."""
        best: tuple[int, int, Loc] | None = None
        for loc, start in self.lines.items():
            if start <= line and (best is None or (start, len(loc)) > best[:2]):
                best = (start, len(loc), loc)
        return None if best is None else best[2]


class _BadValue(Exception):
    def __init__(self, loc: Loc, line: int, problem: str) -> None:
        super().__init__(problem)
        self.loc, self.line, self.problem = loc, line, problem


class _DuplicateKey(Exception):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(key)
        self.key = key
        self.line = line


# -- the limits: one pass over the parser's events ------------------------------------------------


class _Frame:
    """An open mapping or sequence during the event pass."""

    __slots__ = ("anchor", "depth", "expect_key", "index", "is_mapping", "key", "values")

    def __init__(self, is_mapping: bool, anchor: str | None) -> None:
        self.is_mapping = is_mapping
        self.anchor = anchor
        self.values = 1  # itself, then what it holds (aliases expanded)
        self.depth = 1  # levels of nesting below and including itself
        self.expect_key = True
        self.index = 0
        self.key: str | int | None = None

    def position(self) -> str | int | None:
        if self.is_mapping:
            return None if self.expect_key else self.key
        return self.index

    def took(self, values: int, depth: int, key: str | int | None) -> None:
        """A child node ended: count it, and move on to the next key, value or item."""
        self.values += values
        self.depth = max(self.depth, depth + 1)  # a scalar is 0 deep, a list of scalars 1
        if not self.is_mapping:
            self.index += 1
        elif self.expect_key:
            self.key, self.expect_key = ("?" if key is None else key), False
        else:
            self.expect_key = True


class _EventCheck:
    def __init__(self, source: str, limits: YamlLimits) -> None:
        self.source = source
        self.limits = limits
        self.stack: list[_Frame] = []
        self.anchors: dict[str, tuple[int, int]] = {}  # anchor -> (values, depth) of its node
        self.total = 0

    def loc(self) -> Loc:
        out: list[str | int] = []
        for frame in self.stack:
            position = frame.position()
            if position is None:
                break
            out.append(position)
        return tuple(out)

    def fail(self, event: yaml.Event, problem: str) -> ConfigInvalid:
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        return _refuse(self.source, line, self.loc(), problem)

    def count(self, event: yaml.Event, values: int, depth: int) -> None:
        """A node starts here, holding ``values`` values ``depth`` levels deep (an alias: its anchor's)."""
        self.total += values
        if len(self.stack) + depth > self.limits.max_depth:
            raise self.fail(event, f"nested deeper than {self.limits.max_depth} levels")
        if self.total > self.limits.max_values:
            expanded = " once its aliases are expanded" if isinstance(event, yaml.AliasEvent) else ""
            raise self.fail(event, f"the document holds more than {self.limits.max_values} values{expanded}")

    def ended(self, values: int, depth: int, key: str | None) -> None:
        if self.stack:
            self.stack[-1].took(values, depth, key)

    def run(self, text: str, loader: Any = _FAST_LOADER) -> None:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.ScalarEvent):
                if "\x00" in event.value:
                    raise self.fail(event, "NUL characters are not allowed")
                if has_surrogates(event.value):
                    raise self.fail(event, "must be valid UTF-8 text (a \\ud800-\\udfff escape is not)")
                self.count(event, 1, 0)
                if event.anchor is not None:
                    self.anchors[event.anchor] = (1, 0)
                self.ended(1, 0, event.value)
            elif isinstance(event, yaml.AliasEvent):
                size = self.anchors.get(event.anchor or "")
                if size is None:
                    inside = any(f.anchor == event.anchor for f in self.stack)
                    raise self.fail(
                        event, "an alias refers to a node that contains it" if inside else "undefined alias"
                    )
                self.count(event, *size)
                self.ended(*size, None)
            elif isinstance(event, yaml.CollectionStartEvent):
                self.count(event, 1, 1)
                self.stack.append(_Frame(isinstance(event, yaml.MappingStartEvent), event.anchor))
            elif isinstance(event, yaml.CollectionEndEvent):
                frame = self.stack.pop()
                if frame.anchor is not None:
                    self.anchors[frame.anchor] = (frame.values, frame.depth)
                self.ended(frame.values, frame.depth, None)


# -- parsing -------------------------------------------------------------------------------------


def _bad_character(text: str, position: int, source: str, limits: YamlLimits) -> ConfigInvalid:
    """A character YAML does not allow (NUL, other controls): its line, and the field it is in."""
    line = text.count("\n", 0, position) + 1
    code = ord(text[position]) if position < len(text) else 0
    cleaned = yaml.reader.Reader.NON_PRINTABLE.sub(" ", text)
    loc = None
    if cleaned != text:  # parse it again without them, to learn which field the line belongs to
        with contextlib.suppress(ConfigInvalid):
            loc = parse_yaml(cleaned, source, limits)[1].field_at(line)
    return _refuse(source, line, loc, f"the character U+{code:04X} is not allowed in YAML")


def _explain(err: yaml.YAMLError, text: str, source: str, limits: YamlLimits) -> ConfigInvalid:
    """CONFIG.INVALID for a document libyaml refused, in the words of PyYAML's own parser (its messages
    are the clearer ones) when it refuses it too."""
    if isinstance(err, yaml.reader.ReaderError):
        return _bad_character(text, err.position, source, limits)
    try:
        # the limits again, so that a document too deep or too large is refused as such, and soon:
        # libyaml looks ahead over a whole flow collection before its first event (and since 0.2.6 gives
        # up past 1,000 levels), while PyYAML's parser costs time quadratic in the depth it has seen
        _EventCheck(source, limits).run(text, yaml.SafeLoader)
    except ConfigInvalid as refused:
        return refused
    except yaml.YAMLError as clearer:
        err = clearer
    mark = getattr(err, "problem_mark", None)
    line = mark.line + 1 if mark is not None else None
    problem = getattr(err, "problem", None) or "invalid YAML"
    context, context_mark = getattr(err, "context", None), getattr(err, "context_mark", None)
    if context and context_mark is not None and context_mark.line + 1 != line:
        # an unclosed bracket or quote fails at the end: say where it was opened
        problem += f" ({context} at line {context_mark.line + 1})"
    return _refuse(source, line, None, f"invalid YAML: {problem}")


def parse_yaml(text: str, source: str, limits: YamlLimits = DEFAULT_LIMITS) -> tuple[Any, _Located]:
    """Parse one YAML document safely, within ``limits``, keeping line numbers. Raises CONFIG.INVALID."""
    located = _Located()
    try:
        _EventCheck(source, limits).run(text)
        node = yaml.compose(text, Loader=_FAST_LOADER)
        data = None if node is None else located.build(node, ())
    except _DuplicateKey as dup:
        raise ConfigInvalid(
            f"{source}:{dup.line}: duplicate key {dup.key!r}",
            details={"file": source, "line": dup.line, "field": dup.key},
        ) from None
    except _BadValue as bad:
        raise _refuse(source, bad.line, bad.loc, f"invalid YAML: {bad.problem}") from None
    except yaml.YAMLError as err:
        raise _explain(err, text, source, limits) from None
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
            field = _field(loc)
            line = located.line_for(loc) if located else None
            first_line = first_line or line
            fields.append(field)
            problems.append(f"{source}:{line if line else '?'}: {field}: {item['msg']}")
        raise ConfigInvalid(
            "; ".join(problems), details={"file": source, "line": first_line, "fields": fields}
        ) from None


def read_text(path: Path, limits: YamlLimits = DEFAULT_LIMITS) -> str:
    """A config file's text: at most ``limits.max_bytes``, UTF-8. Raises CONFIG.INVALID (naming the
    line and field of the first byte that is not UTF-8)."""
    source = str(path)
    try:
        with path.open("rb") as file:
            raw = file.read(limits.max_bytes + 1)  # never more, whatever the file is (a FIFO, /dev/zero)
    except FileNotFoundError:
        raise ConfigInvalid(f"{source}: file not found", details={"file": source}) from None
    except OSError as err:
        raise ConfigInvalid(
            f"{source}: cannot read: {err.strerror or err.__class__.__name__}", details={"file": source}
        ) from None
    if len(raw) > limits.max_bytes:
        raise ConfigInvalid(
            f"{source}: larger than {limits.max_bytes} bytes, the most a config file may have",
            details={"file": source, "limit": limits.max_bytes},
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        try:
            _, located = parse_yaml(raw.decode("utf-8", errors="replace"), source, limits)
            loc = located.field_at(line)
        except ConfigInvalid:
            loc = None
        raise _refuse(source, line, loc, f"not UTF-8 (byte {err.start + 1} of the file)") from None


def load_yaml_mapping(
    path: Path, what: str = "the document", limits: YamlLimits = DEFAULT_LIMITS
) -> tuple[dict[str, Any], _Located]:
    """Read ``path`` as one YAML mapping (an empty file is an empty mapping). Raises CONFIG.INVALID."""
    source = str(path)
    data, located = parse_yaml(read_text(path, limits), source, limits)
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
