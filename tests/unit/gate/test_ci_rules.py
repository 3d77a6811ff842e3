"""Policy and approval rules on a request's CI context (``ci:`` in MatchConditions): globs as ``subject``'s,
every field given must hold, and a rule with a ``ci`` condition never matches a request without CI context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.approvals.rules import RuleApprovalsConfig, RuleApprover
from orchestrator.domain.decisions import ApprovalRequest
from orchestrator.domain.errors import ConfigInvalid
from orchestrator.domain.requests import parse_request
from orchestrator.gate.approval_key import approval_key
from orchestrator.gate.config import SafetyConfig, default_safety_config, load_safety_config
from orchestrator.gate.matching import CiConditions
from orchestrator.gate.policy import Policy
from orchestrator.gate.sanitize import sanitize

JOB: dict[str, Any] = {"provider": "github", "repository": "org/app", "job": "build", "run_id": "7"}


def _config(*rules: dict[str, Any], mode: str = "allow") -> SafetyConfig:
    return SafetyConfig.model_validate({**default_safety_config().model_dump(), "mode": mode, "rules": list(rules)})


def decide(
    config: SafetyConfig, ci: dict[str, Any] | None, argv: tuple[str, ...] = ("make", "test")
) -> tuple[str, str]:
    raw: dict[str, Any] = {"tool": "shell_exec", "argv": list(argv)}
    if ci is not None:
        raw["ci"] = {**JOB, **ci}
    sanitized, analysis = sanitize(parse_request(raw))
    decision = Policy(config).decide(sanitized, analysis, profile="ci")
    return decision.decision.value, decision.matched_rule or ""


PR_ASK = {"name": "prs", "ci": {"event": ["pull_request"], "repository": "org/*"}, "action": "ask"}
DEPLOY_MAIN = {"name": "deploy-main", "ci": {"step": "deploy*", "ref": "refs/heads/main"}, "action": "ask"}


def test_the_issue_s_examples() -> None:
    config = _config(PR_ASK, DEPLOY_MAIN)
    assert decide(config, {"event": "pull_request"}) == ("ask", "rule:1:prs")
    assert decide(config, {"event": "pull_request", "repository": "other/app"}) == ("allow", "mode:allow")
    assert decide(config, {"event": "push"}) == ("allow", "mode:allow")
    assert decide(config, {"step": "deploy-prod", "ref": "refs/heads/main"}) == ("ask", "rule:2:deploy-main")
    assert decide(config, {"step": "deploy-prod", "ref": "refs/heads/feature"}) == ("allow", "mode:allow")
    assert decide(config, {"step": "build", "ref": "refs/heads/main"}) == ("allow", "mode:allow")


def test_a_ci_rule_never_matches_a_request_without_ci_context() -> None:
    everything = {"name": "any-ci", "ci": {}, "action": "deny"}
    config = _config(everything)
    assert decide(config, None) == ("allow", "mode:allow")
    assert decide(config, {}) == ("deny", "rule:1:any-ci")


def test_a_field_the_request_does_not_give_never_matches() -> None:
    config = _config({"name": "steps", "ci": {"step": "*"}, "action": "deny"})
    assert decide(config, {}) == ("allow", "mode:allow")
    assert decide(config, {"step": "__run"}) == ("deny", "rule:1:steps")


def test_every_field_given_must_hold_and_any_glob_of_one() -> None:
    rule = {
        "name": "r",
        "ci": {"provider": "github", "event": ["push", "schedule"], "ref": "refs/tags/v*"},
        "action": "deny",
    }
    config = _config(rule)
    assert decide(config, {"event": "schedule", "ref": "refs/tags/v1.2"}) == ("deny", "rule:1:r")
    assert decide(config, {"event": "push", "ref": "refs/tags/v1.2"}) == ("deny", "rule:1:r")
    assert decide(config, {"event": "push", "ref": "refs/heads/v1"}) == ("allow", "mode:allow")
    assert decide(config, {"event": "pull_request", "ref": "refs/tags/v1.2"}) == ("allow", "mode:allow")
    assert decide(config, {"provider": "gitlab", "event": "push", "ref": "refs/tags/v1"}) == ("allow", "mode:allow")


def test_repositories_actions_and_actors_match_without_case_the_rest_exactly() -> None:
    config = _config(
        {"name": "org", "ci": {"repository": "Evil-Org/*"}, "action": "deny"},
        {"name": "bot", "ci": {"actor": "dependabot[[]bot]"}, "action": "ask"},
        {"name": "step", "ci": {"step": "Deploy"}, "action": "deny"},
    )
    assert decide(config, {"repository": "evil-org/app"}) == ("deny", "rule:1:org")
    assert decide(config, {"repository": "EVIL-ORG/App"}) == ("deny", "rule:1:org")
    assert decide(config, {"actor": "Dependabot[bot]"}) == ("ask", "rule:2:bot")
    assert decide(config, {"step": "deploy"}) == ("allow", "mode:allow")
    assert decide(config, {"step": "Deploy"}) == ("deny", "rule:3:step")


def test_ci_conditions_combine_with_command_conditions() -> None:
    rule = {"name": "no-push-from-prs", "ci": {"event": "pull_request*"}, "argv_prefix": "git push", "action": "deny"}
    config = _config(rule)
    assert decide(config, {"event": "pull_request_target"}, ("git", "push", "origin")) == (
        "deny",
        "rule:1:no-push-from-prs",
    )
    assert decide(config, {"event": "push"}, ("git", "push", "origin")) == ("allow", "mode:allow")
    assert decide(config, {"event": "pull_request"}, ("git", "status")) == ("allow", "allowlist:git status")


def test_an_allow_rule_on_ci_context_still_asks_what_the_gate_cannot_see() -> None:
    config = _config({"name": "trusted", "ci": {"repository": "org/*"}, "action": "allow"}, mode="ask")
    assert decide(config, {}, ("ls",)) == ("allow", "rule:1:trusted")
    assert decide(config, {}, ("python3", "-c", "print(1)"))[0] == "ask"
    assert decide(config, {"repository": "else/app"}, ("ls",)) == ("allow", "allowlist:ls")
    assert decide(config, {"repository": "else/app"}, ("make", "x")) == ("ask", "default")


@pytest.mark.parametrize(
    ("ci", "problem"),
    [
        ("{branch: main}", "safety.rules.0.ci.branch: Extra inputs are not permitted"),
        ("{event: []}", "safety.rules.0.ci.event: Value should have at least 1 item after validation, not 0"),
        ("{step: '[z-a]'}", "safety.rules.0.ci.step.0: Value error, the class at character 1 has a range whose ends"),
        ("{provider: jenkins}", "safety.rules.0.ci.provider.0: Input should be 'github' or 'gitlab'"),
        ("{ref: ''}", "safety.rules.0.ci.ref.0: Value error, a glob must not be empty"),
        ("push", "safety.rules.0.ci: Input should be a valid dictionary or instance of CiConditions"),
    ],
)
def test_a_wrong_ci_condition_is_refused_at_load_naming_file_line_and_field(
    tmp_path: Path, ci: str, problem: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(f"safety:\n  rules:\n    - name: r\n      ci: {ci}\n      action: deny\n")
    with pytest.raises(ConfigInvalid) as err:
        load_safety_config(path)
    assert f"{path}:4: {problem}" in err.value.message, err.value.message


def test_one_glob_or_a_list() -> None:
    assert CiConditions.model_validate({"event": "push", "provider": "gitlab"}) == CiConditions(
        event=["push"], provider=["gitlab"]
    )


def _ask(raw: dict[str, Any]) -> ApprovalRequest:
    sanitized, _ = sanitize(parse_request(raw))
    return ApprovalRequest(
        execution_id="ex-1", approval_key=approval_key(sanitized), sanitized=sanitized, policy_reason="r", timeout_s=5
    )


APPROVALS = RuleApprovalsConfig.model_validate(
    {
        "rules": [
            {"name": "no-fork-deploys", "ci": {"event": "pull_request_target", "step": "deploy*"}, "outcome": "denied"},
            {"name": "make-in-ci", "argv_prefix": "make", "ci": {"repository": "org/*"}, "outcome": "approved"},
            {"name": "release-team", "ci": {"actor": "release-*", "ref": "refs/tags/v*"}, "outcome": "approved"},
        ]
    }
)


def test_approval_rules_match_ci_context_too() -> None:
    approver = RuleApprover(APPROVALS)

    def outcome(ci: dict[str, Any] | None, argv: list[str]) -> tuple[str, str] | None:
        raw: dict[str, Any] = {"tool": "shell_exec", "argv": argv}
        if ci is not None:
            raw["ci"] = {**JOB, **ci}
        result = approver.match(_ask(raw))
        return None if result is None else (result.outcome.value, result.approver)

    deploy = {"event": "pull_request_target", "step": "deploy-prod"}
    assert outcome(deploy, ["make", "deploy"]) == ("denied", "rule:no-fork-deploys")
    assert outcome({}, ["make", "deploy"]) == ("approved", "rule:make-in-ci")
    assert outcome(None, ["make", "deploy"]) is None
    assert outcome({"repository": "other/app"}, ["make", "deploy"]) is None
    assert outcome({"actor": "release-bot", "ref": "refs/tags/v2.0.0", "repository": "x/y"}, ["./release"]) == (
        "approved",
        "rule:release-team",
    )
    assert outcome({"actor": "release-bot", "ref": "refs/heads/main", "repository": "x/y"}, ["./release"]) is None
