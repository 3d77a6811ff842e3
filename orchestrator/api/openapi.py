"""The OpenAPI 3.1 document, generated from the route table, the wire models and the service's limits
(never written by hand), and as strict as the service: a request it allows is one the service takes,
except for refusals no schema can say (an unknown id: 404; the policy: 403; ``_BAD_REQUEST_NOTES``).

Most constraints come with the models themselves (pydantic's schema of the very model a handler
validates with). What the library's request models check in validators of their own (``domain.requests``:
the kernel's limits on argv, environment and paths) and what the service adds (workspace names, the tools
a grant may name) is added here, from the same constants those checks use."""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from orchestrator.api.routes import ROUTES, Route
from orchestrator.domain.errors import all_error_types
from orchestrator.domain.requests import (
    ALL_TOOLS,
    ENV_NAME,
    MAX_ARG_BYTES,
    MAX_EGRESS_HOSTS,
    MAX_EXEC_BYTES,
    MAX_PATH_BYTES,
    Request,
)
from orchestrator.domain.wire import ErrorResponse
from orchestrator.evidence.records import ShortText
from orchestrator.evidence.verify import VerifyReport
from orchestrator.gate.matching import TOOL_GROUPS
from orchestrator.service.workspaces import WORKSPACE_NAME

_REF = "#/components/schemas/{model}"
#: a string the kernel takes (argv, environment, paths): no NUL character
NO_NUL = "^[^\\x00]*$"
#: custom string formats (JSON Schema has no words for these grammars); each is defined in the info text
FORMATS = {
    "egress-host-pattern": "host:port, host:* or *.domain:port; an IPv4 address, or an IPv6 address in brackets;"
    " ASCII only (IDNA names as xn--), DNS labels of letters, digits, '-' and '_'.",
    "glob": "an fnmatch glob, not empty, without NUL, every '[' closed, no reversed range such as [z-a].",
    "command-pattern": "a command pattern: words as a shell splits them (quotes balanced), the first naming a"
    " program (or a glob over programs), then flags and a positional prefix.",
}
_SUCCESS_TEXT = {
    200: "OK",
    201: "Created",
    202: "Accepted: not finished yet",
    204: "Done (no body)",
}
_ERROR_TEXT = {
    400: "Invalid input: INPUT.INVALID names the fields in details.fields",
    401: "No or unknown token",
    403: "Not allowed for this token, or refused by the policy or an approver",
    404: "No such resource (or another tenant's)",
    409: "Conflict: no longer pending / not running",
    413: "Body too large",
    422: "A CI job or step asks for what no sandbox is given",
    429: "Rate limited (or too many open streams or sessions)",
    500: "A bug, never expected (INTERNAL)",
    503: "Unavailable (engine, store, evidence)",
}
#: what a 400 may still say about a body the schema allows: refusals that depend on the state of the service,
#: the token or the clock, or on limits JSON Schema cannot count (UTF-8 bytes, sums of fields)
_REQUEST_NOTE = (
    " The schema cannot say everything: a request it allows may still be refused for an unknown profile"
    " (PROFILE.NOT_FOUND), by a token that acts for several tenants without naming one (tenant), for a text"
    " past its limit in UTF-8 bytes (argv, env entries, paths, shell strings: the schema's maxLength counts"
    f" characters), for argv and env together past {MAX_EXEC_BYTES} bytes, or for a text that is not valid"
    " Unicode (a lone surrogate escape)."
)
_BAD_REQUEST_NOTES = {
    "ExecutionRequest": _REQUEST_NOTE,
    "SessionRequest": _REQUEST_NOTE,
    "GrantRequest": " The schema cannot say everything: a grant it allows may still be refused for an expires_at"
    " that is not in the future.",
}


def _codes(status: int) -> list[str]:
    return sorted({cls.code for cls in all_error_types() if cls.http_status == status and cls.code != "INTERNAL"})


def _error_description(status: int, route: Route) -> str:
    if status == 400:  # PROFILE.NOT_FOUND only where a request names a profile
        body = route.body if isinstance(route.body, str) else getattr(route.body, "__name__", "")
        note = _BAD_REQUEST_NOTES.get(body, "")
        named = "INPUT.INVALID, PROFILE.NOT_FOUND" if note == _REQUEST_NOTE else "INPUT.INVALID"
        return f"{_ERROR_TEXT[400]} ({named}).{note}"
    codes = [] if status == 500 else _codes(status)
    return f"{_ERROR_TEXT[status]} ({', '.join(codes)})." if codes else f"{_ERROR_TEXT[status]}."


