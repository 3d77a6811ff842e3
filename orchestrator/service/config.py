"""The orchestrator's YAML config: one file, sections safety / approvals / evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from orchestrator.approvals.rules import ApprovalRule, GrantOutcome
from orchestrator.gate.config import SafetyConfig, default_safety_config, with_defaults
from orchestrator.profiles import ProfileCaps
from orchestrator.yamlfile import load_yaml_mapping, validate


class ApprovalsSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    provider: Literal["auto", "none", "rules", "terminal", "queue"] = Field(
        default="auto",
        description="Who answers 'ask': rules (below), terminal (only with a TTY), queue (SQLite store), none;"
        " auto = terminal when stdin is a TTY, else none (asks fail fast).",
    )
    rules: list[ApprovalRule] = Field(
        default_factory=list,
        description="For provider: rules; with provider: queue, tried first (what no rule matches waits in the queue).",
    )
    default: GrantOutcome = Field(default="denied", description="For provider: rules, when no rule matches.")
    queue_path: str | None = Field(default=None, description="For provider: queue; default in the state dir.")


class EvidenceSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    path: str | None = Field(default=None, description="Evidence JSONL file (default: state dir).")


class OrchestratorConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    safety: SafetyConfig = Field(default_factory=default_safety_config)
    approvals: ApprovalsSection = Field(default_factory=ApprovalsSection)
    evidence: EvidenceSection = Field(default_factory=EvidenceSection)
    caps: ProfileCaps | None = Field(
        default=None,
        description="Policy caps: the most any profile may get (memory, cpus, pids, wall time, output,"
        " runtimes, images); the effective profile is the narrowest of profile, request and these.",
    )


def load_config(path: Path | None) -> OrchestratorConfig:
    """The whole config, validated (CONFIG.INVALID names file, line, field). None: built-in defaults.
    The safety section is layered over the built-in policy (see gate.config.with_defaults)."""
    if path is None:
        return OrchestratorConfig()
    data, located = load_yaml_mapping(path)
    data = {**data, "safety": with_defaults(data.get("safety"))}
    return validate(OrchestratorConfig, data, located, str(path))
