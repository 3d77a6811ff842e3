"""A risk finding (level + reason), and how findings combine into a request's risk."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from orchestrator.domain.sanitized import Risk, RiskLevel

NO_RISK = "no risky pattern"
LOW, MEDIUM, HIGH, CRITICAL = RiskLevel.LOW, RiskLevel.MEDIUM, RiskLevel.HIGH, RiskLevel.CRITICAL


@dataclass(frozen=True, slots=True)
class Finding:
    level: RiskLevel
    reason: str


Check = Callable[[str, Sequence[str], list[Finding]], None]
"""A per-program risk check: (program name as written, its words, findings to append to)."""


def combine(findings: Iterable[Finding]) -> Risk:
    """The highest level (low if none) and every reason, deduplicated in order, joined by '; '."""
    level = LOW
    reasons: dict[str, None] = {}
    for finding in findings:
        level = max(level, finding.level)
        reasons[finding.reason] = None
    return Risk(risk_level=level.label, reason="; ".join(reasons) if reasons else NO_RISK)
