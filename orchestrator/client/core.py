"""What both fronts share: each call as data (method, path, query, body, answer model), the decoding of
answers and errors, and the SSE parser. The fronts only move bytes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

from pydantic import BaseModel

from orchestrator.domain import routes
from orchestrator.domain.errors import OrchestratorError, error_class
from orchestrator.domain.grants import GrantRequest
from orchestrator.domain.wire import (
    ExecutionView,
    OutputChunk,
)

M = TypeVar("M", bound=BaseModel)
POLL_S = 30.0  # one long poll (?wait=) at a time while run() waits


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    path: str
    query: dict[str, str] = field(default_factory=dict)
    body: Any = None

    def target(self) -> str:
        return self.path + (f"?{urlencode(self.query)}" if self.query else "")

    def payload(self) -> bytes | None:
        return None if self.body is None else json.dumps(self.body).encode("utf-8")


def _call(endpoint: routes.Endpoint, query: dict[str, str] | None = None, body: Any = None, **path: str) -> Call:
    return Call(endpoint.method, endpoint.url(**path), query or {}, body)


def _request_body(request: Any) -> Any:
    return request.model_dump(mode="json", exclude_none=True) if isinstance(request, BaseModel) else request


def submit(request: Any, wait: float | None) -> Call:
    query = {routes.WAIT.name: f"{wait:g}"} if wait else {}
    return _call(routes.SUBMIT, query, _request_body(request))


def get(execution_id: str, wait: float | None = None) -> Call:
    return _call(routes.GET_EXECUTION, {routes.WAIT.name: f"{wait:g}"} if wait else {}, id=execution_id)


def listing(state: str | None, tenant: str | None, limit: int, cursor: str | None) -> Call:
    given = ((routes.EXECUTION_STATE, state), (routes.EXECUTION_TENANT, tenant), (routes.EXECUTION_CURSOR, cursor))
    query = {param.name: value for param, value in given if value}
    return _call(routes.LIST_EXECUTIONS, {**query, routes.PAGE_LIMIT.name: str(limit)})


def cancel(execution_id: str) -> Call:
    return _call(routes.CANCEL_EXECUTION, id=execution_id)


def approvals() -> Call:
    return _call(routes.LIST_APPROVALS)


def decide(approval_id: str, decision: str, reason: str) -> Call:
    return _call(routes.DECIDE_APPROVAL, body={"decision": decision, "reason": reason}, id=approval_id)


def whoami() -> Call:
    return _call(routes.WHOAMI)


def evidence(execution_id: str) -> Call:
    return _call(routes.EVIDENCE, {routes.EVIDENCE_EXECUTION.name: execution_id})


# -- interactive sessions ----------------------------------------------------------------------------
def open_session(request: Any) -> Call:
    return _call(routes.OPEN_SESSION, body={"tool": "exec_command", **_request_body(request)})


def write_stdin(session_id: str, chars: str, yield_time_ms: int, max_output_bytes: int) -> Call:
    body = {"chars": chars, "yield_time_ms": yield_time_ms, "max_output_bytes": max_output_bytes}
    return _call(routes.WRITE_STDIN, body=body, id=session_id)


def resize(session_id: str, rows: int, cols: int) -> Call:
    return _call(routes.RESIZE_SESSION, body={"rows": rows, "cols": cols}, id=session_id)


def close_session(session_id: str) -> Call:
    return _call(routes.CLOSE_SESSION, id=session_id)


# -- grants (admin; approver for its own tenants) ----------------------------------------------------
def create_grant(request: GrantRequest | Mapping[str, object]) -> Call:
    """A GrantRequest, or its fields as a mapping (checked by the service: INPUT.INVALID names the field)."""
    body = request.model_dump(mode="json", exclude_none=True) if isinstance(request, GrantRequest) else dict(request)
    return _call(routes.CREATE_GRANT, body=body)


def list_grants(state: str | None, tenant: str | None) -> Call:
    given = ((routes.GRANT_STATE, state), (routes.GRANT_TENANT, tenant))
    return _call(routes.LIST_GRANTS, {param.name: value for param, value in given if value})


def get_grant(grant_id: str) -> Call:
    return _call(routes.GET_GRANT, id=grant_id)


def revoke_grant(grant_id: str, reason: str) -> Call:
    return _call(routes.REVOKE_GRANT, body={"reason": reason} if reason else None, id=grant_id)


def grant_charges(grant_id: str, limit: int | None, cursor: str | None) -> Call:
    given = ((routes.CHARGES_LIMIT, str(limit) if limit else None), (routes.CHARGES_CURSOR, cursor))
    return _call(routes.GRANT_CHARGES, {param.name: value for param, value in given if value}, id=grant_id)


# -- profiles' usage (admin; approver: its tenants' runs) ---------------------------------------------
def list_profiles() -> Call:
    return _call(routes.LIST_PROFILES)


def profile_distribution(name: str, since: str | None, min_runs: int | None) -> Call:
    given = ((routes.USAGE_SINCE, since), (routes.MIN_RUNS, None if min_runs is None else str(min_runs)))
    return _call(routes.PROFILE_DISTRIBUTION, {param.name: value for param, value in given if value}, name=name)


def profile_usage(name: str, since: str | None, by: str | None) -> Call:
    given = ((routes.USAGE_SINCE, since), (routes.USAGE_BY, by))
    return _call(routes.PROFILE_USAGE, {param.name: value for param, value in given if value}, name=name)


def profile_recommendation(name: str, since: str | None, min_runs: int | None) -> Call:
    given = ((routes.USAGE_SINCE, since), (routes.MIN_RUNS, str(min_runs) if min_runs else None))
    return _call(routes.PROFILE_RECOMMENDATION, {param.name: value for param, value in given if value}, name=name)


def profile_whatif(name: str, body: Any) -> Call:
    return _call(routes.PROFILE_WHATIF, body=_request_body(body), name=name)


# -- CI jobs (a runner's front door: orchestrator/ci) -------------------------------------------------
def open_ci_job(request: Any) -> Call:
    return _call(routes.OPEN_CI_JOB, body=_request_body(request))


def get_ci_job(job_id: str) -> Call:
    return _call(routes.GET_CI_JOB, id=job_id)


def run_ci_step(job_id: str, request: Any, wait: float | None) -> Call:
    query = {routes.WAIT.name: f"{wait:g}"} if wait else {}
    return _call(routes.RUN_CI_STEP, query, _request_body(request), id=job_id)


def close_ci_job(job_id: str) -> Call:
    return _call(routes.CLOSE_CI_JOB, id=job_id)


def yield_timeout(call: Call, timeout_s: float) -> float:
    """A session call's read timeout: its own yield time on top of the client's."""
    body = call.body if isinstance(call.body, dict) else {}
    return timeout_s + float(body.get("yield_time_ms") or 0) / 1000


def output_path(execution_id: str) -> str:
    return routes.EXECUTION_OUTPUT.url(id=execution_id)


def headers(token: str, *, sse: bool = False, last_event_id: str | None = None) -> dict[str, str]:
    out = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream" if sse else "application/json"}
    if last_event_id is not None:
        out[routes.LAST_EVENT_ID.name] = last_event_id
    return out


def raise_for(status: int, body: bytes) -> None:
    """An error answer as the library's exception (its code, message and details)."""
    if status < 400:
        return
    try:
        error = json.loads(body)["error"]
        cls = error_class(str(error["code"]))
        err: OrchestratorError = cls(str(error.get("message", "")), details=error.get("details") or {})
    except (ValueError, KeyError, TypeError):
        err = error_class("INTERNAL")(f"HTTP {status} without an error body")
    err.details.setdefault("http_status", status)
    raise err


