"""Grants with budgets: "tenant T (and subject S) may run what matches these conditions without asking,
until this expiry, within these budgets". The shapes, defined once for the API, the client, the CLI and
the service's bookkeeping (service.budget_grants).

The conditions mean exactly what the same fields of a policy or approval rule mean
(``gate.matching.MatchConditions``). What can be checked without the gate is checked here (globs, sizes
of lists and texts); the rest (command patterns, tool names and groups) is checked where a grant is
created, by building the rule's own conditions from these: a grant never holds a pattern a rule would
refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from orchestrator.domain.ci import CI_FIELDS, CiProvider
from orchestrator.domain.globs import check_glob
from orchestrator.domain.requests import Name, ProfileName

#: grant ids: ``grt_`` and 24 hex digits (96 random bits)
GRANT_ID_PREFIX = "grt_"
GrantState = Literal["active", "revoked", "exhausted", "expired"]
GRANT_STATES: tuple[GrantState, ...] = ("active", "revoked", "exhausted", "expired")
ChargeKind = Literal["settled", "released"]
#: what a grant does with a request its conditions match once it has no room left for it: ``ask`` (it does not
#: cover it: the request is asked as if there were no grant), ``refuse`` (GRANT.EXHAUSTED: the grant bounds what
#: it matches, e.g. a CI job)
OnExhausted = Literal["ask", "refuse"]
ON_EXHAUSTED: tuple[OnExhausted, ...] = ("ask", "refuse")

#: the largest figures a budget may hold (ten years of seconds; a pebibyte): far past any real grant,
#: small enough that sums in the store never overflow
MAX_SECONDS = 10 * 366 * 24 * 3600.0
MAX_EXECUTIONS = 1_000_000_000
MAX_OUTPUT_BYTES = 1 << 50
MAX_REASON = 1000
MAX_LIST = 64


@dataclass(frozen=True, slots=True)
class Format:
    """The ``format`` a text's schema names: a grammar JSON Schema cannot spell, checked by the validator
    beside it (the service's OpenAPI document defines each format)."""

    name: str

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        out["format"] = self.name
        return out


_GlobText = Annotated[str, StringConstraints(min_length=1, max_length=4096), AfterValidator(check_glob), Format("glob")]
# checked where a grant is created (budgets.book.compile_conditions: the gate's own pattern parser)
_Pattern = Annotated[str, StringConstraints(min_length=1, max_length=4096), Format("command-pattern")]
_ToolName = Annotated[str, StringConstraints(min_length=1, max_length=64)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True, allow_inf_nan=False)


class Budgets(_Model):
    """What a grant may cover at most, in each dimension; None: no bound in that dimension."""

    executions: int | None = Field(
        default=None, ge=1, le=MAX_EXECUTIONS, description="Runs it may cover (each started run counts one)."
    )
    cpu_seconds: float | None = Field(
        default=None, gt=0, le=MAX_SECONDS, description="CPU time, in seconds, its runs may use together."
    )
    output_bytes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_OUTPUT_BYTES,
        description="stdout + stderr bytes its runs may produce together (as produced, before redaction).",
    )
    wall_seconds: float | None = Field(
        default=None, gt=0, le=MAX_SECONDS, description="Wall-clock seconds its runs may take together."
    )

    @property
    def bounded(self) -> bool:
        """At least one dimension has a bound."""
        return any(v is not None for v in (self.executions, self.cpu_seconds, self.output_bytes, self.wall_seconds))


_CiGlobs = Annotated[list[_GlobText], Field(min_length=1, max_length=MAX_LIST)]


