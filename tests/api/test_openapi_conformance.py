"""The OpenAPI document against the running service, property-based: for every operation, requests
generated from the document (schemathesis, over Hypothesis) are sent to the service on a loopback port,
and every answer must be one the document lists, with a body its schema for that status takes; a request
the document allows is never refused as invalid (400), except for the refusals no schema can say (the
400's description lists them). Invalid requests (schemathesis' negative mode) must be refused, with a
listed status and body.

Nothing is run for the generated requests: the policy asks about everything and nobody can approve them
(only team-a's agent submits or opens sessions, no token here may answer team-a's asks, only team-b's
approver issues grants, and an unanswered ask times out at once). One execution, one grant and one session
(approved by a rule for the tenant "fixture", which no generated request can name) exist beforehand, so
that the operations on an id also reach past their 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import load_all_checks, not_a_server_error
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from orchestrator.api.openapi import FORMATS, build_document
from orchestrator.api.routes import ROUTES
from orchestrator.domain import routes as http
from orchestrator.domain.errors import SessionNotFound
from orchestrator.domain.globs import glob_problem
from orchestrator.domain.hosts import parse_pattern
from orchestrator.domain.requests import DEFAULT_YIELD_MS
from orchestrator.gate.matching import check_pattern
from orchestrator.pipeline.config import ServiceLimits
from tests.support.service import Harness, start_service, token_of, write_config

#: examples per operation and mode (at most), and the time all of them share: each operation and mode gets
#: its share of what is left (what a quick one leaves goes to the next); past its share, an operation
#: stops after MIN_EXAMPLES. One request waits at most REQUEST_S; a session's answer waits at most YIELD_MS
#: for output.
EXAMPLES = int(os.environ.get("CONFORMANCE_EXAMPLES", "40"))
BUDGET_S = float(os.environ.get("CONFORMANCE_BUDGET_S", "100"))
MIN_EXAMPLES = 5
REQUEST_S = 10.0
YIELD_MS = 100

# Who may send each operation (None: no token; "bogus": an unknown one). Chosen so that nothing can run:
# only team-a's agent submits or opens sessions (asked about: nobody here may answer team-a's asks), and
# only team-b's approver issues grants (they cannot cover team-a's requests; nobody submits for team-b).
_ANYONE = ("agent-a", "approver-a", "approver-b", "admin", None, "bogus")
_SENDERS: dict[str, tuple[str | None, ...]] = {
    "submit": ("agent-a", "approver-a", None),
    "open_session": ("agent-a", "approver-a", None),
    "decide_approval": ("approver-a", "approver-b", "agent-a", None),
    "create_grant": ("approver-b", "agent-a", "bogus"),
}
#: a sender's own tenant: the tenant a valid body of theirs names (else the answer is only ever 403)
_OWN_TENANT = {"agent-a": "team-a", "approver-b": "team-b"}


@dataclass(frozen=True)
class Existing:
    """What exists before the run: an id each operation on an id may be sent with, and by whom."""

    execution: str  # team-a's, refused (its ask timed out): no approval can start it any more
    grant: str  # team-b's
    session: str  # tenant "fixture", opened by the admin

    def of(self, operation: str) -> tuple[str, str, str] | None:
        """(where, id, sender) for ``operation``, or None."""
        kind = next(endpoint for endpoint in http.ENDPOINTS if endpoint.operation == operation)
        if kind in (http.GET_EXECUTION, http.CANCEL_EXECUTION, http.EXECUTION_OUTPUT, http.DECIDE_APPROVAL):
            return "path", self.execution, "approver-a" if kind is http.DECIDE_APPROVAL else "agent-a"
        if kind is http.EVIDENCE:
            return "query", self.execution, "agent-a"
        if kind in (http.GET_GRANT, http.REVOKE_GRANT, http.GRANT_CHARGES):
            return "path", self.grant, "approver-b"
        if kind in (http.WRITE_STDIN, http.RESIZE_SESSION, http.SESSION_OUTPUT, http.CLOSE_SESSION):
            return "path", self.session, "admin"
        return None


def _valid(check: Callable[[str], object]) -> Callable[[str], bool]:
    def ok(text: str) -> bool:
        try:
            check(text)
        except ValueError:
            return False
        return True

    return ok


# The document's own string formats: values generated as the format says, each kept only if the service's
# own parser takes it (the same functions that check them in the service).
_LABEL = st.from_regex(r"[a-z0-9_]([a-z0-9_-]{0,8}[a-z0-9_])?", fullmatch=True)
_DNS = st.builds(
    lambda labels, top: ".".join([*labels, top]),
    st.lists(_LABEL, max_size=3),
    st.from_regex(r"[a-z]{2,6}", fullmatch=True),
)
_HOST = st.one_of(
    _DNS,
    st.builds(lambda name: f"*.{name}", _DNS.filter(lambda name: "." in name)),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
)
_PORT = st.one_of(st.just("*"), st.integers(1, 65535).map(str))
_STRATEGIES = {
    "egress-host-pattern": st.builds(lambda host, port: f"{host}:{port}", _HOST, _PORT).filter(_valid(parse_pattern)),
    "glob": st.text("abc*?[]!-./_ ", min_size=1, max_size=20).filter(lambda g: glob_problem(g) is None),
    "command-pattern": st.lists(st.from_regex(r"[a-z][a-z0-9._*-]{0,8}", fullmatch=True), min_size=1, max_size=3)
    .map(" ".join)
    .filter(_valid(check_pattern)),
}
assert set(_STRATEGIES) == set(FORMATS)
for _name, _strategy in _STRATEGIES.items():
    schemathesis.openapi.format(_name, _strategy)


def _semantic(body: Any) -> bool:
    """A 400 the document's 400 description names: what no schema can say."""
    error = body.get("error", {}) if isinstance(body, dict) else {}
    fields = (error.get("details") or {}).get("fields")
    if error.get("code") == "PROFILE.NOT_FOUND":
        return True
    return fields == ["expires_at"] and "in the future" in error.get("message", "")


