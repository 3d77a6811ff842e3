"""The API's routes: each endpoint of the domain's table (``orchestrator.domain.routes``: method, path,
parameters) bound to its handler, body, answers and documentation. The app registers exactly these, and
the OpenAPI document is generated from exactly these."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel

from orchestrator.api import ci_handlers, grant_handlers, handlers, profile_handlers, session_handlers
from orchestrator.ci.github.protocol import HookCall
from orchestrator.domain import routes as http
from orchestrator.domain.ci_jobs import CiJobRequest, CiJobView, CiStepRequest
from orchestrator.domain.grants import GrantChargePage, GrantList, GrantRequest, GrantView, RevokeBody
from orchestrator.domain.profile_usage import (
    ProfileDistribution,
    ProfileList,
    Recommendation,
    UsageReport,
    WhatIfProposal,
    WhatIfReport,
)
from orchestrator.domain.routes import Endpoint, Param
from orchestrator.domain.wire import (
    ApprovalAnswer,
    ApprovalDecisionBody,
    ApprovalList,
    EvidencePage,
    ExecutionPage,
    ExecutionView,
    Health,
    Identity,
    ResizeBody,
    SessionAnswer,
    StdinBody,
    SubmitAnswer,
)
from orchestrator.evidence.verify import VerifyReport

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: a request body: a model, or the service's execution request ("ExecutionRequest": any tool) or session
#: opening ("SessionRequest": exec_command), whose schemas openapi.py builds from the library's Request
Body = type[BaseModel] | Literal["ExecutionRequest", "SessionRequest"]


@dataclass(frozen=True, slots=True)
class Route:
    """An endpoint of the domain's table, bound to its handler, body and answers. ``errors``: the error
    statuses the handler itself can answer (every route that takes a token also answers 401 and 429, and
    every route 500 for a bug: the document adds those)."""

    endpoint: Endpoint
    handler: Handler
    summary: str
    auth: bool = True
    body: Body | None = None
    body_required: bool = True
    #: a model, or a dataclass (pydantic gives the schema of either)
    response: type[Any] | None = None
    media: str = "application/json"
    #: the statuses answered with ``response`` (the first is the usual one)
    success: tuple[int, ...] = (200,)
    errors: tuple[int, ...] = ()

    @property
    def method(self) -> str:
        return self.endpoint.method

    @property
    def path(self) -> str:
        return self.endpoint.path

    @property
    def params(self) -> tuple[Param, ...]:
        return self.endpoint.params


ROUTES: tuple[Route, ...] = (
    Route(
        http.SUBMIT,
        handlers.submit,
        "Submit a request: decided now, run in the background.",
        body="ExecutionRequest",
        response=SubmitAnswer,
        success=(202, 200),
        errors=(400, 403, 413, 503),
    ),
    Route(
        http.LIST_EXECUTIONS,
        handlers.list_executions,
        "List executions (newest first) of the caller's tenants.",
        response=ExecutionPage,
        errors=(400,),
    ),
    Route(http.GET_EXECUTION, handlers.get_execution, "One execution.", response=ExecutionView, errors=(400, 404)),
    Route(
        http.CANCEL_EXECUTION,
        handlers.cancel_execution,
        "Cancel: the sandbox is killed and removed; the evidence records who asked.",
        response=ExecutionView,
        errors=(404, 409, 503),
    ),
    Route(
        http.EXECUTION_OUTPUT,
        handlers.stream_output,
        "Server-Sent Events: `output` chunks (redacted, capped) as produced, then one `result` event."
        " Reconnect with Last-Event-ID to resume.",
        media="text/event-stream",
        errors=(400, 404),
    ),
    Route(
        http.OPEN_SESSION,
        session_handlers.open_session,
        "Open an interactive session: an exec_command request, decided like any command, then a long-lived"
        " sandbox; answers with its session_id and the output of its yield_time_ms.",
        body="SessionRequest",
        response=SessionAnswer,
        success=(201,),
        errors=(400, 403, 413, 503),
    ),
    Route(
        http.WRITE_STDIN,
        session_handlers.write_stdin,
        "Send characters to the session's stdin (gated and recorded as size and keyed digest; an empty string"
        " only polls); answers with the output produced within yield_time_ms.",
        body=StdinBody,
        response=SessionAnswer,
        errors=(400, 403, 404, 413, 503),
    ),
    Route(
        http.RESIZE_SESSION,
        session_handlers.resize,
        "Set the session terminal's window size (a session opened with tty).",
        body=ResizeBody,
        success=(204,),
        errors=(400, 403, 404, 413, 503),
    ),
    Route(
        http.SESSION_OUTPUT,
        session_handlers.follow_output,
        "Server-Sent Events: `output` chunks (redacted) as produced, then one `end` event (the last answer).",
        media="text/event-stream",
        errors=(403, 404),
    ),
    Route(
        http.CLOSE_SESSION,
        session_handlers.close_session,
        "Close the session: its sandbox is stopped and removed; answers with its last output and exit.",
        response=SessionAnswer,
        errors=(403, 404, 503),
    ),
    Route(
        http.LIST_APPROVALS,
        handlers.list_approvals,
        "Pending approvals of the caller's tenants (approver, admin).",
        response=ApprovalList,
        errors=(403,),
    ),
    Route(
        http.DECIDE_APPROVAL,
        handlers.decide_approval,
        "Approve, approve for the session, or deny; the approver is the token's subject.",
        body=ApprovalDecisionBody,
        response=ApprovalAnswer,
        errors=(400, 403, 404, 409, 413),
    ),
    Route(
        http.CREATE_GRANT,
        grant_handlers.create_grant,
        "Issue a grant: the tenant's requests matching its conditions run without asking, until its expiry,"
        " within its budgets (admin; approver for its own tenants).",
        body=GrantRequest,
        response=GrantView,
        success=(201,),
        errors=(400, 403, 413),
    ),
    Route(
        http.LIST_GRANTS,
        grant_handlers.list_grants,
        "The grants of the caller's tenants, oldest first (admin; approver).",
        response=GrantList,
        errors=(400, 403),
    ),
    Route(
        http.GET_GRANT,
        grant_handlers.get_grant,
        "One grant: its terms, state, what it used, what runs under it hold, what is left.",
        response=GrantView,
        errors=(403, 404),
    ),
    Route(
        http.REVOKE_GRANT,
        grant_handlers.revoke_grant,
        'Revoke a grant: no new run is covered from now on (an optional JSON body {"reason": ...} is kept with'
        " it); revoking again keeps the first revocation.",
        body=RevokeBody,
        body_required=False,
        response=GrantView,
        errors=(400, 403, 404, 413),
    ),
    Route(
        http.GRANT_CHARGES,
        grant_handlers.grant_charges,
        "A grant's ledger, oldest first: each run it covered, settled (usage charged) or released (nothing).",
        response=GrantChargePage,
        errors=(400, 403, 404),
    ),
    Route(
        http.LIST_PROFILES,
        profile_handlers.list_profiles,
        "The profiles in force: each one's limits as a run gets them now (the config's caps applied), or why it"
        " does not resolve (admin; approver).",
        response=ProfileList,
        errors=(403,),
    ),
    Route(
        http.PROFILE_DISTRIBUTION,
        profile_handlers.profile_distribution,
        "How a profile's runs spread against its limits (the profiles page): per measure (memory peak, cores,"
        " CPU seconds, wall time) a histogram, the known and unknown runs, the limit now and the recommended"
        " value; the newest runs that ended at a limit (admin: every tenant's runs; approver: its tenants').",
        response=ProfileDistribution,
        errors=(400, 403),
    ),
    Route(
        http.PROFILE_USAGE,
        profile_handlers.profile_usage,
        "What a profile's runs used against its limits now: percentiles of each measure, runs ended at each limit"
        " (admin: every tenant's runs; approver: its tenants').",
        response=UsageReport,
        errors=(400, 403),
    ),
    Route(
        http.PROFILE_RECOMMENDATION,
        profile_handlers.profile_recommendation,
        "Limits a profile's runs call for: per resource, a value, the rule, its inputs and a confidence; the"
        " changes as a profile YAML patch (admin; approver: from its tenants' runs).",
        response=Recommendation,
        errors=(400, 403, 404),
    ),
    Route(
        http.PROFILE_WHATIF,
        profile_handlers.profile_whatif,
        "A proposed change of a profile's limits replayed over its recorded runs: which would have met a limit,"
        " the headroom of the rest, the runs a node holds (admin; approver: its tenants' runs).",
        body=WhatIfProposal,
        response=WhatIfReport,
        errors=(400, 403, 404, 413),
    ),
    Route(
        http.OPEN_CI_JOB,
        ci_handlers.open_ci_job,
        "Open a CI job: its CI context, its image checked against the caps, its workspace (made when missing).",
        body=CiJobRequest,
        response=CiJobView,
        success=(201,),
        errors=(400, 403, 413, 422),
    ),
    Route(http.GET_CI_JOB, ci_handlers.get_ci_job, "One CI job and its steps.", response=CiJobView, errors=(404,)),
    Route(
        http.RUN_CI_STEP,
        ci_handlers.run_ci_step,
        "Run one step of the job: an execution (follow it with /v1/executions/{id}/output), decided on its content"
        " with the job's CI context.",
        body=CiStepRequest,
        response=SubmitAnswer,
        success=(202, 200),
        errors=(400, 403, 404, 409, 413, 422, 503),
    ),
    Route(
        http.CLOSE_CI_JOB,
        ci_handlers.close_ci_job,
        "Close the job: steps still running are cancelled, the workspace removed when the job made it.",
        response=CiJobView,
        errors=(404,),
    ),
    Route(
        http.GITHUB_HOOK,
        ci_handlers.github_hook,
        "The GitHub Actions runner's container hook, one call per command (prepare_job, run_script_step,"
        " run_container_step, cleanup_job): NDJSON lines, the step's output ({stream, data}) as produced, then its"
        " end ({exit_code, response}); {} lines keep a silent step's connection checked.",
        body=HookCall,
        media="application/x-ndjson",
        errors=(400, 403, 404, 413, 422, 503),
    ),
    Route(
        http.EVENTS,
        handlers.stream_events,
        "Server-Sent Events: `execution` (a changed execution) for the caller's tenants.",
        media="text/event-stream",
    ),
    Route(
        http.EVIDENCE,
        handlers.evidence_records,
        "The evidence records of one execution (sanitized).",
        response=EvidencePage,
        errors=(400, 404),
    ),
    Route(
        http.VERIFY_EVIDENCE,
        handlers.verify_evidence,
        "Verify the whole evidence chain (admin).",
        response=VerifyReport,
        errors=(403, 503),
    ),
    Route(http.WHOAMI, handlers.whoami, "Who the token is: subject, role, tenants.", response=Identity),
    Route(http.OPENAPI, handlers.openapi, "This document.", auth=False),
    Route(http.HEALTHZ, handlers.healthz, "The process answers.", auth=False, response=Health),
    Route(
        http.READYZ,
        handlers.readyz,
        "Engine reachable, store writable, evidence writable (503 if not, with the same body).",
        auth=False,
        response=Health,
        success=(200, 503),
    ),
    Route(http.METRICS, handlers.metrics, "Prometheus metrics.", auth=False, media="text/plain"),
)
