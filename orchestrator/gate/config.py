"""The `safety:` section of the orchestrator's YAML config: mode, lists, ordered rules, default."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from orchestrator.domain.decisions import Decision, Mode
from orchestrator.domain.hosts import parse_pattern
from orchestrator.domain.sanitized import RiskLevelName
from orchestrator.gate.matching import MatchConditions, check_pattern
from orchestrator.yamlfile import load_yaml_mapping, parse_yaml, validate

CommandPatternText = Annotated[str, AfterValidator(check_pattern)]


def _egress_pattern(text: str) -> str:
    return parse_pattern(text).canonical


EgressPatternText = Annotated[str, AfterValidator(_egress_pattern)]


class PolicyRule(MatchConditions):
    """One ordered rule; first match wins."""

    name: str | None = Field(default=None, max_length=200, description="Shown as matched_rule.")
    action: Decision = Field(description="allow | ask | deny")
    reason: str = Field(default="", max_length=1000, description="Why; shown in the decision.")

    @model_validator(mode="after")
    def _blind_allow_names_its_ci_context(self) -> PolicyRule:
        """What the gate cannot see is never allowed without an approval or an explicit rule on CI context: an
        allow stating ``opaque: true`` names the CI context it trusts (at least one field of ``ci:``)."""
        if (
            self.action is Decision.ALLOW
            and self.opaque is True
            and not (self.ci and self.ci.model_dump(exclude_none=True))
        ):
            named = f"rule {self.name!r}" if self.name else "this rule"
            raise ValueError(
                f"{named}: an allow of what the gate cannot see must name the CI context it trusts (ci:),"
                " e.g. ci: {action: 'actions/*'}"
            )
        return self


class SafetyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    mode: Mode = Field(default=Mode.ASK, description="ask | allow | deny")
    allowlist: list[CommandPatternText] = Field(
        default_factory=list, description="Command patterns allowed without asking (simple commands only)."
    )
    denylist: list[CommandPatternText] = Field(default_factory=list, description="Command patterns always denied.")
    rules: list[PolicyRule] = Field(default_factory=list, description="Ordered rules, first match wins.")
    default: Literal["ask", "deny"] = Field(default="ask", description="Decision when nothing else decided (mode ask).")
    approval_timeout_s: float = Field(default=300.0, gt=0, le=86400, description="Approval wait; then deny.")
    allow_max_risk: RiskLevelName = Field(
        default="medium",
        description="An allowlist hit, or an allow rule without its own risk condition, asks instead when"
        " the risk is higher than this.",
    )
    network_allow: list[EgressPatternText] = Field(
        default_factory=list,
        description="host:port patterns any run may reach through the egress proxy without asking (a profile's "
        "or request's host not covered here is an escalation the gate asks about).",
    )
    trusted_program_dirs: list[str] = Field(
        default_factory=lambda: ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"],
        description="An allow only covers a program named bare (found on PATH) or by a path in these"
        " directories: ./ls or /tmp/x/ls is someone else's binary.",
    )


def default_config_text() -> str:
    return resources.files("orchestrator.gate").joinpath("default_config.yaml").read_text(encoding="utf-8")


def _default_section() -> dict[str, Any]:
    data, _ = parse_yaml(default_config_text(), "<built-in default>")
    section: dict[str, Any] = data["safety"]
    return section


def default_safety_config() -> SafetyConfig:
    return SafetyConfig.model_validate(_default_section())


def with_defaults(section: Any) -> Any:
    """A file's ``safety:`` over the built-in one, key by key: what the file leaves out keeps its
    default (a partial config never silently drops the default denylist); an explicit
    ``denylist: []`` still clears it."""
    if section is None:
        return _default_section()
    if not isinstance(section, dict):
        return section  # validation reports the wrong type with its line
    return {**_default_section(), **section}


def load_safety_config(path: Path) -> SafetyConfig:
    data, located = load_yaml_mapping(path)
    return validate(SafetyConfig, with_defaults(data.get("safety")), located, str(path), ("safety",))