def _string_branch(prop: dict[str, Any]) -> dict[str, Any]:
    """The string schema of an optional field (``anyOf: [string, null]``), or the field's own."""
    for branch in prop.get("anyOf", ()):
        if branch.get("type") == "string":
            return dict(branch)
    return prop


def _constrain(prop: dict[str, Any], extra: dict[str, Any], note: str) -> None:
    target = _string_branch(prop)
    target.update(extra)
    if target is not prop:
        prop["anyOf"] = [target if b.get("type") == "string" else b for b in prop["anyOf"]]
    prop["description"] = f"{prop.get('description', '').rstrip('.')}. {note}".lstrip(". ")


def _kernel_text(limit: int) -> dict[str, Any]:
    """A string handed to the kernel: no NUL, and (characters: the bytes are said in words) ``limit``."""
    return {"pattern": NO_NUL, "maxLength": limit}


#: what the evidence takes of a request's call_id (records.ShortText: the evidence refuses anything else)
_RECORDED = {k: v for k, v in TypeAdapter(ShortText).json_schema().items() if k != "type"}


def _request_schemas() -> dict[str, Any]:
    """ExecutionRequest (``POST /v1/executions``, any tool) and SessionRequest (``POST /v1/sessions``: an
    exec_command request, its tool optional), with what ``domain.requests``' validators and the service
    check beyond the models' field types."""
    schema = TypeAdapter(Request).json_schema(ref_template=_REF, mode="validation")
    defs: dict[str, Any] = schema.pop("$defs")
    workspace = WORKSPACE_NAME.pattern
    argv_note = f"No NUL; each at most {MAX_ARG_BYTES} bytes in UTF-8; the first not empty."
    for model in defs.values():
        props: dict[str, Any] = model.get("properties", {})
        if "tool" not in props or "tenant" not in props:  # a request model (McpContext has a tool too)
            continue
        _constrain(props["cwd"], _kernel_text(MAX_PATH_BYTES), f"No NUL; at most {MAX_PATH_BYTES} bytes in UTF-8.")
        env = props["env"]
        env["propertyNames"] = {"pattern": ENV_NAME.pattern}
        env["additionalProperties"] = {"type": "string", "pattern": NO_NUL, "maxLength": MAX_ARG_BYTES}
        env["description"] += (
            f" Names: {ENV_NAME.pattern}; values without NUL; NAME=value at most {MAX_ARG_BYTES} bytes."
        )
        _constrain(
            props["tenant"],
            {"pattern": workspace},
            "With the service: 1-128 of A-Z a-z 0-9 . _ - (it names a workspace directory); a token that is not an"
            " admin's names one of its own tenants.",
        )
        _constrain(props["session_id"], {"pattern": workspace}, "With the service: as tenant (a workspace directory).")
        _constrain(props["call_id"], _RECORDED, "Not empty: the evidence records it.")
        for name in ("argv", "command", "cmd"):
            prop = props.get(name)
            if prop is None:
                continue
            if prop.get("type") == "array":
                item = {"type": "string", **_kernel_text(MAX_ARG_BYTES)}
                prop["items"] = item
                prop["prefixItems"] = [{**item, "minLength": 1}]
                prop["description"] = f"{prop['description']} {argv_note}"
            else:
                _constrain(prop, _kernel_text(MAX_ARG_BYTES), f"No NUL; at most {MAX_ARG_BYTES} bytes in UTF-8.")
        if "path" in props:
            _constrain(props["path"], {"pattern": NO_NUL}, f"No NUL; at most {MAX_PATH_BYTES} bytes in UTF-8.")
        model["description"] = (
            f"{model.get('description', model['title'])} Every text valid Unicode; argv (or the shell string) and"
            f" env together at most {MAX_EXEC_BYTES} bytes."
        )
    for name in ("source", "target"):
        _constrain(defs["ExtraMount"]["properties"][name], {"pattern": NO_NUL}, "No NUL.")
    _constrain(
        defs["ScriptFile"]["properties"]["path"],
        _kernel_text(MAX_PATH_BYTES),
        f"No NUL; at most {MAX_PATH_BYTES} bytes.",
    )
    network = defs["SandboxPermissions"]["properties"]["network"]
    for branch in network["anyOf"]:
        if branch.get("type") == "array":
            branch["maxItems"] = MAX_EGRESS_HOSTS
            branch["items"] = {**branch["items"], "format": "egress-host-pattern"}
    session = copy.deepcopy(defs["ExecCommandRequest"])
    session["required"] = [name for name in session["required"] if name != "tool"]
    session["properties"]["tool"]["description"] = "exec_command (the default): a session runs a shell string."
    session["title"] = "SessionRequest"
    defs["SessionRequest"] = session
    defs["ExecutionRequest"] = schema
    return defs


