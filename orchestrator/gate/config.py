"""The `safety:` section of the orchestrator's YAML config: mode, lists, ordered rules, default."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from orchestrator.domain.decisions import Decision, Mode
from orchestrator.domain.sanitized import RiskLevelName
from orchestrator.gate.matching import MatchConditions, check_pattern
from orchestrator.yamlfile import load_model_file, parse_yaml, validate

CommandPatternText = Annotated[str, AfterValidator(check_pattern)]


class PolicyRule(MatchConditions):
    """One ordered rule; first match wins."""

    name: str | None = Field(default=None, max_length=200, description="Shown as matched_rule.")
    action: Decision = Field(description="allow | ask | deny")
    reason: str = Field(default="", max_length=1000, description="Why; shown in the decision.")


class SafetyConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode = Field(default=Mode.ASK, description="ask | allow | deny")
    allowlist: list[CommandPatternText] = Field(
        default_factory=list, description="Command patterns allowed without asking (simple commands only)."
    )
    denylist: list[CommandPatternText] = Field(default_factory=list, description="Command patterns always denied.")
    rules: list[PolicyRule] = Field(default_factory=list, description="Ordered rules, first match wins.")
    default: Literal["ask", "deny"] = Field(default="ask", description="Decision when nothing else decided (mode ask).")
    approval_timeout_s: float = Field(default=300.0, gt=0, le=86400, description="Approval wait; then deny.")
    allowlist_max_risk: RiskLevelName = Field(
        default="medium", description="An allowlist hit above this risk asks instead."
    )


def default_config_text() -> str:
    return resources.files("orchestrator.gate").joinpath("default_config.yaml").read_text(encoding="utf-8")


def default_safety_config() -> SafetyConfig:
    data, located = parse_yaml(default_config_text(), "<built-in default>")
    return validate(SafetyConfig, data["safety"], located, "<built-in default>", ("safety",))


def load_safety_config(path: Path) -> SafetyConfig:
    return load_model_file(SafetyConfig, path, key="safety")
