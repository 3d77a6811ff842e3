"""The deterministic policy: the same sanitized request and config always give the same decision.

Order: denylist → mode deny → ordered rules (first match wins) → asked escalation → allowlist
(simple single command, risk at most allowlist_max_risk) → mode allow → default.
An allow from a rule never lets a complex shell string or an escalation through: those ask.
"""

from __future__ import annotations

import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from orchestrator.domain.canonical import canonical_sha256
from orchestrator.domain.decisions import Decision, Mode, PolicyDecision
from orchestrator.domain.errors import ConfigInvalid
from orchestrator.domain.sanitized import RiskLevel, SanitizedRequest
from orchestrator.gate.commands import CommandPattern, program_name
from orchestrator.gate.config import PolicyRule, SafetyConfig, default_safety_config, load_safety_config
from orchestrator.gate.intent import ShellAnalysis
from orchestrator.gate.matching import WILDCARD, Matcher

log = logging.getLogger(__name__)

POLICY_ENGINE_VERSION = 1


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    index: int
    label: str
    rule: PolicyRule
    matcher: Matcher


class Policy:
    """A compiled SafetyConfig. Rules are indexed by program name so that a request only visits the
    rules that could match it, in their original order (first match wins is preserved)."""

    def __init__(self, config: SafetyConfig, source: str = "<built-in default>") -> None:
        self.config = config
        self.source = source
        self.version_hash = canonical_sha256(
            {"engine": POLICY_ENGINE_VERSION, "safety": config.model_dump(mode="json")}
        )
        self._deny = [CommandPattern.parse(text) for text in config.denylist]
        self._allow = [CommandPattern.parse(text) for text in config.allowlist]
        self._allow_max = RiskLevel.parse(config.allowlist_max_risk)
        rules = [
            _CompiledRule(i, f"rule:{i}" + (f":{rule.name}" if rule.name else ""), rule, Matcher.compile(rule))
            for i, rule in enumerate(config.rules, start=1)
        ]
        self._by_program: dict[str, list[_CompiledRule]] = {}
        self._wild: list[_CompiledRule] = []
        for compiled in rules:
            if compiled.matcher.program_key == WILDCARD:
                self._wild.append(compiled)
            else:
                self._by_program.setdefault(compiled.matcher.program_key, []).append(compiled)
        self._merged: dict[frozenset[str], list[_CompiledRule]] = {}
        self._ordered = rules

    def _rules_in_order(self) -> list[_CompiledRule]:
        return list(self._ordered)

    def _candidates(self, programs: frozenset[str]) -> list[_CompiledRule]:
        merged = self._merged.get(programs)
        if merged is None:
            pool = list(self._wild)
            for name in programs:
                pool.extend(self._by_program.get(name, ()))
            merged = sorted(pool, key=lambda r: r.index)
            if len(self._merged) < 4096:
                self._merged[programs] = merged
        return merged

    def _decision(
        self, decision: Decision, reason: str, matched: str | None, sanitized: SanitizedRequest
    ) -> PolicyDecision:
        return PolicyDecision(
            decision=decision,
            reason=reason,
            matched_rule=matched,
            policy_version_hash=self.version_hash,
            risk=sanitized.risk,
            intent=sanitized.intent,
        )

    def decide(self, sanitized: SanitizedRequest, analysis: ShellAnalysis | None, *, profile: str) -> PolicyDecision:
        commands = analysis.commands if analysis is not None else ()

        for pattern in self._deny:
            for words in commands:
                if pattern.matches(words):
                    return self._decision(
                        Decision.DENY,
                        f"denylisted: {pattern.text!r} matches {shlex.join(words)!r}",
                        f"denylist:{pattern.text}",
                        sanitized,
                    )

        if self.config.mode is Mode.DENY:
            return self._decision(Decision.DENY, "policy mode is deny", "mode:deny", sanitized)

        escalations = sanitized.sandbox_permissions
        asked = [
            *(["network"] if escalations.network else []),
            *(["writable_root"] if escalations.writable_root else []),
            *(f"mount {m}" for m in escalations.extra_mounts),
        ]
        complex_reason = analysis.reason if analysis is not None and analysis.is_complex else None

        programs = frozenset(program_name(words) for words in commands)
        for rule in self._candidates(programs):
            grants = rule.rule.action is Decision.ALLOW
            if not rule.matcher.matches(sanitized, analysis, profile=profile, every_command=grants):
                continue
            why = rule.rule.reason or f"matched {rule.label}"
            if grants:
                if complex_reason is not None:
                    return self._decision(
                        Decision.ASK,
                        f"{why}; but an allow rule does not cover a complex command ({complex_reason})",
                        rule.label,
                        sanitized,
                    )
                if asked:
                    return self._decision(
                        Decision.ASK,
                        f"{why}; but escalation asked: {', '.join(asked)}",
                        rule.label,
                        sanitized,
                    )
            return self._decision(rule.rule.action, why, rule.label, sanitized)

        if asked:
            return self._decision(Decision.ASK, f"escalation asked: {', '.join(asked)}", "escalation", sanitized)

        if complex_reason is None and len(commands) == 1:
            words = commands[0]
            for pattern in self._allow:
                if pattern.matches(words):
                    if RiskLevel.parse(sanitized.risk.risk_level) > self._allow_max:
                        return self._decision(
                            Decision.ASK,
                            f"allowlisted {pattern.text!r} but risk is {sanitized.risk.risk_level}: "
                            f"{sanitized.risk.reason}",
                            f"allowlist:{pattern.text}",
                            sanitized,
                        )
                    return self._decision(
                        Decision.ALLOW,
                        f"allowlisted: {pattern.text!r}",
                        f"allowlist:{pattern.text}",
                        sanitized,
                    )

        if self.config.mode is Mode.ALLOW:
            return self._decision(Decision.ALLOW, "policy mode is allow", "mode:allow", sanitized)

        why = f"complex command ({complex_reason})" if complex_reason else "no rule or allowlist entry matched"
        return self._decision(Decision(self.config.default), why, "default", sanitized)


class PolicySource:
    """The policy in force, reloaded when its file changes.

    A reload that fails keeps the last good policy (so a typo does not halt every agent) and
    exposes the error in ``last_error``; the first load failing raises CONFIG.INVALID.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.last_error: ConfigInvalid | None = None
        self._stamp: tuple[int, int, int] | None = None
        if path is None:
            self._policy = Policy(default_safety_config())
        else:
            self._stamp = self._stat()
            self._policy = Policy(load_safety_config(path), str(path))

    def _stat(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def current(self) -> Policy:
        if self.path is None:
            return self._policy
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._policy = Policy(load_safety_config(self.path), str(self.path))
                self.last_error = None
                log.info("policy reloaded from %s (%s)", self.path, self._policy.version_hash[:12])
            except ConfigInvalid as err:
                self.last_error = err
                log.error("policy reload failed, keeping the last good policy: %s", err)
        return self._policy
