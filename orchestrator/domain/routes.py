"""The HTTP API as data: each operation's method, path template and name, and the parameters it reads,
with the constraints they are checked against. No HTTP library here: the service binds a handler to each
entry (``orchestrator.api.routes``) and generates its OpenAPI document from them; the client builds its
URLs from the same entries (``orchestrator.client.core``).

A parameter is declared once: the service reads it with :meth:`Param.read` (refusing with INPUT.INVALID
naming it) and its document says :meth:`Param.schema`, both from the same fields. A bound that the
service's configuration sets (``limits.max_page``) is named, not copied: ``maximum="max_page"`` is read
from the limits object both are given.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.grants import GRANT_STATES
from orchestrator.domain.usage import WINDOW_PATTERN
from orchestrator.domain.wire import ExecutionState

Where = Literal["query", "path", "header"]
EXECUTION_STATES = tuple(state.value for state in ExecutionState)


def _limit(value: float | str, limits: object) -> float:
    """A bound given as a number, or as the name of one of the service's limits (read from ``limits``)."""
    return float(getattr(limits, value)) if isinstance(value, str) else value


@dataclass(frozen=True, slots=True, kw_only=True)
class Param:
    """One query, path or header parameter."""

    name: str
    where: Where
    description: str
    required: bool = False
    #: ``name=`` (an empty value) reads as not given (the document says ``allowEmptyValue``)
    empty_is_absent: bool = False
    #: what a refusal says after ``<name>: ``
    problem: str = "invalid"

    def refusal(self, problem: str | None = None) -> InputInvalid:
        """INPUT.INVALID naming this parameter."""
        return InputInvalid(f"{self.name}: {problem or self.problem}", details={"fields": [self.name]})

    def _raw(self, values: Mapping[str, str]) -> str | None:
        """The value as sent; None when left out (or sent empty, where that means left out). Given more than
        once (``?a=1&a=2``: an array, which no parameter is), refused."""
        getall = getattr(values, "getall", None)  # a multidict: query strings and headers
        if getall is not None and len(getall(self.name, ())) > 1:
            raise self.refusal("given more than once")
        raw = values.get(self.name)
        if raw is None or (raw == "" and self.empty_is_absent):
            if self.required:
                raise self.refusal()
            return None
        return raw

    def schema(self, limits: object) -> dict[str, Any]:
        raise NotImplementedError

    def document(self, limits: object) -> dict[str, Any]:
        """The OpenAPI parameter object."""
        schema = self.schema(limits)
        out: dict[str, Any] = {
            "name": self.name,
            "in": self.where,
            "required": self.required or self.where == "path",
            "description": self.description,
        }
        if self.empty_is_absent:
            if self.where == "query":
                out["allowEmptyValue"] = True
            else:  # a header sent empty: the schema itself takes the empty string
                schema = {"anyOf": [schema, {"type": "string", "maxLength": 0}]}
        out["schema"] = schema
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Text(Param):
    """A string: any, or one of ``enum``, or matching ``pattern`` as a whole."""

    min_length: int = 0
    enum: tuple[str, ...] = ()
    #: a regular expression the whole value must match (the same syntax in Python and ECMA-262)
    pattern: str | None = None

    def read(self, values: Mapping[str, str]) -> str | None:
        raw = self._raw(values)
        if raw is None:
            return None
        if (
            len(raw) < self.min_length
            or (self.enum and raw not in self.enum)
            or (self.pattern is not None and not re.fullmatch(self.pattern, raw))
        ):
            raise self.refusal()
        return raw

    def need(self, values: Mapping[str, str]) -> str:
        """The value of a required parameter."""
        raw = self.read(values)
        if raw is None:  # only for a parameter not declared required
            raise self.refusal()
        return raw

    def schema(self, limits: object) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.min_length:
            out["minLength"] = self.min_length
        if self.enum:
            out["enum"] = list(self.enum)
        if self.pattern is not None:
            out["pattern"] = f"^(?:{self.pattern})$"
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class Integer(Param):
    """A whole number written in ASCII digits, within ``minimum`` and ``maximum``. Left out: ``default``,
    or ``maximum`` when that is less."""

    minimum: int
    maximum: int | str
    default: int

    def _default(self, limits: object) -> int:
        return min(self.default, int(_limit(self.maximum, limits)))

    def read(self, values: Mapping[str, str], limits: object) -> int:
        top = int(_limit(self.maximum, limits))
        raw = self._raw(values)
        if raw is None:
            return self._default(limits)
        if not _DIGITS.fullmatch(raw) or not self.minimum <= int(raw) <= top:
            raise self.refusal(f"{self.minimum} to {top}")
        return int(raw)

    def schema(self, limits: object) -> dict[str, Any]:
        top = int(_limit(self.maximum, limits))
        return {"type": "integer", "minimum": self.minimum, "maximum": top, "default": self._default(limits)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Number(Param):
    """A finite number, ``minimum`` or more; a value past ``cap`` (a limit's name) counts as ``cap``."""

    minimum: float = 0.0
    cap: str | None = None

    def read(self, values: Mapping[str, str], limits: object) -> float | None:
        raw = self._raw(values)
        if raw is None:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < self.minimum:
            raise self.refusal()
        return value if self.cap is None else min(value, _limit(self.cap, limits))

    def schema(self, limits: object) -> dict[str, Any]:
        # the largest finite double: a longer number reads as infinity, which is refused
        return {"type": "number", "minimum": self.minimum, "maximum": sys.float_info.max}


#: ASCII digits only (str.isdigit takes "²", which int() refuses), never so many that int() is slow
_DIGITS = re.compile(r"[0-9]{1,11}")

# -- the parameters ---------------------------------------------------------------------------------
WAIT = Number(
    name="wait",
    where="query",
    description="Seconds to wait for the execution to finish (a finite number, 0 or more; more than the service's"
    " limits.max_wait_s waits that long). Empty or left out: do not wait.",
    empty_is_absent=True,
    problem="a number of seconds, 0 or more",
    cap="max_wait_s",
)
EXECUTION_STATE = Text(
    name="state",
    where="query",
    description="Only executions in this state.",
    enum=EXECUTION_STATES,
    problem=f"one of {', '.join(EXECUTION_STATES)}",
)
EXECUTION_TENANT = Text(name="tenant", where="query", description="Only this tenant's (another tenant's: none).")
PAGE_LIMIT = Integer(
    name="limit",
    where="query",
    description="Page size: 1 to the service's limits.max_page.",
    minimum=1,
    maximum="max_page",
    default=50,
)
#: a page's next_cursor (executions: an empty value is the first page)
EXECUTION_CURSOR = Text(
    name="cursor",
    where="query",
    description="From a previous page's next_cursor. Empty or left out: the first page.",
    pattern="[0-9]{1,18}",
    empty_is_absent=True,
    problem="not one this service gave",
)
EXECUTION_ID = Text(name="id", where="path", description="The execution's id (also its approval's id).", min_length=1)
SESSION_ID = Text(
    name="id", where="path", description="The session's id (the session_id its opening answered with).", min_length=1
)
GRANT_ID = Text(name="id", where="path", description="The grant's id (grt_...).", min_length=1)
CI_JOB_ID = Text(name="id", where="path", description="The CI job's id (job-...).", min_length=1)
LAST_EVENT_ID = Text(
    name="Last-Event-ID",
    where="header",
    description="The id of the last event received: the stream resumes after it ('end': only the result again).",
    pattern="end|[0-9]{1,11}",
    empty_is_absent=True,
    problem="an id this stream gave",
)
GRANT_STATE = Text(
    name="state",
    where="query",
    description=f"Only grants in this state: {', '.join(GRANT_STATES)}. Empty or left out: any.",
    enum=GRANT_STATES,
    empty_is_absent=True,
    problem=f"one of {', '.join(GRANT_STATES)}",
)
GRANT_TENANT = Text(
    name="tenant",
    where="query",
    description="Only this tenant's (another tenant's: none). Empty or left out: every tenant of the caller.",
    empty_is_absent=True,
)
CHARGES_LIMIT = Integer(
    name="limit",
    where="query",
    description="Page size: 1 to the service's limits.max_page.",
    minimum=1,
    maximum="max_page",
    default=100,
)
CHARGES_CURSOR = Text(
    name="cursor",
    where="query",
    description="From a previous page's next_cursor. Left out: the first page.",
    pattern="[0-9]{1,18}",
    problem="a next_cursor this listing gave",
)
PROFILE_NAME = Text(name="name", where="path", description="The profile's name.", min_length=1)
USAGE_SINCE = Text(
    name="since",
    where="query",
    description="The runs that ended in the last 30m, 12h, 7d, 2w … (s, m, h, d, w). Empty or left out: 7d.",
    pattern=WINDOW_PATTERN,
    empty_is_absent=True,
    problem="a span such as 30m, 12h, 7d or 2w",
)
USAGE_BY = Text(
    name="by",
    where="query",
    description="Group the runs by tenant, tool or ci_repository. Empty or left out: one group, 'all'.",
    enum=("tenant", "tool", "ci_repository"),
    empty_is_absent=True,
    problem="one of tenant, tool, ci_repository",
)
MIN_RUNS = Integer(
    name="min_runs",
    where="query",
    description="Runs with a measure known that a recommendation of it needs (fewer: none, and why).",
    minimum=1,
    maximum=1_000_000,
    default=20,
)
EVIDENCE_EXECUTION = Text(
    name="execution_id", where="query", description="The execution.", required=True, min_length=1, problem="required"
)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One operation: ``method`` on ``path`` (``{name}`` for a path parameter), called ``operation``."""

    method: str
    path: str
    operation: str
    params: tuple[Param, ...] = ()

    def url(self, **values: str) -> str:
        """The path with each ``{name}`` replaced by its value, percent-encoded (a ``/`` in an id included)."""
        return self.path.format_map({name: quote(value, safe="") for name, value in values.items()})


SUBMIT = Endpoint("POST", "/v1/executions", "submit", (WAIT,))
LIST_EXECUTIONS = Endpoint(
    "GET", "/v1/executions", "list_executions", (EXECUTION_STATE, EXECUTION_TENANT, PAGE_LIMIT, EXECUTION_CURSOR)
)
GET_EXECUTION = Endpoint("GET", "/v1/executions/{id}", "get_execution", (EXECUTION_ID, WAIT))
CANCEL_EXECUTION = Endpoint("DELETE", "/v1/executions/{id}", "cancel_execution", (EXECUTION_ID,))
EXECUTION_OUTPUT = Endpoint("GET", "/v1/executions/{id}/output", "stream_output", (EXECUTION_ID, LAST_EVENT_ID))
OPEN_SESSION = Endpoint("POST", "/v1/sessions", "open_session")
WRITE_STDIN = Endpoint("POST", "/v1/sessions/{id}/stdin", "write_stdin", (SESSION_ID,))
RESIZE_SESSION = Endpoint("POST", "/v1/sessions/{id}/resize", "resize", (SESSION_ID,))
SESSION_OUTPUT = Endpoint("GET", "/v1/sessions/{id}/output", "follow_output", (SESSION_ID,))
CLOSE_SESSION = Endpoint("DELETE", "/v1/sessions/{id}", "close_session", (SESSION_ID,))
LIST_APPROVALS = Endpoint("GET", "/v1/approvals", "list_approvals")
DECIDE_APPROVAL = Endpoint("POST", "/v1/approvals/{id}", "decide_approval", (EXECUTION_ID,))
CREATE_GRANT = Endpoint("POST", "/v1/grants", "create_grant")
LIST_GRANTS = Endpoint("GET", "/v1/grants", "list_grants", (GRANT_STATE, GRANT_TENANT))
GET_GRANT = Endpoint("GET", "/v1/grants/{id}", "get_grant", (GRANT_ID,))
REVOKE_GRANT = Endpoint("DELETE", "/v1/grants/{id}", "revoke_grant", (GRANT_ID,))
GRANT_CHARGES = Endpoint("GET", "/v1/grants/{id}/charges", "grant_charges", (GRANT_ID, CHARGES_LIMIT, CHARGES_CURSOR))
LIST_PROFILES = Endpoint("GET", "/v1/profiles", "list_profiles")
PROFILE_DISTRIBUTION = Endpoint(
    "GET", "/v1/profiles/{name}/distribution", "profile_distribution", (PROFILE_NAME, USAGE_SINCE, MIN_RUNS)
)
PROFILE_USAGE = Endpoint("GET", "/v1/profiles/{name}/usage", "profile_usage", (PROFILE_NAME, USAGE_SINCE, USAGE_BY))
PROFILE_RECOMMENDATION = Endpoint(
    "GET", "/v1/profiles/{name}/recommendation", "profile_recommendation", (PROFILE_NAME, USAGE_SINCE, MIN_RUNS)
)
PROFILE_WHATIF = Endpoint("POST", "/v1/profiles/{name}/whatif", "profile_whatif", (PROFILE_NAME,))
OPEN_CI_JOB = Endpoint("POST", "/v1/ci/jobs", "open_ci_job")
GET_CI_JOB = Endpoint("GET", "/v1/ci/jobs/{id}", "get_ci_job", (CI_JOB_ID,))
RUN_CI_STEP = Endpoint("POST", "/v1/ci/jobs/{id}/steps", "run_ci_step", (CI_JOB_ID, WAIT))
CLOSE_CI_JOB = Endpoint("DELETE", "/v1/ci/jobs/{id}", "close_ci_job", (CI_JOB_ID,))
GITHUB_HOOK = Endpoint("POST", "/v1/ci/github/hook", "github_hook")
EVENTS = Endpoint("GET", "/v1/events", "stream_events")
EVIDENCE = Endpoint("GET", "/v1/evidence", "evidence_records", (EVIDENCE_EXECUTION,))
VERIFY_EVIDENCE = Endpoint("GET", "/v1/evidence/verify", "verify_evidence")
WHOAMI = Endpoint("GET", "/v1/whoami", "whoami")
OPENAPI = Endpoint("GET", "/v1/openapi.json", "openapi")
HEALTHZ = Endpoint("GET", "/healthz", "healthz")
READYZ = Endpoint("GET", "/readyz", "readyz")
METRICS = Endpoint("GET", "/metrics", "metrics")

#: every operation of the API, in the document's order
ENDPOINTS: tuple[Endpoint, ...] = (
    SUBMIT,
    LIST_EXECUTIONS,
    GET_EXECUTION,
    CANCEL_EXECUTION,
    EXECUTION_OUTPUT,
    OPEN_SESSION,
    WRITE_STDIN,
    RESIZE_SESSION,
    SESSION_OUTPUT,
    CLOSE_SESSION,
    LIST_APPROVALS,
    DECIDE_APPROVAL,
    CREATE_GRANT,
    LIST_GRANTS,
    GET_GRANT,
    REVOKE_GRANT,
    GRANT_CHARGES,
    LIST_PROFILES,
    PROFILE_DISTRIBUTION,
    PROFILE_USAGE,
    PROFILE_RECOMMENDATION,
    PROFILE_WHATIF,
    OPEN_CI_JOB,
    GET_CI_JOB,
    RUN_CI_STEP,
    CLOSE_CI_JOB,
    GITHUB_HOOK,
    EVENTS,
    EVIDENCE,
    VERIFY_EVIDENCE,
    WHOAMI,
    OPENAPI,
    HEALTHZ,
    READYZ,
    METRICS,
)
