#!/usr/bin/env python3
"""Generate charts/sandbox-orchestrator/values.schema.json from the controller's config models.

    .venv/bin/python scripts/gen_chart_schema.py           # write charts/sandbox-orchestrator/values.schema.json
    .venv/bin/python scripts/gen_chart_schema.py --check   # exit 1 if the committed file differs

Two inputs, one output:

* the chart-only values (image, controller, workspaces, tokens, ...: what becomes Kubernetes objects) are
  hand-written in charts/sandbox-orchestrator/values.schema.chart.yaml (left out of the packaged chart by
  its .helmignore);
* what reaches the controller's config.yaml comes from ``OrchestratorConfig.model_json_schema`` in
  validation mode (the form values are given in: sizes as '1g' or bytes, every field optional where the
  model has a default). In the source, ``{$config: PATH}`` stands for the schema of the config field at
  PATH (dotted, ``[]`` for a list's items): ``$config: ''`` is the ``config`` value (the whole config less
  what the chart writes itself, CHART_WRITES), ``$config: backend.kubernetes.workspace.mode`` a chart value
  the templates copy into that field. A marker's description is the chart's (values.yaml's words); other
  keywords beside it may add to the model's, never contradict it.

Rules between config fields and chart values are generated too, from the config module's own facts:
``pool.enabled`` needs a workspace mode of POOL_WORKSPACE_MODES (the config's validator refuses the same at
start-up, with the config's field names). The output is deterministic: sorted keys, 2-space indents, the
model's ``$defs`` that are referred to, at the root.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from orchestrator.pipeline.config import POOL_WORKSPACE_MODES, OrchestratorConfig, pool_workspace_refusal

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "sandbox-orchestrator"
SOURCE = CHART / "values.schema.chart.yaml"
OUTPUT = CHART / "values.schema.json"
COMMAND = ".venv/bin/python scripts/gen_chart_schema.py"

MARKER = "$config"
# What the chart's templates write into the config themselves (_helpers.tpl, "so.config"): never values.
CHART_WRITES = ("backend", "service.tokens", "service.workspaces", "service.workspace_owner")
# Annotations of a model field a chart value does not take over (values.yaml holds the chart's defaults).
NOT_TAKEN = ("title", "default")
DEFS = "#/$defs/"


class SchemaSourceError(Exception):
    """The source names a config field that does not exist, or contradicts the model."""


class _Config:
    """The config's JSON Schema, and its fields by path."""

    def __init__(self) -> None:
        self.schema = OrchestratorConfig.model_json_schema(mode="validation")
        self.defs: dict[str, Any] = self.schema["$defs"]

    def deref(self, node: dict[str, Any]) -> dict[str, Any]:
        """``node`` with a top-level $ref replaced by its definition (the node's own keys win) and an
        optional value by its non-null form (a chart value set to null is removed by helm, never seen)."""
        while True:
            if "$ref" in node:
                name = node["$ref"].removeprefix(DEFS)
                node = {**self.defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
                continue
            branches = node.get("anyOf")
            if isinstance(branches, list) and {"type": "null"} in branches:
                rest = [b for b in branches if b != {"type": "null"}]
                outer = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
                node = {**outer, **(rest[0] if len(rest) == 1 else {"anyOf": rest})}
                continue
            return node

    def field(self, path: str) -> dict[str, Any]:
        node = self.schema
        for part in path.split("."):
            name = part.removesuffix("[]")
            properties = self.deref(node).get("properties", {})
            if name not in properties:
                raise SchemaSourceError(f"{MARKER}: {path}: the config has no field {name!r} there")
            node = properties[name]
            if part.endswith("[]"):
                node = self.deref(node)["items"]
        return self.deref(node)

    def value(self) -> dict[str, Any]:
        """The ``config`` value: each section of the config (inlined), less what the chart writes."""
        sections: dict[str, Any] = {}
        for name, node in self.schema["properties"].items():
            if name in CHART_WRITES:
                continue
            section = self.deref(node)
            written = [w.split(".", 1)[1] for w in CHART_WRITES if w.startswith(f"{name}.")]
            if written:
                properties = {k: v for k, v in section["properties"].items() if k not in written}
                section = {**section, "properties": properties}
                if "required" in section:
                    section["required"] = [r for r in section["required"] if r not in written]
            sections[name] = section
        return {"type": "object", "additionalProperties": False, "properties": sections}


def _substitute(node: Any, config: _Config, marks: dict[str, str], at: tuple[str, ...]) -> Any:
    """``node`` with every marker replaced; ``marks`` collects config path -> chart value path."""
    if isinstance(node, list):
        return [_substitute(item, config, marks, at) for item in node]
    if not isinstance(node, dict):
        return node
    if MARKER not in node:
        return {key: _substitute(sub, config, marks, (*at, key)) for key, sub in node.items()}
    path = node[MARKER]
    if not isinstance(path, str):
        raise SchemaSourceError(f"{'.'.join(at)}: {MARKER} must be a config path (a string)")
    given = {k: v for k, v in node.items() if k != MARKER}
    if path == "":
        return {**config.value(), **given}
    model = {k: v for k, v in config.field(path).items() if k not in NOT_TAKEN}
    for key, value in given.items():
        if key != "description" and key in model and model[key] != value:
            raise SchemaSourceError(f"{'.'.join(at)}: {key} contradicts {MARKER} {path}: {value!r} != {model[key]!r}")
    marks[path] = _value_path(at)
    return {**model, **given}


def _value_path(at: tuple[str, ...]) -> str:
    """The dotted path of the value a subschema at ``at`` describes (``properties`` names a key, ``items``
    a list's items; applicators such as anyOf describe the same value)."""
    names, rest = [], list(at)
    while rest:
        keyword = rest.pop(0)
        if keyword == "properties" and rest:
            names.append(rest.pop(0))
    return ".".join(names)


def _requiring(path: str, leaf: dict[str, Any]) -> dict[str, Any]:
    """A subschema that holds when the value at dotted ``path`` is present and meets ``leaf``."""
    node = leaf
    for name in reversed(path.split(".")):
        node = {"properties": {name: node}, "required": [name]}
    return node


def _merged(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two _requiring() subschemas as one (both must hold)."""
    properties = dict(a["properties"])
    for name, sub in b["properties"].items():
        properties[name] = _merged(properties[name], sub) if name in properties else sub
    return {"properties": properties, "required": sorted({*a["required"], *b["required"]})}


def _pool_rule(marks: dict[str, str]) -> dict[str, Any]:
    """config.pool.enabled needs a poolable workspace mode (pipeline/config.py's fact, in chart names). JSON
    Schema has no messages of its own: the refusal is a property the values cannot have, named by the
    sentence (helm prints "missing property '<sentence>'")."""
    mode = marks.get("backend.kubernetes.workspace.mode")
    if mode is None:
        raise SchemaSourceError(f"no chart value is {MARKER}: backend.kubernetes.workspace.mode")
    condition = _merged(
        _requiring("config.pool.enabled", {"const": True}),
        _requiring(mode, {"not": {"enum": list(POOL_WORKSPACE_MODES)}}),
    )
    return {
        "description": "Pre-started pods need a mounted workspace (orchestrator/pipeline/config.py,"
        " POOL_WORKSPACE_MODES; the controller refuses the same config at start-up).",
        "if": condition,
        "then": {"required": [pool_workspace_refusal("config.pool.enabled", mode)]},
    }


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(DEFS):
            yield ref.removeprefix(DEFS)
        for sub in node.values():
            yield from _refs(sub)
    elif isinstance(node, list):
        for sub in node:
            yield from _refs(sub)


def build_schema(source: dict[str, Any] | None = None) -> dict[str, Any]:
    """The values schema: the source with its markers replaced, the generated rules, the $defs used."""
    if source is None:
        source = yaml.safe_load(SOURCE.read_text(encoding="utf-8"))
    config = _Config()
    marks: dict[str, str] = {}
    schema: dict[str, Any] = _substitute(source, config, marks, ())
    schema["allOf"] = [*schema.get("allOf", []), _pool_rule(marks)]
    defs: dict[str, Any] = {}
    pending = list(_refs(schema))
    while pending:
        name = pending.pop()
        if name not in defs:
            defs[name] = config.defs[name]
            pending.extend(_refs(defs[name]))
    if defs:
        schema["$defs"] = defs
    return schema


def render() -> str:
    """The committed text: 2-space indented, sorted keys, a trailing newline."""
    return json.dumps(build_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed file differs")
    parser.add_argument("--output", type=Path, default=OUTPUT, help=f"default: {OUTPUT.relative_to(REPO)}")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            sys.stderr.write(f"{args.output} is out of date: run {COMMAND}\n")
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