#: how an invalid request may be refused: the statuses the document gives refusals (a body too large is one)
_REFUSALS = """
[checks.negative_data_rejection]
expected-statuses = ["400", "401", "403", "404", "409", "413", "429"]
"""


def _lax_only(case: schemathesis.Case) -> bool:
    """Whether a negative case breaks the schema only by the JSON type of a body field (besides the token,
    which ``Run.send`` sets). Such a body may be taken: the models' validation is pydantic's lax mode, which
    reads "5" and true as 5, and "yes" or 1 as true; the document names the JSON types a client sends. Every
    other violation (a bound, a pattern, an unknown field, any parameter) must be refused."""
    data = case.meta.phase.data if case.meta is not None else None
    mutations = [
        mutation
        for mutation in getattr(data, "mutations", ())
        if not (mutation.parameter_location is ParameterLocation.HEADER and mutation.parameter == "Authorization")
    ]
    return bool(mutations) and all(
        mutation.parameter_location is ParameterLocation.BODY and set(mutation.keywords) == {"type"}
        for mutation in mutations
    )


class OutOfTime(Exception):
    """An operation's share of the time is spent (after MIN_EXAMPLES): on to the next."""


class Run:
    """One run over the document: its session, tokens and time, and the requests sent so far."""

    def __init__(self, url: str, existing: Existing, runs: int) -> None:
        self.url = url
        self.existing = existing
        self.session = requests.Session()
        self.deadline = time.monotonic() + BUDGET_S
        self.runs_left = runs
        self.share_ends = self.deadline
        self.examples = 0
        self.sent: dict[str, int] = {}
        self.tokens = {subject: token_of(subject) for subject in _ANYONE if subject not in (None, "bogus")}
        self.tokens["bogus"] = "not-a-token-of-this-service"

    def send(self, case: schemathesis.Case, who: str | None, *, stream: bool) -> Any:
        """The answer (a schemathesis or requests response); None for an event stream that opened (its
        status and media type checked here: it never ends, its events are not one document)."""
        if self.examples >= MIN_EXAMPLES and time.monotonic() > self.share_ends:
            raise OutOfTime
        self.examples += 1
        name = case.operation.definition.raw["operationId"]
        self.sent[name] = self.sent.get(name, 0) + 1
        headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        if who is not None:
            headers["Authorization"] = f"Bearer {self.tokens[who]}"
        case.headers = headers
        if name == "write_stdin" and isinstance(case.body, dict):  # an empty write waits all its yield time
            value = case.body.get("yield_time_ms", DEFAULT_YIELD_MS)
            if isinstance(value, int | float) and not isinstance(value, bool) and value > YIELD_MS:
                case.body = {**case.body, "yield_time_ms": YIELD_MS}
        positive = case.meta is not None and case.meta.generation.mode.is_positive
        if positive and who in _OWN_TENANT and isinstance(case.body, dict) and "tenant" in case.body:
            case.body = {**case.body, "tenant": _OWN_TENANT[who]}
            if "subject" in case.body:
                case.body["subject"] = who
        if not stream:
            return case.call(base_url=self.url, session=self.session, timeout=REQUEST_S)
        sent = case.as_transport_kwargs(base_url=self.url)
        with self.session.request(**sent, stream=True, timeout=REQUEST_S) as response:
            if response.status_code == 200:
                assert response.headers["Content-Type"].startswith("text/event-stream"), response.headers
                return None
            response.content  # noqa: B018 - read before the stream is closed
            return response

    def cases(self, operation: Any, mode: GenerationMode) -> st.SearchStrategy[tuple[schemathesis.Case, str | None]]:
        """Requests for ``operation``, each with its sender: any id and sender, or an existing id and its owner."""
        raw = operation.definition.raw
        senders = _SENDERS.get(raw["operationId"], _ANYONE) if "security" in raw else (None,)
        anything = st.tuples(operation.as_strategy(generation_mode=mode), st.sampled_from(senders))
        known = self.existing.of(raw["operationId"])
        if known is None:
            return anything
        where, ident, owner = known
        fixed: dict[str, Any] = (
            {"path_parameters": {"id": ident}} if where == "path" else {"query": {"execution_id": ident}}
        )
        return st.one_of(anything, st.tuples(operation.as_strategy(generation_mode=mode, **fixed), st.just(owner)))

    def operation(self, operation: Any, mode: GenerationMode) -> None:
        """Up to ``EXAMPLES`` requests generated for ``operation`` in ``mode``, each answer checked."""
        stream = "text/event-stream" in json.dumps(operation.definition.raw["responses"].get("200", {}))
        now = time.monotonic()
        self.share_ends = now + max(0.0, self.deadline - now) / self.runs_left
        self.runs_left -= 1
        self.examples = 0

        @settings(
            max_examples=EXAMPLES,
            deadline=None,  # each request has its own timeout (REQUEST_S)
            database=None,
            phases=(Phase.explicit, Phase.generate),
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        )
        @given(sent=self.cases(operation, mode))
        def check(sent: tuple[schemathesis.Case, str | None]) -> None:
            case, who = sent
            response = self.send(case, who, stream=stream)
            if response is None:
                return
            checks = [not_a_server_error, status_code_conformance, content_type_conformance]
            checks += [response_schema_conformance]
            if mode is GenerationMode.NEGATIVE and not _lax_only(case):
                checks.append(negative_data_rejection)
            case.validate_response(response, checks=checks)
            positive = case.meta is not None and case.meta.generation.mode.is_positive
            if positive and response.status_code == 400:
                assert _semantic(response.json()), (
                    f"{operation.label}: a request the document allows was refused as invalid: {response.text}\n"
                    f"{case.as_curl_command()}"
                )

        try:
            check()
        except OutOfTime:
            pass
        except Exception as err:
            if type(err).__name__ != "Unsatisfiable":  # else nothing to negate: no parameter, no body
                raise