def decode(model: type[M], status: int, body: bytes) -> M:
    raise_for(status, body)
    return model.model_validate_json(body)


class SSEParser:
    """Incremental text/event-stream parser: feed lines, get (event, id, data) when an event completes."""

    def __init__(self) -> None:
        self.event = "message"
        self.data: list[str] = []
        self.id: str | None = None
        self.last_id: str | None = None

    def line(self, line: str) -> tuple[str, str | None, str] | None:
        line = line.rstrip("\r\n")
        if not line:
            if not self.data:
                self.event = "message"
                return None
            done = (self.event, self.id, "\n".join(self.data))
            if self.id is not None:
                self.last_id = self.id
            self.event, self.data, self.id = "message", [], None
            return done
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        elif name == "id":
            self.id = value
        return None


def stream_item(event: str, data: str) -> OutputChunk | ExecutionView | None:
    if event == "output":
        return OutputChunk.model_validate_json(data)
    if event == "result":
        return ExecutionView.model_validate_json(data)
    return None


class OutputReader(SSEParser):
    """Lines of an output stream in, its items out: chunks, then the finished execution (``done``). After
    a ``reload`` (the service could not resume from the last id) the output comes again from its start:
    what was already given is skipped, character for character, so nothing repeats."""

    def __init__(self) -> None:
        super().__init__()
        self.done = False
        self.given = {"stdout": 0, "stderr": 0}  # characters yielded per stream
        self.skip = {"stdout": 0, "stderr": 0}

    def item(self, raw: bytes) -> OutputChunk | ExecutionView | None:
        event = self.line(raw.decode("utf-8"))
        if event is not None and event[0] == "reload":
            self.skip = dict(self.given)
            return None
        found = None if event is None else stream_item(event[0], event[2])
        self.done = isinstance(found, ExecutionView)
        if isinstance(found, OutputChunk):
            skipped = min(self.skip[found.stream], len(found.data))
            self.skip[found.stream] -= skipped
            if skipped == len(found.data):
                return None
            found = OutputChunk(stream=found.stream, data=found.data[skipped:])
            self.given[found.stream] += len(found.data)
        return found
