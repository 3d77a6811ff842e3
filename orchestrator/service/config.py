"""The orchestrator's YAML config: one file, sections safety / approvals / evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.approvals.rules import ApprovalRule, GrantOutcome
from orchestrator.gate.config import SafetyConfig, default_safety_config
from orchestrator.yamlfile import load_model_file


class ApprovalsSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    provider: Literal["none", "rules", "terminal", "queue"] = Field(
        default="none",
        description="Who answers 'ask': rules (below), terminal (only with a TTY), queue (SQLite store), none.",
    )
    rules: list[ApprovalRule] = Field(default_factory=list, description="For provider: rules.")
    default: GrantOutcome = Field(default="denied", description="For provider: rules, when no rule matches.")
    queue_path: str | None = Field(default=None, description="For provider: queue; default in the state dir.")


class EvidenceSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    path: str | None = Field(default=None, description="Evidence JSONL file (default: state dir).")


class OrchestratorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    safety: SafetyConfig = Field(default_factory=default_safety_config)
    approvals: ApprovalsSection = Field(default_factory=ApprovalsSection)
    evidence: EvidenceSection = Field(default_factory=EvidenceSection)


def load_config(path: Path | None) -> OrchestratorConfig:
    """The whole config, validated (CONFIG.INVALID names file, line, field). None: built-in defaults."""
    if path is None:
        return OrchestratorConfig()
    return load_model_file(OrchestratorConfig, path)
