"""The JSON Schema of the profile file form (committed as ``profiles/schema.json``)."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.profiles.models import Profile

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def profile_json_schema() -> dict[str, Any]:
    """JSON Schema of ``profiles/NAME.yaml``. ``name`` is optional in a file (it defaults to the file name)."""
    schema = Profile.model_json_schema(mode="validation")
    schema["required"] = [r for r in schema.get("required", []) if r != "name"]
    schema["properties"]["name"]["description"] = (
        "The profile name; optional, defaults to the file name without .yaml and must equal it when given."
    )
    return {
        "$schema": SCHEMA_DIALECT,
        **schema,
        "title": "Execution profile",
        "description": (
            "An execution profile of sandbox-orchestrator (profiles/NAME.yaml). Sizes are bytes or strings "
            "such as '64m' or '1g' (powers of 1024); times are seconds. With 'extends', the parent's settings "
            "are deep-merged under this file's (mappings merged, lists replaced)."
        ),
    }


def profile_json_schema_text() -> str:
    """The schema as committed: 2-space indented, sorted keys, trailing newline."""
    return json.dumps(profile_json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
