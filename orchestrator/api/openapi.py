"""The OpenAPI 3.1 document, generated from the route table and the wire models (never written by hand)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter
from pydantic.json_schema import models_json_schema

from orchestrator.api.routes import ROUTES
from orchestrator.domain.requests import Request
from orchestrator.domain.wire import ErrorResponse

_REF = "#/components/schemas/{model}"
_STATUS_TEXT = {
    200: "OK",
    202: "Accepted: not finished yet",
    400: "Invalid input (INPUT.INVALID names the fields)",
    401: "No or unknown token",
    403: "Not allowed for this token, or refused by the policy or an approver",
    404: "No such resource (or another tenant's)",
    409: "Conflict: no longer pending / not running",
    413: "Body too large",
    429: "Rate limited",
    503: "Unavailable (engine, store, evidence)",
}


def build_document(version: str) -> dict[str, Any]:
    models: set[type[BaseModel]] = {ErrorResponse}
    for route in ROUTES:
        models.update(m for m in (route.body, route.response) if m is not None)
    _, defs = models_json_schema(
        [(m, "serialization") for m in sorted(models, key=lambda m: m.__name__)], ref_template=_REF
    )
    schemas: dict[str, Any] = dict(defs.get("$defs", {}))
    request_schema = TypeAdapter(Request).json_schema(ref_template=_REF, mode="validation")
    schemas.update(request_schema.pop("$defs", {}))
    schemas["ExecutionRequest"] = request_schema

    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        op: dict[str, Any] = {
            "operationId": route.handler.__name__,
            "summary": route.summary,
            "parameters": [
                {
                    "name": p.name,
                    "in": p.where,
                    "required": p.required or p.where == "path",
                    "description": p.description,
                    "schema": {"type": p.type},
                }
                for p in route.params
            ],
            "responses": {},
        }
        if route.auth:
            op["security"] = [{"bearer": []}]
        body_model = "ExecutionRequest" if route.body_is_request else route.body.__name__ if route.body else None
        if body_model:
            op["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": _REF.format(model=body_model)}}},
            }
        if route.response is not None:
            content = {route.media: {"schema": {"$ref": _REF.format(model=route.response.__name__)}}}
        else:
            content = {route.media: {"schema": {"type": "string"} if route.media != "application/json" else {}}}
        op["responses"][str(route.success)] = {"description": _STATUS_TEXT.get(route.success, "OK"), "content": content}
        if route.success == 202 and route.response is not None:  # ?wait= may return the finished execution
            op["responses"]["200"] = {"description": _STATUS_TEXT[200], "content": content}
        for status in route.errors:
            op["responses"][str(status)] = {
                "description": _STATUS_TEXT[status],
                "content": {"application/json": {"schema": {"$ref": _REF.format(model="ErrorResponse")}}},
            }
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "sandbox-orchestrator",
            "version": version,
            "description": "Governed, contained execution: policy gate, approvals, hardened sandboxes, evidence.",
        },
        "paths": paths,
        "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