class GrantCiConditions(_Model):
    """A grant's ``ci:`` condition: what a request's CI context must hold — the fields of a policy rule's ``ci:``
    condition (lists of globs, meaning the same), and ``job_key``: one job run exactly (``CiJobView.ci.job_key``). A
    request without CI context never matches."""

    provider: Annotated[list[CiProvider], Field(min_length=1, max_length=2)] | None = Field(
        default=None, description="github | gitlab."
    )
    repository: _CiGlobs | None = Field(default=None, description="owner/name or group/…/project globs: 'org/*'.")
    workflow: _CiGlobs | None = Field(default=None, description="Workflow (GitHub) or pipeline name (GitLab) globs.")
    job: _CiGlobs | None = Field(default=None, description="Job name globs.")
    stage: _CiGlobs | None = Field(default=None, description="GitLab: the job's pipeline stage globs.")
    step: _CiGlobs | None = Field(default=None, description="Step globs (GitHub's step id, GitLab's stage).")
    action: _CiGlobs | None = Field(default=None, description="GitHub: the uses: action, owner/name@ref globs.")
    ref: _CiGlobs | None = Field(default=None, description="Ref globs: 'refs/heads/main', 'refs/tags/v*'.")
    event: _CiGlobs | None = Field(default=None, description="Event globs: GitHub's event name, GitLab's source.")
    actor: _CiGlobs | None = Field(default=None, description="Who started the run: user name globs.")
    job_key: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="One job run: its job_key (the same for every step of it; GET /v1/ci/jobs/{id} shows it).",
    )

    def rule_fields(self) -> dict[str, Any]:
        """The fields a policy rule's ``ci:`` condition has (all but job_key), as given."""
        return {name: getattr(self, name) for name in CI_FIELDS if getattr(self, name) is not None}


class GrantConditions(_Model):
    """Which requests a grant covers: every condition given must hold (all of a compound command's
    commands, for the command conditions); a condition left out means 'any'. The same meaning and
    validation as the same fields of a policy rule."""

    tool: list[_ToolName] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_LIST,
        description="Tool names or groups: exec, files, stdin (as in policy rules).",
    )
    argv_prefix: _Pattern | None = Field(
        default=None,
        description="Command pattern such as 'pytest' or 'git status': program basename, flags in any spelling,"
        " then a positional prefix.",
    )
    argv_glob: _GlobText | None = Field(
        default=None, description="fnmatch glob over each command's words joined as a shell would quote them."
    )
    subject: list[_GlobText] | None = Field(
        default=None, min_length=1, max_length=MAX_LIST, description="Subjects (fnmatch globs) it covers."
    )
    profile: list[Annotated[ProfileName, StringConstraints(min_length=1)]] | None = Field(
        default=None, min_length=1, max_length=MAX_LIST, description="Profile names it covers."
    )
    ci: GrantCiConditions | None = Field(
        default=None,
        description="The request's CI context (a policy rule's ci: fields, and job_key: one job run); a request"
        " without CI context never matches.",
    )


def _given(name: str) -> dict[str, Any]:
    """JSON Schema: ``name`` is there and not null."""
    return {"required": [name], "properties": {name: {"not": {"type": "null"}}}}


def _bounded_schema(schema: dict[str, Any]) -> None:
    """What ``GrantRequest._bounded`` checks, in the request's schema."""
    schema["not"] = {"allOf": [_given("expires_at"), _given("ttl_s")]}
    budget = {"anyOf": [_given(name) for name in Budgets.model_fields]}
    schema["anyOf"] = [
        _given("expires_at"),
        _given("ttl_s"),
        {"required": ["budgets"], "properties": {"budgets": budget}},
    ]


class GrantRequest(_Model):
    """``POST /v1/grants``: issue a grant. An expiry (``expires_at`` or ``ttl_s``, not both) or at least
    one budget must bound it."""

    model_config = ConfigDict(json_schema_extra=_bounded_schema)

    tenant: Name = Field(description="The tenant whose requests it covers.")
    conditions: GrantConditions = Field(
        default_factory=GrantConditions, description="Which of the tenant's requests it covers."
    )
    expires_at: AwareDatetime | None = Field(default=None, description="When it stops covering (with a timezone).")
    ttl_s: float | None = Field(
        default=None, gt=0, le=MAX_SECONDS, description="Or: it stops covering this many seconds after it is issued."
    )
    budgets: Budgets = Field(default_factory=Budgets, description="What it may cover at most.")
    on_exhausted: OnExhausted = Field(
        default="ask",
        description="ask: an ordinary grant, answering the asks it covers (once it has no room left they are asked"
        " as if there were no grant); or refuse: a bound, e.g. of a CI job, answering no ask but charging and"
        " narrowing every run it matches, allowed or approved (GRANT.EXHAUSTED once it has no room left for one,"
        " and a run that reaches the end of its reservation is stopped with SANDBOX.GRANT_LIMIT).",
    )
    reason: Annotated[str, StringConstraints(min_length=1, max_length=MAX_REASON)] = Field(
        description="Why it is issued (kept with it, shown with it)."
    )

    @model_validator(mode="after")
    def _bounded(self) -> GrantRequest:
        if self.expires_at is not None and self.ttl_s is not None:
            raise ValueError("give expires_at or ttl_s, not both")
        if self.expires_at is None and self.ttl_s is None and not self.budgets.bounded:
            raise ValueError("a grant needs an expiry (expires_at or ttl_s) or at least one budget")
        return self


