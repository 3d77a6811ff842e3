"""A request's CI context (orchestrator/domain/ci.py): read from the runners' own variables, validated strictly
(INPUT.INVALID naming the field, never the value), recorded with the key of its job run."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from orchestrator.domain import ci as ci_module
from orchestrator.domain.ci import CiContext, CiRecord, ci_from_github, ci_from_gitlab, job_key
from orchestrator.domain.errors import InputInvalid
from orchestrator.domain.requests import parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.sanitize import sanitize

# The variables a GitHub step (and its container hook) gets: GITHUB_<KEY> for the keys allowlisted in
# actions/runner src/Runner.Worker/GitHubContext.cs, RUNNER_NAME from RunnerContext.cs
GITHUB_ENV = {
    "GITHUB_REPOSITORY": "octo-org/app",
    "GITHUB_WORKFLOW": "CI",
    "GITHUB_JOB": "build",
    "GITHUB_RUN_ID": "9876543210",
    "GITHUB_RUN_ATTEMPT": "2",
    "GITHUB_REF": "refs/pull/17/merge",
    "GITHUB_EVENT_NAME": "pull_request",
    "GITHUB_ACTOR": "dependabot[bot]",
    "GITHUB_ACTION": "__run_2",
    "GITHUB_ACTION_REPOSITORY": "",
    "GITHUB_ACTION_REF": "",
    "RUNNER_NAME": "arc-runner-set-x7k2p-runner-abcde",
    "NODE_ENV": "development",
}
# A GitLab job's predefined variables as the custom executor passes them (CUSTOM_ENV_ prefix,
# gitlab-runner executors/custom/custom.go)
GITLAB_ENV = {
    "CUSTOM_ENV_CI_PROJECT_PATH": "group/sub/project",
    "CUSTOM_ENV_CI_PIPELINE_NAME": "",
    "CUSTOM_ENV_CI_PIPELINE_ID": "1234567",
    "CUSTOM_ENV_CI_JOB_NAME": "rspec 1/3",
    "CUSTOM_ENV_CI_JOB_ID": "555001",
    "CUSTOM_ENV_CI_JOB_STAGE": "test",
    "CUSTOM_ENV_CI_COMMIT_REF_NAME": "main",
    "CUSTOM_ENV_CI_COMMIT_BRANCH": "main",
    "CUSTOM_ENV_CI_PIPELINE_SOURCE": "push",
    "GITLAB_USER_LOGIN": "not-a-custom-env",
    "CUSTOM_ENV_GITLAB_USER_LOGIN": "jane.doe",
}
BASE: dict[str, Any] = {"provider": "github", "repository": "org/repo", "job": "build", "run_id": "1"}


def test_a_github_step_s_context_from_its_environment() -> None:
    ci = ci_from_github(GITHUB_ENV, job_id=GITHUB_ENV["RUNNER_NAME"])
    assert ci.model_dump(exclude_none=True) == {
        "provider": "github",
        "repository": "octo-org/app",
        "workflow": "CI",
        "job": "build",
        "job_id": "arc-runner-set-x7k2p-runner-abcde",
        "step": "__run_2",
        "run_id": "9876543210",
        "attempt": 2,
        "ref": "refs/pull/17/merge",
        "event": "pull_request",
        "actor": "dependabot[bot]",
    }


def test_a_github_action_step_names_its_action_and_ref() -> None:
    env = {**GITHUB_ENV, "GITHUB_ACTION": "__actions_checkout", "GITHUB_ACTION_REPOSITORY": "actions/checkout"}
    assert ci_from_github({**env, "GITHUB_ACTION_REF": "v4"}).action == "actions/checkout@v4"
    assert ci_from_github(env).action == "actions/checkout"
    assert ci_from_github(env, step="checkout").step == "checkout"


def test_a_gitlab_stage_s_context_from_the_custom_executor_s_environment() -> None:
    ci = ci_from_gitlab(GITLAB_ENV, stage_name="step_script")
    assert ci.model_dump(exclude_none=True) == {
        "provider": "gitlab",
        "repository": "group/sub/project",
        "job": "rspec 1/3",
        "job_id": "555001",
        "stage": "test",
        "step": "step_script",
        "run_id": "1234567",
        "ref": "refs/heads/main",
        "event": "push",
        "actor": "jane.doe",
    }


@pytest.mark.parametrize(
    ("extra", "ref"),
    [
        ({"CUSTOM_ENV_CI_MERGE_REQUEST_REF_PATH": "refs/merge-requests/12/head"}, "refs/merge-requests/12/head"),
        ({"CUSTOM_ENV_CI_COMMIT_BRANCH": "", "CUSTOM_ENV_CI_COMMIT_TAG": "v1.2.0"}, "refs/tags/v1.2.0"),
        ({"CUSTOM_ENV_CI_COMMIT_BRANCH": "", "CUSTOM_ENV_CI_COMMIT_REF_NAME": "some-ref"}, "some-ref"),
    ],
    ids=["merge-request", "tag", "ref-name-only"],
)
def test_gitlab_refs_in_git_s_full_form_where_the_variables_tell_it(extra: dict[str, str], ref: str) -> None:
    # a merge request pipeline's CI_COMMIT_REF_NAME is its source branch: never read as refs/heads/<branch>
    assert ci_from_gitlab({**GITLAB_ENV, **extra}).ref == ref


def test_a_variable_that_is_wrong_is_named_with_its_field() -> None:
    with pytest.raises(InputInvalid) as err:
        ci_from_github({**GITHUB_ENV, "GITHUB_REF": "refs/heads/a b", "GITHUB_RUN_ID": ""})
    assert err.value.details == {"fields": ["ci.run_id", "ci.ref"]}
    assert err.value.message.startswith(
        "ci.run_id (GITHUB_RUN_ID): Field required; ci.ref (GITHUB_REF): Value error, must be a git ref"
    )
    assert "a b" not in err.value.message
    with pytest.raises(InputInvalid) as err:
        ci_from_gitlab({**GITLAB_ENV, "CUSTOM_ENV_CI_JOB_STAGE": "te\x1bst"})
    assert err.value.details == {"fields": ["ci.stage"]}
    assert "ci.stage (CUSTOM_ENV_CI_JOB_STAGE): Value error, must be 1-256 characters" in err.value.message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("provider", "jenkins"),
        ("repository", "org"),
        ("repository", "org/re po"),
        ("repository", "org//repo"),
        ("repository", "o" * 509 + "/abc"),
        ("workflow", ""),
        ("workflow", "build\u202etset"),  # a right-to-left override: what the approver reads is all there is
        ("workflow", "a\nb"),
        ("job", "x" * 257),
        ("job", "zero\u200bwidth"),
        ("job_id", "-leading"),
        ("job_id", "a b"),
        ("stage", "\x7f"),
        ("step", "line\u2028separator"),
        ("action", "checkout@v4"),
        ("action", "actions/checkout@v4 --x"),
        ("run_id", "12a"),
        ("run_id", "1" * 21),
        ("attempt", 0),
        ("attempt", 10_001),
        ("ref", "refs/heads/a~1"),
        ("ref", "refs/heads/*"),
        ("ref", "refs/heads/a\\b"),
        ("event", "Pull_Request"),
        ("event", "push event"),
        ("actor", "-dash"),
        ("actor", "name[robot]"),
    ],
)
def test_each_field_is_checked_and_named(field: str, value: object) -> None:
    raw = {"tool": "shell_exec", "argv": ["true"], "ci": {**BASE, field: value}}
    with pytest.raises(InputInvalid) as err:
        parse_request(raw)
    assert err.value.code == "INPUT.INVALID"
    assert err.value.details == {"fields": [f"ci.{field}"]}
    assert err.value.message.startswith(f"ci.{field}: ")
    if isinstance(value, str) and len(value) > 2:
        assert value not in err.value.message


def test_unknown_and_missing_fields_are_named() -> None:
    with pytest.raises(InputInvalid) as err:
        parse_request({"tool": "shell_exec", "argv": ["true"], "ci": {**BASE, "branch": "main"}})
    assert err.value.details == {"fields": ["ci.branch"]}
    with pytest.raises(InputInvalid) as err:
        parse_request({"tool": "shell_exec", "argv": ["true"], "ci": {"provider": "gitlab"}})
    assert err.value.details == {"fields": ["ci.repository", "ci.job", "ci.run_id"]}


def test_what_the_forges_write_is_taken() -> None:
    ok = {
        "repository": "Octo-Org/my.repo_name-2",
        "workflow": "🚀 Deploy (prod)",
        "job": "build: [linux, amd64]",
        "step": "__actions_setup-python",
        "action": "docker/build-push-action@0565240e2d4ab88bba5387d719585280857ece09",
        "ref": "refs/tags/v1.0.0-rc.1+build.5",
        "event": "pull_request_target",
        "actor": "github-actions[bot]",
        "attempt": 50,
    }
    ci = parse_request({"tool": "shell_exec", "argv": ["true"], "ci": {**BASE, **ok}}).ci
    assert ci is not None and ci.model_dump(exclude_none=True) == {**BASE, **ok}


def test_the_job_key_is_one_job_run_s() -> None:
    first = CiContext(**BASE, step="__run", attempt=1)
    assert job_key(first) == job_key(CiContext(**BASE, step="__run_2", attempt=1, event="push", ref="refs/heads/x"))
    for other in (
        {"attempt": 2},
        {"job_id": "runner-2"},
        {"run_id": "2"},
        {"job": "test"},
        {"repository": "org/other"},
        {"provider": "gitlab"},
    ):
        assert job_key(CiContext(**{**BASE, "attempt": 1, **other})) != job_key(first), other
    recorded = first.recorded()
    assert isinstance(recorded, CiRecord) and recorded.job_key == job_key(first)
    assert recorded.recorded() == recorded  # a record's own key is the same key


def test_the_sanitized_request_carries_the_context_and_its_key_but_the_approval_key_does_not() -> None:
    raw = {"tool": "shell_exec", "argv": ["make", "test"]}
    with_ci = {**raw, "ci": {**BASE, "step": "__run", "event": "push"}}
    sanitized, _ = sanitize(parse_request(with_ci))
    assert sanitized.public()["context"]["ci"] == {
        **BASE,
        "step": "__run",
        "event": "push",
        "job_key": job_key(CiContext(**BASE)),
    }
    # who asks and from where is recorded, not part of what is asked: the same command has one key
    assert approval_key(sanitized) == approval_key(sanitize(parse_request(raw))[0])


_FIELD_PATTERNS = {
    "workflow": (ci_module.LABEL_PATTERN, ci_module.LABEL_MAX),
    "repository": (ci_module.REPOSITORY_PATTERN, ci_module.REPOSITORY_MAX),
    "ref": (ci_module.REF_PATTERN, ci_module.REF_MAX),
    "action": (ci_module.ACTION_PATTERN, ci_module.ACTION_MAX),
    "event": (ci_module.EVENT_PATTERN, 64),
    "actor": (ci_module.ACTOR_PATTERN, ci_module.ACTOR_MAX),
    "job_id": (ci_module.JOB_ID_PATTERN, 128),
}


def test_the_json_schema_states_each_check() -> None:
    """The OpenAPI document is built from these models: what it states is what the service checks."""
    props = TypeAdapter(CiContext).json_schema()["properties"]
    for field, (pattern, limit) in _FIELD_PATTERNS.items():
        schema = props[field]["anyOf"][0] if "anyOf" in props[field] else props[field]
        assert (schema["pattern"], schema["maxLength"], schema["minLength"]) == (pattern, limit, 1), field


def _taken(field: str, value: str) -> bool:
    try:
        CiContext(**{**BASE, field: value})
    except ValidationError:
        return False
    return True


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(sorted(_FIELD_PATTERNS)), value=st.text(min_size=1, max_size=40))
def test_the_pattern_and_the_check_agree_on_any_text(field: str, value: str) -> None:
    pattern, limit = _FIELD_PATTERNS[field]
    expected = re.fullmatch(pattern, value) is not None and len(value) <= limit
    assert _taken(field, value) == expected, (field, value)
