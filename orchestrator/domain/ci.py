"""The CI context of a request: which job of which pipeline a step belongs to, from the runner's own variables.

A CI runner's front door (the GitHub Actions container hook, the GitLab custom executor driver) runs every job
step as one governed execution. The request then says where it comes from, so that rules can match on it
(``ci:`` in policy and approval rules, ``gate/matching.py``), approvers see it, and the evidence links every
step to its job (``job_key``: the same for every step of one job run).

Where the values come from, read in the runners' sources (none is invented here):

GitHub Actions (``actions/runner``): a step's environment, and the container hook's own, hold the ``github``
context as ``GITHUB_<KEY>`` for the keys in ``src/Runner.Worker/GitHubContext.cs``'s allowlist (``repository``,
``workflow``, ``job``, ``run_id``, ``run_attempt``, ``ref``, ``event_name``, ``actor``, ``action``,
``action_repository``, ``action_ref`` …); ``src/Runner.Worker/Handlers/ScriptHandler.cs`` exposes them to the
script it runs (a hook is run by that handler too). ``GITHUB_ACTION`` is the step's id, or ``__run``,
``__run_2``, ``__<owner>_<repo>`` for a step without one (``StepsRunner.cs`` sets it from the action's name):
the display name of a step is not given to the hook. ``GITHUB_ACTION_REPOSITORY``/``GITHUB_ACTION_REF``
name a ``uses:`` action from a repository (``ActionRunner.cs``). No variable tells two legs of a matrix apart
(``GITHUB_JOB`` is the job's key in the workflow): the hook names the job run itself, e.g. with the runner's
name (``RUNNER_NAME``, ``RunnerContext.cs``: a runner of Actions Runner Controller takes one job) — ``job_id``.

GitLab (``gitlab-runner``, ``docs/executors/custom.md``): every stage of the custom executor gets the job's
variables prefixed with ``CUSTOM_ENV_`` (``executors/custom/custom.go``); ``run_exec`` gets the script path
and the name of the stage (``prepare_script``, ``get_sources``, ``step_script``, ``build_script``,
``after_script`` …: ``common/build.go``'s ``BuildStage`` constants, ``step_<name>`` for a step). The variables
themselves are GitLab's predefined ones (``doc/ci/variables/predefined_variables.md`` in ``gitlabhq``):
``CI_PROJECT_PATH``, ``CI_PIPELINE_NAME``, ``CI_PIPELINE_ID``, ``CI_JOB_NAME``, ``CI_JOB_ID`` (unique
across the instance: a retry is another job), ``CI_JOB_STAGE``, ``CI_COMMIT_REF_NAME`` (a branch or tag
*name*), ``CI_COMMIT_BRANCH``, ``CI_COMMIT_TAG``, ``CI_MERGE_REQUEST_REF_PATH``, ``CI_PIPELINE_SOURCE``,
``GITLAB_USER_LOGIN``.

Every value is checked strictly: its length and its characters (a JSON Schema pattern says the same, the
OpenAPI document carries it), never a traceback, INPUT.INVALID naming the field. Display text (workflow,
job, stage and step names) may be any Unicode but control, format (bidi, zero-width) and separator
characters (``domain.text.UNSAFE_RANGES``): what an approver reads is all there is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from pydantic.json_schema import SkipJsonSchema

from orchestrator.domain.canonical import canonical_sha256
from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.text import UNSAFE_RANGES

__all__ = [
    "CI_FIELDS",
    "CiContext",
    "CiProvider",
    "CiRecord",
    "ci_from_github",
    "ci_from_gitlab",
    "job_key",
]

CiProvider = Literal["github", "gitlab"]


def _escape(code: int) -> str:
    # \uXXXX / \UXXXXXXXX: read alike by Python's re, the Rust regex crate and JSON Schema validators
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


#: the characters never allowed in CI text, as a character class body (lone surrogates are refused before)
_UNSAFE = "".join(
    _escape(a) if a == b else f"{_escape(a)}-{_escape(b)}" for a, b in UNSAFE_RANGES if not 0xD800 <= a <= 0xDFFF
)

#: display text: a workflow, job, stage or step name
LABEL_PATTERN = f"^[^{_UNSAFE}]+$"
LABEL_MAX = 256
#: owner/name (GitHub) or group/subgroup/project (GitLab)
REPOSITORY_PATTERN = r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+$"
REPOSITORY_MAX = 512
#: what git refuses in a ref name beside controls (``git check-ref-format``): space ~ ^ : ? * [ \
_REF_CLASS = f"{_UNSAFE}\\u0020~^:?*\\[\\\\"
REF_PATTERN = f"^[^{_REF_CLASS}]+$"
REF_MAX = 512
#: a uses: action from a repository: owner/name, and @ref when the runner gives one
ACTION_REPOSITORY = "[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+"
ACTION_REF = f"[^{_REF_CLASS}@]+"
ACTION_PATTERN = f"^{ACTION_REPOSITORY}(@{ACTION_REF})?$"
ACTION_MAX = 512
#: a run (GitHub run, GitLab pipeline) id: the forge's number
RUN_ID_PATTERN = r"^[0-9]{1,20}$"
#: what tells one job run apart: GitLab's CI_JOB_ID, or a name the GitHub hook gives it
JOB_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
#: the controller's own id of an open job (``CiJobView.job_id``: ``job-`` and an execution id)
CONTROLLER_JOB_PATTERN = r"^job-ex-[0-9a-f]{1,16}-[0-9a-f]{16}$"
#: GitHub event names and GitLab pipeline sources (push, pull_request_target, merge_request_event …)
EVENT_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
#: a GitHub login (bots as name[bot]) or a GitLab username
ACTOR_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}(\[bot\])?$"
ACTOR_MAX = 260
MAX_ATTEMPT = 10_000


def _checked(pattern: str, what: str) -> AfterValidator:
    regex = re.compile(pattern)

    def check(value: str) -> str:
        if regex.fullmatch(value) is None:
            raise ValueError(what)  # names the rule, never the value
        return value

    return AfterValidator(check)


def _schema(pattern: str) -> Any:
    return Field(json_schema_extra={"pattern": pattern})


_PRINTABLE = "without control, format (bidi, zero-width) or line separator characters"
Label = Annotated[
    str,
    StringConstraints(min_length=1, max_length=LABEL_MAX),
    _checked(LABEL_PATTERN, f"must be 1-{LABEL_MAX} characters {_PRINTABLE}"),
    _schema(LABEL_PATTERN),
]
Repository = Annotated[
    str,
    StringConstraints(min_length=1, max_length=REPOSITORY_MAX),
    _checked(
        REPOSITORY_PATTERN,
        "must be a repository path: owner/name or group/…/project, of letters, digits, '_', '.' and '-'",
    ),
    _schema(REPOSITORY_PATTERN),
]
Ref = Annotated[
    str,
    StringConstraints(min_length=1, max_length=REF_MAX),
    _checked(
        REF_PATTERN,
        "must be a git ref (refs/heads/main) or ref name, without spaces, control or format characters, or any"
        " of ~ ^ : ? * [ \\",
    ),
    _schema(REF_PATTERN),
]
Action = Annotated[
    str,
    StringConstraints(min_length=1, max_length=ACTION_MAX),
    _checked(ACTION_PATTERN, "must be an action's repository, owner/name, with @ref when there is one"),
    _schema(ACTION_PATTERN),
]
RunId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=20),
    _checked(RUN_ID_PATTERN, "must be the run's number: 1-20 digits"),
    _schema(RUN_ID_PATTERN),
]
JobId = Annotated[
    str,
    StringConstraints(min_length=1, max_length=128),
    _checked(JOB_ID_PATTERN, "must be 1-128 of letters, digits, '_', '.', ':' and '-', the first a letter or digit"),
    _schema(JOB_ID_PATTERN),
]
Event = Annotated[
    str,
    StringConstraints(min_length=1, max_length=64),
    _checked(EVENT_PATTERN, "must be an event name: 1-64 of a-z, 0-9 and '_', the first a letter"),
    _schema(EVENT_PATTERN),
]
Actor = Annotated[
    str,
    StringConstraints(min_length=1, max_length=ACTOR_MAX),
    _checked(ACTOR_PATTERN, "must be a user name: letters, digits, '_', '.' and '-' (a bot as name[bot])"),
    _schema(ACTOR_PATTERN),
]


class CiContext(BaseModel):
    """The CI job a request's step belongs to, from the runner's variables (see the module's docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    provider: CiProvider = Field(description="The CI system: github (Actions) or gitlab.")
    repository: Repository = Field(
        description="GitHub: GITHUB_REPOSITORY (owner/name); GitLab: CI_PROJECT_PATH (group/…/project)."
    )
    workflow: Label | None = Field(
        default=None, description="GitHub: GITHUB_WORKFLOW (its name, or its file); GitLab: CI_PIPELINE_NAME."
    )
    job: Label = Field(description="GitHub: GITHUB_JOB (the job's key); GitLab: CI_JOB_NAME.")
    job_id: JobId | None = Field(
        default=None,
        description="What tells this job run apart from another of the same name in the same run: GitLab's "
        "CI_JOB_ID; on GitHub (a matrix leg, a workflow called twice) a name the hook gives, e.g. RUNNER_NAME.",
    )
    stage: Label | None = Field(default=None, description="GitLab: CI_JOB_STAGE (the pipeline stage of the job).")
    step: Label | None = Field(
        default=None,
        description="GitHub: GITHUB_ACTION (the step's id, or __run, __run_2, __<owner>_<repo>); GitLab: the "
        "custom executor's run_exec stage (step_script, build_script, after_script …).",
    )
    action: Action | None = Field(
        default=None,
        description="GitHub: the uses: action a step runs, GITHUB_ACTION_REPOSITORY[@GITHUB_ACTION_REF].",
    )
    run_id: RunId = Field(description="GitHub: GITHUB_RUN_ID; GitLab: CI_PIPELINE_ID.")
    attempt: int | None = Field(
        default=None, ge=1, le=MAX_ATTEMPT, description="GitHub: GITHUB_RUN_ATTEMPT (a re-run is a new attempt)."
    )
    ref: Ref | None = Field(
        default=None,
        description="GitHub: GITHUB_REF (refs/heads/main, refs/pull/1/merge, refs/tags/v1); GitLab: the same "
        "form made of CI_MERGE_REQUEST_REF_PATH, CI_COMMIT_TAG or CI_COMMIT_BRANCH, else CI_COMMIT_REF_NAME.",
    )
    event: Event | None = Field(
        default=None, description="GitHub: GITHUB_EVENT_NAME (push, pull_request …); GitLab: CI_PIPELINE_SOURCE."
    )
    actor: Actor | None = Field(default=None, description="GitHub: GITHUB_ACTOR; GitLab: GITLAB_USER_LOGIN.")
    # set by the controller only (a step of POST /v1/ci/jobs/{id}/steps): refused from any caller, so not in the
    # requests' schema; shown in the recorded form (CiRecord), where the evidence links the step to its job
    controller_job: SkipJsonSchema[str | None] = Field(
        default=None,
        pattern=CONTROLLER_JOB_PATTERN,
        description="The controller's job this step is one of (CiJobView.job_id): set by the controller.",
    )

    def recorded(self) -> CiRecord:
        """The form a sanitized request, the approvers and the evidence see: the same values and the key of
        the job run (:func:`job_key`)."""
        return CiRecord(**{name: getattr(self, name) for name in CiContext.model_fields}, job_key=job_key(self))


def job_key(ci: CiContext) -> str:
    """sha256 of a job run's identity (provider, repository, run id, attempt, job, job id): the same for every
    step of one job run, another for each job, run, re-run (attempt) or matrix leg (job id)."""
    return canonical_sha256(
        {
            "provider": ci.provider,
            "repository": ci.repository,
            "run_id": ci.run_id,
            "attempt": ci.attempt,
            "job": ci.job,
            "job_id": ci.job_id,
        }
    )


class CiRecord(CiContext):
    """A request's CI context as recorded: with the key of its job run."""

    job_key: str = Field(pattern=r"^[0-9a-f]{64}$", description="job_key(): the same for every step of one job run.")
    controller_job: str | None = Field(
        default=None,
        pattern=CONTROLLER_JOB_PATTERN,
        description="The controller's job this step is one of (CiJobView.job_id; its ci_job_opened and "
        "ci_job_closed records in the evidence): set by the controller for the steps of POST /v1/ci/jobs.",
    )


#: the fields a rule's ``ci:`` condition may match (gate.matching.CiConditions), in the order shown
CI_FIELDS: tuple[str, ...] = (
    "provider",
    "repository",
    "workflow",
    "job",
    "stage",
    "step",
    "action",
    "ref",
    "event",
    "actor",
)


def _built(values: dict[str, Any], sources: Mapping[str, str]) -> CiContext:
    """A CiContext of ``values`` (absent values left out); INPUT.INVALID naming each bad field and the variable
    it was read from."""
    try:
        return CiContext.model_validate({k: v for k, v in values.items() if v is not None})
    except ValidationError as err:
        problems = []
        fields = []
        for item in err.errors(include_input=False, include_url=False):
            name = ".".join(str(p) for p in item["loc"]) or "(root)"
            source = sources.get(name)
            fields.append(f"ci.{name}")
            problems.append(f"ci.{name}{f' ({source})' if source else ''}: {item['msg']}")
        raise InputInvalid("; ".join(problems), details={"fields": fields}) from None


def _get(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name)
    return value if value else None  # the runners give an unset variable as empty, too


def ci_from_github(env: Mapping[str, str], *, step: str | None = None, job_id: str | None = None) -> CiContext:
    """The CI context of a GitHub Actions step from its environment (a hook's own, or the step's
    ``environmentVariables``): see the module's docstring for where each variable comes from. ``step``: the
    step's name when the caller knows better than GITHUB_ACTION; ``job_id``: what tells this job run apart
    (RUNNER_NAME of a one-job runner, or an id the hook keeps in its state)."""
    repository = _get(env, "GITHUB_ACTION_REPOSITORY")
    action_ref = _get(env, "GITHUB_ACTION_REF")
    values: dict[str, Any] = {
        "provider": "github",
        "repository": _get(env, "GITHUB_REPOSITORY"),
        "workflow": _get(env, "GITHUB_WORKFLOW"),
        "job": _get(env, "GITHUB_JOB"),
        "job_id": job_id,
        "step": step if step is not None else _get(env, "GITHUB_ACTION"),
        "action": None if repository is None else f"{repository}@{action_ref}" if action_ref else repository,
        "run_id": _get(env, "GITHUB_RUN_ID"),
        "attempt": _get(env, "GITHUB_RUN_ATTEMPT"),
        "ref": _get(env, "GITHUB_REF"),
        "event": _get(env, "GITHUB_EVENT_NAME"),
        "actor": _get(env, "GITHUB_ACTOR"),
    }
    sources = {
        "repository": "GITHUB_REPOSITORY",
        "workflow": "GITHUB_WORKFLOW",
        "job": "GITHUB_JOB",
        "step": "GITHUB_ACTION",
        "action": "GITHUB_ACTION_REPOSITORY, GITHUB_ACTION_REF",
        "run_id": "GITHUB_RUN_ID",
        "attempt": "GITHUB_RUN_ATTEMPT",
        "ref": "GITHUB_REF",
        "event": "GITHUB_EVENT_NAME",
        "actor": "GITHUB_ACTOR",
    }
    return _built(values, sources if step is None else {k: v for k, v in sources.items() if k != "step"})


#: the prefix the custom executor gives the job's variables (docs/executors/custom.md, "Stages")
GITLAB_PREFIX = "CUSTOM_ENV_"


def _gitlab_ref(env: Mapping[str, str]) -> tuple[str | None, str]:
    """The ref a GitLab job builds, in git's full form where the variables tell it (a merge request's ref path,
    a tag, a branch), so that rules read the same on both systems; else the ref name as given."""
    merge_request = _get(env, f"{GITLAB_PREFIX}CI_MERGE_REQUEST_REF_PATH")
    if merge_request is not None:
        return merge_request, "CI_MERGE_REQUEST_REF_PATH"
    tag = _get(env, f"{GITLAB_PREFIX}CI_COMMIT_TAG")
    if tag is not None:
        return f"refs/tags/{tag}", "CI_COMMIT_TAG"
    branch = _get(env, f"{GITLAB_PREFIX}CI_COMMIT_BRANCH")
    if branch is not None:
        return f"refs/heads/{branch}", "CI_COMMIT_BRANCH"
    return _get(env, f"{GITLAB_PREFIX}CI_COMMIT_REF_NAME"), "CI_COMMIT_REF_NAME"


def ci_from_gitlab(env: Mapping[str, str], *, stage_name: str | None = None) -> CiContext:
    """The CI context of a GitLab job from the custom executor's environment (the job's variables as
    ``CUSTOM_ENV_*``); ``stage_name``: ``run_exec``'s second argument (the step), None in the other stages."""
    ref, ref_source = _gitlab_ref(env)
    names = {
        "repository": "CI_PROJECT_PATH",
        "workflow": "CI_PIPELINE_NAME",
        "job": "CI_JOB_NAME",
        "job_id": "CI_JOB_ID",
        "stage": "CI_JOB_STAGE",
        "run_id": "CI_PIPELINE_ID",
        "event": "CI_PIPELINE_SOURCE",
        "actor": "GITLAB_USER_LOGIN",
    }
    values: dict[str, Any] = {field: _get(env, f"{GITLAB_PREFIX}{name}") for field, name in names.items()}
    values.update(provider="gitlab", step=stage_name, ref=ref)
    sources = {field: f"{GITLAB_PREFIX}{name}" for field, name in names.items()}
    sources.update(step="run_exec's stage", ref=f"{GITLAB_PREFIX}{ref_source}")
    return _built(values, sources)