class RevokeBody(_Model):
    """``DELETE /v1/grants/{id}``'s optional body."""

    reason: Annotated[str, StringConstraints(max_length=MAX_REASON)] = Field(
        default="", description="Why it is revoked (kept with the revocation)."
    )


class Usage(_Model):
    """Amounts in each dimension: used, reserved, or charged."""

    executions: int = Field(default=0, ge=0, description="Runs.")
    cpu_seconds: float = Field(default=0.0, ge=0, description="CPU time in seconds.")
    output_bytes: int = Field(default=0, ge=0, description="stdout + stderr bytes.")
    wall_seconds: float = Field(default=0.0, ge=0, description="Wall-clock seconds.")


class Remaining(_Model):
    """What a grant can still reserve in each dimension (its budget less what is used and reserved);
    None: that dimension has no bound."""

    executions: int | None = Field(default=None, description="Runs left.")
    cpu_seconds: float | None = Field(default=None, description="CPU seconds left.")
    output_bytes: int | None = Field(default=None, description="Output bytes left.")
    wall_seconds: float | None = Field(default=None, description="Wall-clock seconds left.")


class GrantView(_Model):
    """A grant as it stands: its terms, what it used, what runs under it hold now, and what is left."""

    id: str = Field(description="grt_<random>.")
    tenant: str = Field(description="The tenant whose requests it covers.")
    conditions: GrantConditions = Field(description="Which of the tenant's requests it covers.")
    budgets: Budgets = Field(description="What it may cover at most.")
    on_exhausted: OnExhausted = Field(
        default="ask", description="ask | refuse: what a request it matches gets once it has no room left."
    )
    expires_at: datetime | None = Field(default=None, description="When it stops covering; None: never.")
    reason: str = Field(description="Why it was issued.")
    created_by: str = Field(description="Who issued it (api:<subject>, or a library caller's name).")
    created_at: datetime = Field(description="When it was issued.")
    state: GrantState = Field(
        description="active (covers) | revoked | exhausted (a bounded budget fully spent) | expired. Only an"
        " active grant covers new runs."
    )
    used: Usage = Field(description="What the runs it covered used (charged when each ended).")
    reserved: Usage = Field(description="What runs under it now hold (each run's most, within what was left).")
    remaining: Remaining = Field(description="What new runs may still reserve.")
    revoked_by: str | None = Field(default=None, description="Who revoked it.")
    revoked_at: datetime | None = Field(default=None, description="When it was revoked.")
    revoke_reason: str | None = Field(default=None, description="Why it was revoked.")


class GrantList(_Model):
    """``GET /v1/grants``: oldest first."""

    items: list[GrantView] = Field(description="The grants of the caller's tenants.")


class GrantCharge(_Model):
    """One row of a grant's ledger: a run it covered ended (``settled``: its real usage, within what it
    had reserved) or never started / was abandoned (``released``: nothing charged)."""

    grant_id: str = Field(description="The grant.")
    execution_id: str = Field(description="The execution it covered.")
    kind: ChargeKind = Field(description="settled (usage charged) | released (never ran, or abandoned: nothing).")
    charged: Usage = Field(description="What was charged to the grant.")
    state: GrantState = Field(description="The grant's state right after.")
    at: datetime = Field(description="When.")


class GrantChargePage(_Model):
    """``GET /v1/grants/{id}/charges``: oldest first, paginated."""

    items: list[GrantCharge] = Field(description="Ledger rows.")
    next_cursor: str | None = Field(default=None, description="Pass as ?cursor= for the next page; None on the last.")