def _grant_tools(schemas: dict[str, Any]) -> None:
    """The tool names a grant's conditions may hold: what the gate's matcher takes (gate.matching)."""
    for name, model in schemas.items():
        if name.split("-")[0] == "GrantConditions":
            for branch in model["properties"]["tool"]["anyOf"]:
                if branch.get("type") == "array":
                    branch["items"]["enum"] = [*ALL_TOOLS, *TOOL_GROUPS]


def _dataclass_schemas(schemas: dict[str, Any]) -> None:
    """Answers that are dataclasses, not models (the evidence verifier's report)."""
    for route in ROUTES:
        if route.response is None or issubclass(route.response, BaseModel):
            continue
        schema = TypeAdapter(route.response).json_schema(ref_template=_REF, mode="serialization")
        schemas.update(schema.pop("$defs", {}))
        schemas[route.response.__name__] = schema
    report = schemas[VerifyReport.__name__]  # VerifyReport.to_dict adds its `complete` property
    report["properties"]["complete"] = {"type": "boolean", "description": VerifyReport.complete.__doc__}
    report["required"] = [*report.get("required", []), "complete"]


def _body(route: Route) -> dict[str, Any] | None:
    if route.body is None:
        return None
    name = route.body if isinstance(route.body, str) else route.body.__name__
    schemas = {"application/json": {"schema": {"$ref": _REF.format(model=name)}}}
    return {"required": route.body_required, "content": schemas}


def _content(route: Route) -> dict[str, Any] | None:
    if route.success == (204,):
        return None
    if route.response is not None:
        return {route.media: {"schema": {"$ref": _REF.format(model=route.response.__name__)}}}
    if route.media == "application/json":
        return {route.media: {"schema": {"type": "object"}}}
    return {route.media: {"schema": {"type": "string"}}}


def build_document(version: str, limits: object) -> dict[str, Any]:
    """The document of a service with these ``limits`` (its ``service.limits``: page sizes and waits)."""
    modes: dict[type[BaseModel], JsonSchemaMode] = {ErrorResponse: "serialization"}
    for route in ROUTES:
        if isinstance(route.body, type):
            modes[route.body] = "validation"
        if route.response is not None and issubclass(route.response, BaseModel):
            modes[route.response] = "serialization"
    _, defs = models_json_schema(sorted(modes.items(), key=lambda m: m[0].__name__), ref_template=_REF)
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))
    schemas.update(_request_schemas())
    _dataclass_schemas(schemas)
    _grant_tools(schemas)

    paths: dict[str, dict[str, Any]] = defaultdict(dict)
    for route in ROUTES:
        op: dict[str, Any] = {
            "operationId": route.endpoint.operation,
            "summary": route.summary,
            "parameters": [param.document(limits) for param in route.params],
            "responses": {},
        }
        if route.auth:
            op["security"] = [{"bearer": []}]
        body = _body(route)
        if body is not None:
            op["requestBody"] = body
        content = _content(route)
        for status in route.success:
            answer: dict[str, Any] = {"description": _SUCCESS_TEXT.get(status) or _ERROR_TEXT[status]}
            if content is not None:
                answer["content"] = content
            op["responses"][str(status)] = answer
        errors = {*route.errors, 500, *((401, 429) if route.auth else ())} - set(route.success)
        for status in sorted(errors):
            op["responses"][str(status)] = {
                "description": _error_description(status, route),
                "content": {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")}}},
            }
        paths[route.path][route.method.lower()] = op
    formats = "".join(f"\n- `{name}`: {text}" for name, text in FORMATS.items())
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "sandbox-orchestrator",
            "version": version,
            "description": "Governed, contained execution: policy gate, approvals, hardened sandboxes, evidence."
            f"\n\nString formats of this document:{formats}",
        },
        "paths": dict(paths),
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