def _conform(doc: dict[str, Any], url: str, existing: Existing) -> dict[str, int]:
    """Every operation, positive then negative: the requests sent per operation (raises at the first
    answer that does not conform)."""
    load_all_checks()
    schema = schemathesis.openapi.from_dict(doc, config=schemathesis.Config.from_str(_REFUSALS))
    # those with a body last: they are the slow ones (asks, sessions), and get what the quick ones leave;
    # closing a session after everything else that uses the one that exists
    operations = sorted(
        (result.ok() for result in schema.get_all_operations()),
        key=lambda op: (op.definition.raw["operationId"] == "close_session", "requestBody" in op.definition.raw),
    )
    modes = (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    run = Run(url, existing, len(operations) * len(modes))
    try:
        for operation in operations:
            for mode in modes:
                run.operation(operation, mode)
    finally:
        run.session.close()
    return run.sent


def conformance_config(tmp_path: Path) -> Path:
    """Everything is asked about, an ask times out at once, only the tenant "fixture" is approved (by a
    rule); no rate limit in the way; waits and pages small."""
    return write_config(
        tmp_path,
        safety={"mode": "ask", "allowlist": [], "denylist": [], "rules": [], "approval_timeout_s": 0.2},
        approvals={
            "provider": "queue",
            "rules": [{"name": "fixture", "tenant": ["fixture"], "tool": ["exec_command"], "outcome": "approved"}],
        },
        service={
            "allow_self_approval": True,
            "limits": {"rate_per_s": 100_000, "burst": 100_000, "max_wait_s": 1, "max_page": 120},
        },
    )


async def make_existing(harness: Harness) -> Existing:
    agent, approver, admin = harness.client("agent-a"), harness.client("approver-b"), harness.client("admin")
    asked = await agent.submit({"tool": "shell", "command": ["true"]})
    refused = await agent.get(asked.execution_id, wait=10)
    assert refused.state.final, refused
    grant = await approver.create_grant(
        {"tenant": "team-b", "conditions": {"subject": ["nobody"]}, "ttl_s": 3600, "reason": "conformance"}
    )
    # a command that neither reads its input nor stops for the keys a terminal turns into signals
    quiet = "trap '' INT QUIT TSTP; sleep 600"
    session = await admin.open_session({"cmd": quiet, "tenant": "fixture", "tty": True, "yield_time_ms": 0})
    return Existing(execution=refused.execution_id, grant=grant.id, session=session.session_id)


@pytest.mark.integration
async def test_the_document_is_as_strict_as_the_service(tmp_path: Path, engine: Any) -> None:
    harness = await start_service(conformance_config(tmp_path))
    try:
        async with asyncio.timeout(BUDGET_S + 3 * REQUEST_S + 30):
            existing = await make_existing(harness)
            doc = (await asyncio.to_thread(requests.get, harness.url + "/v1/openapi.json", timeout=10)).json()
            try:
                sent = await asyncio.to_thread(_conform, doc, harness.url, existing)
            finally:
                with contextlib.suppress(SessionNotFound):  # unless a generated request closed it
                    await harness.service.sessions.close(existing.session, tenant="fixture", subject="admin")
    finally:
        await harness.stop()
    assert set(sent) == {route.endpoint.operation for route in ROUTES}, sent
    assert doc["paths"]["/v1/executions"]["get"]["parameters"][2]["schema"]["maximum"] == 120  # the service's own


def test_every_endpoint_has_one_route_and_the_client_builds_its_urls() -> None:
    """The table is the domain's: the service binds each endpoint once, by the handler of its name (no
    engine needed: not marked)."""
    assert [route.endpoint for route in ROUTES] == list(http.ENDPOINTS)
    for route in ROUTES:
        assert route.handler.__name__ == route.endpoint.operation
    assert http.GRANT_CHARGES.url(id="a/b c") == "/v1/grants/a%2Fb%20c/charges"
    doc = build_document("0", ServiceLimits())
    assert {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops} == {
        (e.method, e.path) for e in http.ENDPOINTS
    }
